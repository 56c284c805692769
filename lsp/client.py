"""The one JSON-RPC/LSP client of the benchmarks and the tests: asyncio, over stdio or TCP (Content-Length frames)
or websockets (one message a frame), plus the server process it talks to.

Only the standard library and ``websockets``: the vLLM helper runs the replay on a bare GPU machine. The tests
import it too (``from lsp.client import ...``) rather than keeping clients of their own, so that a fix to
framing, to reading the listening port or to the wait-for-ready loop reaches every caller.

Every message the server writes is kept, in order, in ``Client.received`` (with its arrival time under
``"_received"``), so that a test can look at what came back between two points (``mark``/``since``/``wait_for``),
including responses to requests it wrote as raw bytes; responses to ``request``/``call``/``ask`` also resolve the
caller's future.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# "completer-lsp listening on ws ('127.0.0.1', 8765)" (lsp/transports.py)
LISTENING = re.compile(r"listening on (ws|tcp) \('([^']*)', (\d+)")


class RpcError(Exception):
    def __init__(self, error: dict):
        super().__init__(f"{error.get('code')}: {error.get('message')}")
        self.code = error.get("code")


class ServerGone(ConnectionError):
    """The connection closed (the server exited or dropped us) while a caller was waiting on it."""


def frame(body: bytes | dict, extra_headers: bytes = b"") -> bytes:
    """One LSP base-protocol frame around ``body`` (a dict is JSON-encoded); ``extra_headers`` end in CRLF."""
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    return b"Content-Length: %d\r\n" % len(body) + extra_headers + b"\r\n" + body


async def read_frame(reader: asyncio.StreamReader) -> dict | None:
    """The next framed message from ``reader``, or None at end of stream."""
    length = None
    while True:
        line = await reader.readline()
        if not line:
            return None
        line = line.strip()
        if not line:
            if length is not None:
                break
            continue
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    try:
        return json.loads(await reader.readexactly(length))
    except asyncio.IncompleteReadError:
        return None


def inline_params(uri: str, line: int, character: int, trigger_kind: int = 2) -> dict:
    """``textDocument/inlineCompletion`` params (trigger kind 2: automatic, as editors send while typing)."""
    return {"textDocument": {"uri": uri}, "position": {"line": line, "character": character},
            "context": {"triggerKind": trigger_kind}}


async def wait_ready(stats, timeout: float = 300.0, poll_s: float = 0.1) -> dict:
    """Poll ``stats()`` (an async call of ``completer/stats``) until the engine is ready and return those stats;
    an engine that failed to start raises at once with its error. The one wait-for-ready loop of tests and
    benchmarks, whichever client they drive the server with."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        s = await stats()
        if s.get("engineReady"):
            return s
        if s.get("engineError"):
            raise RuntimeError(f"engine failed to start: {s['engineError']}")
        await asyncio.sleep(poll_s)
    raise TimeoutError(f"engine not ready after {timeout:.0f} s")


