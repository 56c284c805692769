"""The real server over ``--ws`` with the ``websockets`` client, speaking raw JSON-RPC: ghost text, JSON-RPC errors
for malformed or unknown messages, initialize errors, utf-8 negotiation, several clients, a vanished client."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import sys
from pathlib import Path

import pytest
import pytest_asyncio
import websockets

sys.path.insert(0, str(Path(__file__).parent))
from e2e_helpers import SERVER_MODULE  # noqa: E402

pytestmark = pytest.mark.asyncio(loop_scope="module")

PY = "import os\n\n\ndef read_config(path):\n    with open(path) as f:\n        return f.read()\n\n\ndef main():\n    "


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def ws_url(engine_options):
    """One server process for the module; every test connects its own clients (each gets its own server state)."""
    # websocket clients may only name house:* models unless the operator allows a folder (lsp.security)
    allow = [] if engine_options["model"].startswith("house:") else [
        "--allow-model-dir", str(Path(engine_options["model"]).parent)]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", SERVER_MODULE, "--ws", "127.0.0.1:0", "--log-level", "WARNING", *allow,
        stderr=asyncio.subprocess.PIPE)
    try:
        line = await asyncio.wait_for(proc.stderr.readline(), 60)
        m = re.search(rb"listening on ws .*?(\d+)\)", line)
        assert m, line
        drain = asyncio.ensure_future(proc.stderr.read())
        yield f"ws://127.0.0.1:{int(m.group(1))}"
    finally:
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()
        drain.cancel()


class Peer:
    """A minimal JSON-RPC peer over one websocket: requests by id, notifications recorded."""

    def __init__(self, ws):
        self.ws = ws
        self.ids = itertools.count(1)
        self.pending: dict = {}
        self.notifications: list[dict] = []
        self.orphans: list[dict] = []   # responses without a known id (e.g. parse errors, id null)
        self.reader = asyncio.ensure_future(self._read())

    async def _read(self):
        try:
            async for raw in self.ws:
                msg = json.loads(raw)
                if "method" in msg:
                    self.notifications.append(msg)
                elif msg.get("id") in self.pending:
                    self.pending.pop(msg["id"]).set_result(msg)
                else:
                    self.orphans.append(msg)
        except websockets.ConnectionClosed:
            pass

    def send_raw(self, text: str):
        return self.ws.send(text)

    async def request(self, method: str, params=None, msg_id=None) -> dict:
        msg_id = next(self.ids) if msg_id is None else msg_id
        fut = asyncio.get_running_loop().create_future()
        self.pending[msg_id] = fut
        await self.ws.send(json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}))
        return await asyncio.wait_for(fut, 60)

    async def notify(self, method: str, params) -> None:
        await self.ws.send(json.dumps({"jsonrpc": "2.0", "method": method, "params": params}))

    async def initialize(self, engine_options: dict, encodings=None, **options) -> dict:
        caps = {"general": {"positionEncodings": encodings}} if encodings else {}
        res = await self.request("initialize", {"processId": None, "rootUri": None, "capabilities": caps,
                                                "initializationOptions": {"engine": engine_options,
                                                                          "maxTokens": 12, "debounceMs": 5,
                                                                          **options}})
        if "result" in res:
            await self.notify("initialized", {})
        return res

    async def ready(self) -> dict:
        for _ in range(1200):
            s = (await self.request("completer/stats"))["result"]
            if s["engineReady"]:
                return s
            assert s["engineError"] is None, s["engineError"]
            await asyncio.sleep(0.1)
        raise AssertionError("engine never ready")

    async def open(self, uri: str, text: str) -> None:
        await self.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python",
                                                                    "version": 1, "text": text}})

    def inline(self, uri, line, ch, msg_id=None):
        return self.request("textDocument/inlineCompletion", {
            "textDocument": {"uri": uri}, "position": {"line": line, "character": ch},
            "context": {"triggerKind": 2}}, msg_id=msg_id)


@pytest_asyncio.fixture(loop_scope="module")
async def peer(ws_url, engine_options):
    async with websockets.connect(ws_url, max_size=None) as ws:
        p = Peer(ws)
        res = await p.initialize(engine_options)
        assert "result" in res, res
        await p.ready()
        yield p


async def test_ghost_text_over_websocket(peer):
    await peer.open("file:///w/a.py", PY)
    res = await peer.inline("file:///w/a.py", 9, 4)
    assert "result" in res, res
    items = res["result"]["items"]
    s = (await peer.request("completer/stats"))["result"]
    assert s["server"]["engine_requests"] == 1 and s["engine"]["generated_tokens"] > 0
    for item in items:
        assert item["range"] == {"start": {"line": 9, "character": 4}, "end": {"line": 9, "character": 4}}
        assert isinstance(item["insertText"], str) and item["insertText"]


async def test_malformed_and_unknown_messages_get_jsonrpc_errors(peer):
    await peer.send_raw("{this is not json")
    await peer.send_raw(json.dumps([1, 2, 3]))
    await peer.send_raw(json.dumps({"id": 77, "method": "completer/health"}))          # no "jsonrpc"
    for _ in range(100):
        if len(peer.orphans) >= 3:
            break
        await asyncio.sleep(0.02)
    codes = sorted(m["error"]["code"] for m in peer.orphans)
    assert codes == [-32700, -32600, -32600], peer.orphans
    assert any(m["id"] is None and m["error"]["code"] == -32700 for m in peer.orphans)
    assert any(m["id"] == 77 for m in peer.orphans)
    res = await peer.request("no/such/method", {})
    assert res["error"]["code"] == -32601
    res = await peer.request("textDocument/inlineCompletion", {"textDocument": 3, "position": "x"})
    assert res["error"]["code"] == -32602 and "inlineCompletion" in res["error"]["message"]
    await peer.notify("textDocument/didChange", {"textDocument": {"uri": 5}, "contentChanges": "x"})
    for _ in range(100):
        if any(n["method"] == "window/showMessage" and "didChange" in n["params"]["message"]
               for n in peer.notifications):
            break
        await asyncio.sleep(0.02)
    else:
        pytest.fail(f"no showMessage for a malformed didChange: {peer.notifications}")
    res = await peer.inline("file:///never-opened.py", 0, 0)
    assert res["error"]["code"] == -32602 and "not open" in res["error"]["message"]
    # still serving
    res = await peer.request("completer/health")
    assert res["result"]["ok"] is True


async def test_bad_initialization_options_name_the_field(ws_url, engine_options):
    async with websockets.connect(ws_url) as ws:
        p = Peer(ws)
        res = await p.initialize(engine_options, maxTokens="lots")
        assert res["error"]["code"] == -32602
        assert "maxTokens" in res["error"]["message"]
        res = await p.initialize({**engine_options, "speculation": "telepathy"})
        assert res["error"]["code"] == -32602 and "engine" in res["error"]["message"]
        assert "speculation" in res["error"]["message"]
        res = await p.initialize({**engine_options, "model": "/etc"})      # not an allowed model folder
        assert res["error"]["code"] == -32602 and "not allowed" in res["error"]["message"]


async def test_utf8_negotiated_when_offered(ws_url, engine_options):
    async with websockets.connect(ws_url) as ws:
        p = Peer(ws)
        res = await p.initialize(engine_options, encodings=["utf-8", "utf-16"])
        assert res["result"]["capabilities"]["positionEncoding"] == "utf-8"
        caps = res["result"]["capabilities"]
        assert caps["inlineCompletionProvider"] is not None and caps["completionProvider"] is not None
        await p.ready()
        line = "s = '中文' + x"
        await p.open("file:///w/u8.py", line)
        end = len(line.encode("utf-8"))
        res = await p.inline("file:///w/u8.py", 0, end)
        assert "result" in res, res
        res = await p.inline("file:///w/u8.py", 0, len("s = '") + 1)    # inside 中's three bytes
        assert res["error"]["code"] == -32602 and "UTF-8" in res["error"]["message"]


async def test_vanished_client_aborts_its_requests_and_others_keep_working(ws_url, engine_options):
    async with websockets.connect(ws_url) as ws2:
        watcher = Peer(ws2)
        assert "result" in await watcher.initialize(engine_options)
        await watcher.ready()
        for attempt in range(6):
            ws = await websockets.connect(ws_url)
            p = Peer(ws)
            assert "result" in await p.initialize(engine_options, maxTokens=400, debounceMs=0)
            await p.ready()
            await p.open("file:///w/gone.py", PY)
            before = (await watcher.request("completer/stats"))["result"]["engine"]
            msg_id = 1000 + attempt
            fut = asyncio.ensure_future(p.inline("file:///w/gone.py", 9, 4, msg_id=msg_id))
            for _ in range(400):
                s = (await watcher.request("completer/stats"))["result"]["engine"]
                if s["requests_started"] > before["requests_started"] or fut.done():
                    break
                await asyncio.sleep(0.005)
            if fut.done():
                await ws.close()
                continue
            ws.transport.abort() if hasattr(ws, "transport") else await ws.close()   # vanish mid-request
            fut.cancel()
            for _ in range(300):
                s = (await watcher.request("completer/stats"))["result"]["engine"]
                if s["requests_aborted"] > before["requests_aborted"]:
                    break
                await asyncio.sleep(0.01)
            assert s["requests_aborted"] > before["requests_aborted"], s
            await watcher.open("file:///w/still.py", PY)
            res = await watcher.inline("file:///w/still.py", 9, 4)
            assert "result" in res, res
            return
        pytest.fail("every request finished before the client could vanish")


async def test_one_client_shutting_down_leaves_the_engine_to_the_others(ws_url, engine_options):
    async with websockets.connect(ws_url) as ws_a, websockets.connect(ws_url) as ws_b:
        a, b = Peer(ws_a), Peer(ws_b)
        assert "result" in await a.initialize(engine_options)
        assert "result" in await b.initialize(engine_options)
        await a.ready()
        assert (await a.request("shutdown"))["result"] is None
        assert (await a.request("completer/health"))["error"]["code"] == -32600   # after shutdown
        await a.notify("exit", None)
        await asyncio.wait_for(a.reader, 10)                      # the server closed only a's connection
        s = await b.ready()
        assert s["engineError"] is None
        await b.open("file:///w/b.py", PY)
        assert "result" in await b.inline("file:///w/b.py", 9, 4)


async def test_two_clients_same_document_at_once(ws_url, engine_options):
    """Engine request ids are unique per process, not per connection: both clients get ghost text."""
    async with websockets.connect(ws_url) as ws_a, websockets.connect(ws_url) as ws_b:
        peers = [Peer(ws_a), Peer(ws_b)]
        for p in peers:
            assert "result" in await p.initialize(engine_options, debounceMs=0)
            await p.ready()
            await p.open("file:///w/same.py", PY)
        results = await asyncio.gather(*(p.inline("file:///w/same.py", 9, 4) for p in peers))
        assert all("result" in r for r in results), results
