"""lsp/client.py, the one JSON-RPC client of the tests and benchmarks: framing, matching responses, the message
log, the wait-for-ready loop, reading the listening port (against an in-memory peer; the e2e, reliability and
replay tests drive it against the real server)."""

from __future__ import annotations

import asyncio
import json

import pytest

from lsp.client import LISTENING, Client, ServerGone, frame, read_frame, wait_ready


def reader_of(data: bytes) -> asyncio.StreamReader:
    r = asyncio.StreamReader()
    r.feed_data(data)
    r.feed_eof()
    return r


async def test_frames_round_trip_with_extra_headers_and_stray_blank_lines():
    r = reader_of(b"\r\n" + frame({"a": 1}) + frame(b'{"b": "\xc3\xa9"}', b"Content-Type: x\r\n")
                  + b"Content-Length: 50\r\n\r\n{\"cut\"")
    assert await read_frame(r) == {"a": 1}
    assert await read_frame(r) == {"b": "é"}
    assert await read_frame(r) is None                  # a body cut short by end of stream
    assert await read_frame(r) is None


class Peer:
    """The server side of an in-memory connection: what the client wrote, and messages to hand it."""

    def __init__(self):
        self.written: list[dict] = []
        self.inbox: asyncio.Queue = asyncio.Queue()

    async def send(self, data: bytes) -> None:
        self.written.append(await read_frame(reader_of(data)))

    def client(self) -> Client:
        async def close() -> None:
            await self.inbox.put(None)
        return Client(self.send, self.inbox.get, close)


async def test_responses_resolve_by_id_and_everything_is_logged_in_order():
    peer = Peer()
    c = peer.client()
    rid, fut = await c.request("completer/health", {})
    assert peer.written[-1] == {"jsonrpc": "2.0", "id": rid, "method": "completer/health", "params": {}}
    start = c.mark()
    await peer.inbox.put({"jsonrpc": "2.0", "method": "window/showMessage", "params": {"message": "hi"}})
    await peer.inbox.put({"jsonrpc": "2.0", "id": "srv1", "method": "client/registerCapability", "params": {}})
    await peer.inbox.put({"jsonrpc": "2.0", "id": 999, "error": {"code": -32600, "message": "raw"}})
    await peer.inbox.put({"jsonrpc": "2.0", "id": rid, "result": {"ok": True}})
    _, msg = await asyncio.wait_for(fut, 5)
    assert msg["result"] == {"ok": True}
    assert [m.get("method", m.get("id")) for m in c.since(start)] == [
        "window/showMessage", "client/registerCapability", 999, rid]
    assert [m["params"]["message"] for m in c.messages] == ["hi"]
    assert (await c.response(999, start=start))["error"]["code"] == -32600     # a response to raw bytes
    for _ in range(100):                                 # a server->client request is answered with null
        if any(m.get("id") == "srv1" for m in peer.written):
            break
        await asyncio.sleep(0.01)
    assert {"jsonrpc": "2.0", "id": "srv1", "result": None} in peer.written
    await c.close()


async def test_a_closed_connection_fails_the_waiting_callers():
    peer = Peer()
    c = peer.client()
    _, fut = await c.request("textDocument/inlineCompletion", {})
    waiting = asyncio.ensure_future(c.wait_for(lambda m: m.get("method") == "never", timeout=5))
    await asyncio.sleep(0.01)
    await peer.inbox.put(None)                           # the server went away
    with pytest.raises(ServerGone):
        await asyncio.wait_for(fut, 5)
    with pytest.raises(ServerGone):
        await waiting
    await c.wait_closed(5)


async def test_an_unreadable_message_names_the_cause():
    async def recv():
        return json.loads("{not json")

    async def nothing(*_):
        pass

    c = Client(nothing, recv, nothing)
    await c.wait_closed(5)
    assert c.closed and isinstance(c.read_error, ValueError)
    with pytest.raises(ServerGone, match="reading failed"):
        await c.wait_for(lambda m: True, timeout=5)


async def test_wait_ready_polls_until_ready_and_fails_fast_on_an_engine_error():
    answers = iter([{"engineReady": False, "engineError": None}, {"engineReady": True, "engineError": None, "n": 2}])

    async def stats():
        return next(answers)

    assert (await wait_ready(stats, timeout=5, poll_s=0.001))["n"] == 2

    async def broken():
        return {"engineReady": False, "engineError": "no such model"}

    with pytest.raises(RuntimeError, match="no such model"):
        await wait_ready(broken, timeout=5)

    async def never():
        return {"engineReady": False, "engineError": None}

    with pytest.raises(TimeoutError):
        await wait_ready(never, timeout=0.05, poll_s=0.01)


@pytest.mark.parametrize("line,want", [
    ("INFO lsp.listening: completer-lsp listening on ws ('127.0.0.1', 8765)", ("ws", "127.0.0.1", "8765")),
    ("completer-lsp listening on tcp ('::1', 40001, 0, 0), ('127.0.0.1', 40001)", ("tcp", "::1", "40001")),
])
def test_the_listening_port_is_read_from_the_servers_log_line(line, want):
    assert LISTENING.search(line).groups() == want