class Client:
    """One JSON-RPC connection: requests resolve futures by id; server->client requests get a null result."""

    def __init__(self, send_bytes, recv, close, transport: Any = None, framed: bool = True):
        self._send_bytes, self._recv, self._close, self._framed = send_bytes, recv, close, framed
        self.transport = transport            # the websocket or the process, for tests that break it on purpose
        self._ids = itertools.count(1)
        self.pending: dict[Any, asyncio.Future] = {}
        self.received: list[dict] = []
        self._arrived = asyncio.Condition()
        self.closed = False
        self.read_error: Exception | None = None
        self._reader = asyncio.ensure_future(self._read())

    @property
    def messages(self) -> list[dict]:
        """Notifications from the server (window/showMessage, $/progress ...), in order."""
        return [m for m in self.received if "method" in m and "id" not in m]

    async def _read(self) -> None:
        try:
            while True:
                msg = await self._recv()
                if msg is None:
                    break
                if isinstance(msg, dict):
                    msg["_received"] = time.perf_counter()
                async with self._arrived:
                    self.received.append(msg)
                    self._arrived.notify_all()
                if not isinstance(msg, dict):
                    continue
                if "id" in msg and ("result" in msg or "error" in msg) and "method" not in msg:
                    fut = self.pending.pop(msg["id"], None)
                    if fut is not None and not fut.done():
                        fut.set_result((msg["_received"], msg))
                elif "method" in msg and "id" in msg:
                    await self.send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
        except (ConnectionError, OSError):
            pass
        except Exception as e:                # an unreadable message: the connection is no longer usable
            self.read_error = e
        finally:
            self.closed = True
            why = f"reading failed: {self.read_error!r}" if self.read_error else "server closed the connection"
            for fut in self.pending.values():
                if not fut.done():
                    fut.set_exception(ServerGone(why))
                    fut.exception()           # retrieved: a caller that stopped waiting is no error
            async with self._arrived:
                self._arrived.notify_all()

    # --- writing ----------------------------------------------------------------------------------------------
    async def send_bytes(self, data: bytes | str) -> None:
        """Write raw bytes (stdio/TCP: may be a broken frame) or one raw websocket message."""
        try:
            await self._send_bytes(data)
        except (ConnectionError, OSError) as e:
            raise ServerGone(f"cannot write to the server: {e}") from e

    async def send(self, msg: Any) -> None:
        """Send one JSON value as a message (framed on stdio/TCP, one frame on a websocket)."""
        body = json.dumps(msg).encode()
        await self.send_bytes(frame(body) if self._framed else body)

    async def request(self, method: str, params: Any = None, rid: Any = None) -> tuple[Any, asyncio.Future]:
        """Send a request; returns (id, future of (receive time, response message))."""
        rid = next(self._ids) if rid is None else rid
        fut = asyncio.get_running_loop().create_future()
        self.pending[rid] = fut
        await self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return rid, fut

    async def ask(self, method: str, params: Any = None, timeout: float = 60.0, rid: Any = None) -> dict:
        """The whole response message (``result`` or ``error``) to one request."""
        _, fut = await self.request(method, params, rid)
        _, msg = await asyncio.wait_for(fut, timeout)
        return msg

    async def call(self, method: str, params: Any = None, timeout: float = 300.0) -> Any:
        """The result of one request; an error response raises RpcError."""
        msg = await self.ask(method, params, timeout)
        if "error" in msg:
            raise RpcError(msg["error"])
        return msg["result"]

    async def notify(self, method: str, params: Any = None) -> None:
        await self.send({"jsonrpc": "2.0", "method": method, "params": params})

    # --- reading what came back -------------------------------------------------------------------------------
    def mark(self) -> int:
        """A point in ``received``, for ``since``/``wait_for``."""
        return len(self.received)

    def since(self, start: int) -> list[dict]:
        return list(self.received[start:])

    async def wait_for(self, pred, timeout: float = 30.0, start: int = 0) -> dict:
        """The first message from ``start`` on that satisfies ``pred``, waiting for it to arrive."""
        async def scan() -> dict:
            async with self._arrived:
                while True:
                    for m in self.received[start:]:
                        if pred(m):
                            return m
                    if self.closed:
                        raise ServerGone(f"reading failed: {self.read_error!r}" if self.read_error
                                         else "server closed the connection")
                    await self._arrived.wait()
        return await asyncio.wait_for(scan(), timeout)

    async def response(self, rid: Any, timeout: float = 60.0, start: int = 0) -> dict:
        """The response to request ``rid`` (also one written with ``send_bytes``)."""
        return await self.wait_for(lambda m: isinstance(m, dict) and m.get("id") == rid and "method" not in m
                                   and ("result" in m or "error" in m), timeout, start)

    async def wait_closed(self, timeout: float = 10.0) -> None:
        """Until the server closes the connection."""
        await asyncio.wait_for(asyncio.shield(self._reader), timeout)

    # --- the completer handshake ------------------------------------------------------------------------------
    async def initialize(self, engine_options: dict | None = None, capabilities: dict | None = None,
                         timeout: float = 120.0, **options) -> dict:
        """``initialize`` with ``{"engine": engine_options, **options}`` as initializationOptions, then
        ``initialized``; the whole response (a test may expect an error)."""
        init = dict(options)
        if engine_options is not None:
            init["engine"] = engine_options
        r = await self.ask("initialize", {"processId": None, "rootUri": None, "capabilities": capabilities or {},
                                          "initializationOptions": init}, timeout)
        if "result" in r:
            await self.notify("initialized", {})
        return r

    async def health(self, timeout: float = 30.0) -> dict:
        return await self.call("completer/health", {}, timeout)

    async def wait_ready(self, timeout: float = 300.0) -> dict:
        """The server's stats once its engine is ready (see :func:`wait_ready`)."""
        return await wait_ready(lambda: self.call("completer/stats", {}), timeout)

    async def open_document(self, uri: str, text: str, language_id: str = "python", version: int = 1) -> None:
        await self.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": language_id,
                                                                    "version": version, "text": text}})

    async def inline(self, uri: str, line: int, character: int, timeout: float = 60.0, rid: Any = None) -> dict:
        """The whole response to ``textDocument/inlineCompletion`` at (line, character), triggered automatically."""
        return await self.ask("textDocument/inlineCompletion", inline_params(uri, line, character), timeout, rid)

    async def shutdown(self, timeout: float = 60.0) -> None:
        """``shutdown`` then ``exit``: the end of the session (over stdio the server's process ends)."""
        await self.ask("shutdown", None, timeout)
        await self.notify("exit")

    async def close(self) -> None:
        self._reader.cancel()
        await self._close()


