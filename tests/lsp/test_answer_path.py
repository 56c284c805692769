"""What keeps answers within the bound on a loaded machine (issue 13), apart from the request lifecycle: the
websocket answer written in the call that sends it (not in a Task of its own)."""

from __future__ import annotations

import asyncio
import pytest

from lsp.transports import WebSocketWriter


async def test_a_websocket_answer_is_on_the_wire_when_write_returns():
    from websockets.asyncio.client import connect
    from websockets.asyncio.server import serve

    written = asyncio.get_running_loop().create_future()

    async def handler(ws):
        w = WebSocketWriter(ws)
        assert w.writable_now()
        result = w.write(b'{"jsonrpc": "2.0", "id": 1, "result": null}')
        # nothing left to await: the frame went to the transport in the call (pygls would have made a Task)
        written.set_result((result, ws.transport.get_write_buffer_size()))
        await ws.wait_closed()

    async with serve(handler, "127.0.0.1", 0) as srv:
        port = srv.sockets[0].getsockname()[1]
        async with connect(f"ws://127.0.0.1:{port}") as client:
            result, buffered = await written
            assert result is None and buffered == 0
            assert await client.recv() == b'{"jsonrpc": "2.0", "id": 1, "result": null}'   # binary, as pygls'


async def test_a_websocket_that_is_closing_falls_back_to_websockets_send():
    from websockets.asyncio.client import connect
    from websockets.asyncio.server import serve
    from websockets.exceptions import ConnectionClosed

    seen = asyncio.get_running_loop().create_future()

    async def handler(ws):
        await ws.close()
        w = WebSocketWriter(ws)
        res = w.write(b"{}")
        seen.set_result(w.writable_now())
        with pytest.raises(ConnectionClosed):
            await res                                  # websockets' own send, and its own error

    async with serve(handler, "127.0.0.1", 0) as srv:
        port = srv.sockets[0].getsockname()[1]
        async with connect(f"ws://127.0.0.1:{port}"):
            assert await seen is False
