"""stdio, TCP and websocket transports: frames are read into each connection's bounded :class:`lsp.inbox.Inbox`
(stale completion requests collapsed per document, "busy" over capacity) and handed to pygls' protocol in order.

Unlike pygls' ``start_tcp``/``start_ws`` (one protocol for the whole process, and the process ends when the first
client leaves), every TCP or websocket connection gets its own server (its own documents, settings and request
lifecycle) and all of them share one :class:`EngineHost`, so the model is loaded once. When a client vanishes
(EOF, closed socket) its requests in flight are cancelled, which aborts their engine requests. The engine is
closed when the process ends.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
from typing import Callable

from pygls.io_ import StdinAsyncReader, StdoutWriter

from . import security
from .engine_host import EngineHost
from .inbox import Inbox, frame_reader, pump

log = logging.getLogger(__name__)
# "completer-lsp listening on ws ('127.0.0.1', 8765)": written at INFO whatever --log-level says (lsp.server sets this
# logger's level), as clients read the port from it
announce = logging.getLogger("lsp.listening")


def _limited(reader, server, policy: security.Policy):
    """Frames over ``--max-message-bytes`` are skipped unread and answered with -32600 (lsp.security)."""
    def oversize(n: int) -> None:
        server.protocol.send_error(None, -32600, f"message of {n} bytes exceeds the limit of "
                                                 f"{policy.max_message_bytes} (--max-message-bytes)")
    return security.FrameLimitReader(reader, policy.max_message_bytes, oversize)


class WebSocketWriter:
    """pygls' writer interface over a websocket, writing each message at once.

    pygls' own ``WebSocketWriter`` returns ``websocket.send(...)``, a coroutine that pygls wraps in a Task, so an
    answer reached the socket only when the event loop came round to that Task: at 50 clients on 2 cores, 170 ms
    (p99) and up to 320 ms after the answer was decided, on top of a 1 s bound (issue 13). Here the frame is
    handed to the transport in the same call (``transport.write`` sends what the socket takes and buffers the
    rest), as a binary frame like pygls'; when that is not possible (the connection is not open, the write buffer
    is over its high-water mark, a fragmented send is in progress, or a websockets version without these
    attributes), it falls back to ``websocket.send``."""

    def __init__(self, ws):
        self._ws = ws

    def close(self):
        return self._ws.close()

    def write(self, data: bytes):
        if self.writable_now():
            try:
                self._ws.protocol.send_binary(data)
                self._ws.send_data()
            except Exception:          # the transport failed (the client is gone): the reader ends the connection
                log.debug("websocket write failed", exc_info=True)
            return None
        return self._ws.send(data)

    def writable_now(self) -> bool:
        from websockets.protocol import State

        ws = self._ws
        protocol = getattr(ws, "protocol", None)
        return (protocol is not None and getattr(protocol, "state", None) is State.OPEN
                and hasattr(ws, "send_data") and getattr(ws, "paused", True) is False
                and getattr(ws, "send_in_progress", False) is None)


def _inbox(server) -> Inbox:
    """The connection's bounded inbox (lsp.inbox); the server reports it in completer/stats."""
    server.inbox = Inbox(server.protocol.send_error)
    return server.inbox


async def _finish(server) -> None:
    try:
        await server.close()
    except Exception:
        log.exception("closing the connection's server failed")


def serve_stdio(server, host: EngineHost, policy: security.Policy, client_log=None) -> None:
    """``client_log``: an :class:`lsp.client_log.ClientLog` that sends the log to this client while it is connected."""

    async def main() -> None:
        server._stop_event = stop = threading.Event()
        if client_log is not None:
            client_log.connect(server, asyncio.get_running_loop())
        reader = _limited(StdinAsyncReader(sys.stdin.buffer, server.thread_pool), server, policy)
        server.protocol.set_writer(StdoutWriter(sys.stdout.buffer))
        try:
            await pump(frame_reader(reader), _inbox(server), server.protocol, stop,
                       error_handler=server.report_server_error)
        finally:
            if client_log is not None:
                client_log.disconnect()
            log.info("client gone (end of input): aborting its requests")
            await _finish(server)
            await host.close()

    try:
        asyncio.run(main())
    except BrokenPipeError:
        log.error("connection to the client is lost")
    finally:
        if server._thread_pool is not None:
            server._thread_pool.shutdown(wait=False, cancel_futures=True)


def serve_tcp(make_server: Callable[[], object], bind: str, port: int, host: EngineHost,
              policy: security.Policy) -> None:

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server = make_server()
        server.exit_hook = writer.close
        server.protocol.set_writer(writer)
        try:
            await pump(frame_reader(_limited(reader, server, policy)), _inbox(server), server.protocol,
                       error_handler=server.report_server_error)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            await _finish(server)
            writer.close()

    async def main() -> None:
        srv = await asyncio.start_server(connection, bind, port)
        announce.info("completer-lsp listening on tcp %s", ", ".join(str(s.getsockname()) for s in srv.sockets))
        try:
            async with srv:
                await srv.serve_forever()
        finally:
            await host.close()

    asyncio.run(main())


def serve_ws(make_server: Callable[[], object], bind: str, port: int, host: EngineHost,
             policy: security.Policy) -> None:

    from websockets.asyncio.server import serve

    async def connection(websocket) -> None:
        server = make_server()
        server.exit_hook = lambda: asyncio.ensure_future(websocket.close())
        from websockets.exceptions import ConnectionClosed

        server.protocol.set_writer(WebSocketWriter(websocket), include_headers=False)

        async def read() -> bytes | None:
            try:
                data = await websocket.recv(decode=False)
            except ConnectionClosed:
                return None
            return data if isinstance(data, bytes) else data.encode("utf-8")

        try:
            await pump(read, _inbox(server), server.protocol, error_handler=server.report_server_error)
        finally:
            await websocket.close()
            await _finish(server)

    async def main() -> None:
        async with serve(connection, bind, port, **security.ws_serve_kwargs(policy)) as srv:
            announce.info("completer-lsp listening on ws %s", ", ".join(str(s.getsockname()) for s in srv.sockets))
            try:
                await srv.serve_forever()
            finally:
                await host.close()

    asyncio.run(main())