async def open_stdio(proc: asyncio.subprocess.Process) -> Client:
    """A client on a spawned server's stdin/stdout."""
    lock = asyncio.Lock()

    async def send_bytes(data: bytes) -> None:
        async with lock:
            proc.stdin.write(data)
            await proc.stdin.drain()

    async def close() -> None:
        if proc.stdin and not proc.stdin.is_closing():
            proc.stdin.close()

    return Client(send_bytes, lambda: read_frame(proc.stdout), close, transport=proc)


async def open_tcp(host: str, port: int) -> Client:
    reader, writer = await asyncio.open_connection(host, port)

    async def send_bytes(data: bytes) -> None:
        writer.write(data)
        await writer.drain()

    async def close() -> None:
        writer.close()
        try:
            await writer.wait_closed()
        except (ConnectionError, OSError):
            pass

    return Client(send_bytes, lambda: read_frame(reader), close, transport=writer)


async def open_ws(url: str, **connect_kw) -> Client:
    """A client on a websocket (``connect_kw`` go to ``websockets.connect``: origin, additional_headers ...)."""
    import websockets

    ws = await websockets.connect(url, **{"max_size": None, **connect_kw})

    async def send_bytes(data: bytes | str) -> None:
        await ws.send(data.decode("utf-8", "surrogatepass") if isinstance(data, bytes) else data)

    async def recv() -> dict | None:
        try:
            raw = await ws.recv()
        except websockets.ConnectionClosed:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return {"_unparsable": raw}

    return Client(send_bytes, recv, ws.close, transport=ws, framed=False)


def server_command(transport: str | None = "stdio", *args: str, module: str = "lsp.server") -> list[str]:
    """The command line of a ``completer-lsp`` on ``transport`` ("stdio", "ws" or "tcp"; port 0 picks a free one),
    or with no transport option (None) for a caller that appends its own (the editor clients do)."""
    cmd = [sys.executable, "-m", module, "--log-level", "WARNING"]
    if transport is not None:
        cmd += ["--stdio"] if transport == "stdio" else [f"--{transport}", "127.0.0.1:0"]
    return cmd + list(args)


