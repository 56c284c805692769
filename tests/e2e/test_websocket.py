"""The real server over ``--ws`` with the ``websockets`` client, speaking raw JSON-RPC: ghost text, JSON-RPC errors
for malformed or unknown messages, initialize errors, utf-8 negotiation, several clients, a vanished client."""

from __future__ import annotations

import asyncio
import json

import pytest
import pytest_asyncio

from lsp.client import Client, Server

pytestmark = pytest.mark.asyncio(loop_scope="module")

PY = "import os\n\n\ndef read_config(path):\n    with open(path) as f:\n        return f.read()\n\n\ndef main():\n    "


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def ws_server(tmp_path_factory):
    """One server process for the module; every test connects its own clients (each gets its own server state)."""
    server = Server("ws", log_path=tmp_path_factory.mktemp("ws") / "server.log")
    await server.launch()
    yield server
    await server.stop()


async def init(c: Client, engine_options: dict, encodings=None, **options) -> dict:
    """initialize with this module's settings (short completions, short debounce); the whole response."""
    caps = {"general": {"positionEncodings": encodings}} if encodings else {}
    return await c.initialize(engine_options, capabilities=caps, **{"maxTokens": 12, "debounceMs": 5, **options})


@pytest_asyncio.fixture(loop_scope="module")
async def peer(ws_server, engine_options):
    c = await ws_server.start()
    res = await init(c, engine_options)
    assert "result" in res, res
    await c.wait_ready()
    yield c
    await c.close()


async def test_ghost_text_over_websocket(peer):
    await peer.open_document("file:///w/a.py", PY)
    res = await peer.inline("file:///w/a.py", 9, 4)
    assert "result" in res, res
    items = res["result"]["items"]
    s = await peer.call("completer/stats")
    assert s["server"]["engine_requests"] == 1 and s["engine"]["generated_tokens"] > 0
    for item in items:
        assert item["range"] == {"start": {"line": 9, "character": 4}, "end": {"line": 9, "character": 4}}
        assert isinstance(item["insertText"], str) and item["insertText"]


async def test_malformed_and_unknown_messages_get_jsonrpc_errors(peer):
    start = peer.mark()
    await peer.send_bytes("{this is not json")
    await peer.send_bytes(json.dumps([1, 2, 3]))
    await peer.send_bytes(json.dumps({"id": 77, "method": "completer/health"}))          # no "jsonrpc"
    for _ in range(100):
        errors = [m for m in peer.since(start) if "error" in m]
        if len(errors) >= 3:
            break
        await asyncio.sleep(0.02)
    codes = sorted(m["error"]["code"] for m in errors)
    assert codes == [-32700, -32600, -32600], errors
    assert any(m["id"] is None and m["error"]["code"] == -32700 for m in errors)
    assert any(m["id"] == 77 for m in errors)
    res = await peer.ask("no/such/method", {})
    assert res["error"]["code"] == -32601
    res = await peer.ask("textDocument/inlineCompletion", {"textDocument": 3, "position": "x"})
    assert res["error"]["code"] == -32602 and "inlineCompletion" in res["error"]["message"]
    await peer.notify("textDocument/didChange", {"textDocument": {"uri": 5}, "contentChanges": "x"})
    for _ in range(100):
        if any(n["method"] == "window/showMessage" and "didChange" in n["params"]["message"]
               for n in peer.messages):
            break
        await asyncio.sleep(0.02)
    else:
        pytest.fail(f"no showMessage for a malformed didChange: {peer.messages}")
    res = await peer.inline("file:///never-opened.py", 0, 0)
    assert res["error"]["code"] == -32602 and "not open" in res["error"]["message"]
    # still serving
    assert (await peer.health())["ok"] is True


async def test_bad_initialization_options_name_the_field(ws_server, engine_options):
    p = await ws_server.start()
    res = await init(p, engine_options, maxTokens="lots")
    assert res["error"]["code"] == -32602
    assert "maxTokens" in res["error"]["message"]
    res = await init(p, {**engine_options, "speculation": "telepathy"})
    assert res["error"]["code"] == -32602 and "engine" in res["error"]["message"]
    assert "speculation" in res["error"]["message"]
    res = await init(p, {**engine_options, "model": "/etc"})      # not an allowed model folder
    assert res["error"]["code"] == -32602 and "not allowed" in res["error"]["message"]
    await p.close()


async def test_utf8_negotiated_when_offered(ws_server, engine_options):
    p = await ws_server.start()
    res = await init(p, engine_options, encodings=["utf-8", "utf-16"])
    assert res["result"]["capabilities"]["positionEncoding"] == "utf-8"
    caps = res["result"]["capabilities"]
    assert caps["inlineCompletionProvider"] is not None and caps["completionProvider"] is not None
    await p.wait_ready()
    line = "s = '中文' + x"
    await p.open_document("file:///w/u8.py", line)
    end = len(line.encode("utf-8"))
    res = await p.inline("file:///w/u8.py", 0, end)
    assert "result" in res, res
    res = await p.inline("file:///w/u8.py", 0, len("s = '") + 1)    # inside 中's three bytes
    assert res["error"]["code"] == -32602 and "UTF-8" in res["error"]["message"]
    await p.close()


async def test_vanished_client_aborts_its_requests_and_others_keep_working(ws_server, engine_options):
    watcher = await ws_server.start()
    assert "result" in await init(watcher, engine_options)
    await watcher.wait_ready()
    try:
        for attempt in range(6):
            p = await ws_server.start()
            assert "result" in await init(p, engine_options, maxTokens=400, debounceMs=0)
            await p.wait_ready()
            await p.open_document("file:///w/gone.py", PY)
            before = (await watcher.call("completer/stats"))["engine"]
            _, fut = await p.request("textDocument/inlineCompletion", {
                "textDocument": {"uri": "file:///w/gone.py"}, "position": {"line": 9, "character": 4},
                "context": {"triggerKind": 2}})
            for _ in range(400):
                s = (await watcher.call("completer/stats"))["engine"]
                if s["requests_started"] > before["requests_started"] or fut.done():
                    break
                await asyncio.sleep(0.005)
            if fut.done():
                await p.close()
                continue
            p.transport.transport.abort()                                # vanish mid-request, no close frame
            for _ in range(300):
                s = (await watcher.call("completer/stats"))["engine"]
                if s["requests_aborted"] > before["requests_aborted"]:
                    break
                await asyncio.sleep(0.01)
            assert s["requests_aborted"] > before["requests_aborted"], s
            await watcher.open_document("file:///w/still.py", PY)
            res = await watcher.inline("file:///w/still.py", 9, 4)
            assert "result" in res, res
            return
        pytest.fail("every request finished before the client could vanish")
    finally:
        await watcher.close()


async def test_one_client_shutting_down_leaves_the_engine_to_the_others(ws_server, engine_options):
    a, b = await ws_server.start(), await ws_server.start()
    assert "result" in await init(a, engine_options)
    assert "result" in await init(b, engine_options)
    await a.wait_ready()
    assert (await a.ask("shutdown"))["result"] is None
    assert (await a.ask("completer/health"))["error"]["code"] == -32600   # after shutdown
    await a.notify("exit", None)
    await a.wait_closed(10)                                   # the server closed only a's connection
    s = await b.wait_ready()
    assert s["engineError"] is None
    await b.open_document("file:///w/b.py", PY)
    assert "result" in await b.inline("file:///w/b.py", 9, 4)
    await b.close()


async def test_two_clients_same_document_at_once(ws_server, engine_options):
    """Engine request ids are unique per process, not per connection: both clients get ghost text."""
    peers = [await ws_server.start(), await ws_server.start()]
    for p in peers:
        assert "result" in await init(p, engine_options, debounceMs=0)
        await p.wait_ready()
        await p.open_document("file:///w/same.py", PY)
    results = await asyncio.gather(*(p.inline("file:///w/same.py", 9, 4) for p in peers))
    assert all("result" in r for r in results), results
    for p in peers:
        await p.close()