class Server:
    """A server process (spawned) or a listening address (``connect``) that clients are opened on.

    Its log (stderr, and stdout for ws/tcp) goes to ``log_path`` (a new temporary file when not given), where the listening port of a
    ws/tcp server is read from and where a test may look for what the server reported.
    """

    def __init__(self, transport: str = "stdio", server_cmd: str | list[str] | None = None,
                 connect: str | None = None, *, args: tuple[str, ...] = (), env: dict | None = None,
                 log_path: str | os.PathLike | None = None):
        self.transport, self.connect_url = transport, connect
        if isinstance(server_cmd, str):
            server_cmd = shlex.split(server_cmd)
        self.cmd = list(server_cmd) if server_cmd else server_command(transport)
        self.cmd += list(args)
        self.env = {**os.environ, **(env or {})}
        if log_path is None:
            fd, log_path = tempfile.mkstemp(prefix=f"completer-{transport}-", suffix=".log")
            os.close(fd)
        self.log_path = Path(log_path)
        if transport == "stdio" and not server_cmd and "--log-file" not in self.cmd:
            # over stdio the server sends its log to the client (window/logMessage) unless given a file
            self.cmd += ["--log-file", str(self.log_path)]
        self.proc: asyncio.subprocess.Process | None = None
        self.address: tuple[str, int] | None = None
        self._log = None

    @property
    def url(self) -> str:
        if self.connect_url:
            return self.connect_url
        return f"ws://{self.address[0]}:{self.address[1]}"

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    async def launch(self, timeout: float = 120.0) -> None:
        """Start the process; for ws/tcp, wait until its log names the port it listens on."""
        if self.connect_url or self.proc is not None:
            return
        open(self.log_path, "wb").close()
        self._log = open(self.log_path, "ab")      # appending, like the server's own --log-file handler
        stdio = self.transport == "stdio"
        pipe, null = asyncio.subprocess.PIPE, asyncio.subprocess.DEVNULL
        # a ws/tcp server's stdout goes to the log too: what it (or a library in it, or a child process such as
        # vLLM's engine core, whose traceback 2026-12-03b lost) prints there is kept next to its stderr
        self.proc = await asyncio.create_subprocess_exec(*self.cmd, stdin=pipe if stdio else null,
                                                         stdout=pipe if stdio else self._log, stderr=self._log,
                                                         env=self.env)
        if stdio:
            return
        end = time.monotonic() + timeout
        while self.address is None:
            m = LISTENING.search(self.log_text())
            if m:
                self.address = (m.group(2), int(m.group(3)))
            elif self.proc.returncode is not None:
                raise RuntimeError(f"server exited (rc={self.proc.returncode}) before listening: "
                                   f"{shlex.join(self.cmd)}\n{self.log_text()[-2000:]}")
            elif time.monotonic() > end:
                raise TimeoutError(f"server did not listen within {timeout:.0f} s: {shlex.join(self.cmd)}")
            else:
                await asyncio.sleep(0.05)

    async def session(self, engine_options: dict | None, capabilities: dict | None = None,
                      documents: dict[str, str] | None = None, **options) -> Client:
        """A client with ``initialize`` answered (``{"engine": engine_options, **options}``), the engine ready and
        ``documents`` (uri -> text, Python) open."""
        c = await self.start()
        r = await c.initialize(engine_options, capabilities, **options)
        if "result" not in r:
            raise RuntimeError(f"initialize failed: {r}")
        await c.wait_ready()
        for uri, text in (documents or {}).items():
            await c.open_document(uri, text)
        return c

    async def stop(self, client: Client) -> None:
        """End ``client``'s session and wait for a spawned server's process to end (stdio: it ends with it)."""
        await client.shutdown()
        if self.proc is not None and self.transport == "stdio":
            await self.proc.wait()

    async def start(self, **connect_kw) -> Client:
        """A new client connection (starting the process first if needed). On stdio there is only one."""
        await self.launch()
        if self.connect_url:
            return await open_ws(self.connect_url, **connect_kw)
        if self.transport == "stdio":
            return await open_stdio(self.proc)
        if self.transport == "tcp":
            return await open_tcp(*self.address)
        return await open_ws(self.url, **connect_kw)

    def rss_kib(self) -> int:
        """The server process's resident memory (Linux)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    async def stop(self, client: Client | None = None) -> int | None:
        """shutdown/exit through ``client`` (if given), then end the process we started; its exit status."""
        if client is not None:
            try:
                await client.call("shutdown", None, timeout=10)
                await client.notify("exit", None)
            except Exception:
                pass
            await client.close()
        rc = None
        if self.proc is not None:
            if self.transport != "stdio" and self.proc.returncode is None:
                self.proc.terminate()       # a listener outlives its connections: end the one we started
            try:
                rc = await asyncio.wait_for(self.proc.wait(), 15)
            except asyncio.TimeoutError:
                self.proc.kill()
                rc = await self.proc.wait()
        if self._log is not None:
            self._log.close()
        return rc
