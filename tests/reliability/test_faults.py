"""Faults over a real server process: the engine dies mid-request (injected inside the real TorchEngine's step via
``--fault-after-steps``), and clients that vanish mid-stream (websocket dropped without a close handshake, or
closed) leave no engine request running."""

from __future__ import annotations

import asyncio

from lsp.client import Server

DOC = "import os\n\n\ndef read_config(path):\n    with open(path) as f:\n        \n"
URI = "file:///faults/a.py"


def inline(uri: str, line: int, character: int) -> dict:
    return {"textDocument": {"uri": uri}, "position": {"line": line, "character": character},
            "context": {"triggerKind": 2}}


async def test_engine_dies_mid_request_then_restarts(engine_options, tmp_path):
    server = Server("stdio", args=("--fault-after-steps", "1"), log_path=tmp_path / "server.log")
    c = await server.start()
    try:
        assert "result" in await c.initialize(engine_options, maxTokens=16, debounceMs=0)
        await c.wait_ready()
        await c.notify("textDocument/didOpen", {"textDocument": {"uri": URI, "languageId": "python", "version": 1,
                                                                 "text": DOC}})
        r = await c.ask("textDocument/inlineCompletion", inline(URI, 5, 8))
        assert r["error"]["code"] == -32803 and "engine failed" in r["error"]["message"], r
        assert "InjectedFault" in r["error"]["message"]
        for _ in range(3):                                        # the restarted engine serves again
            r = await c.ask("textDocument/inlineCompletion", inline(URI, 5, 8))
            assert "result" in r, r
        s = await c.call("completer/stats", {})
        sup = s["engine"]["supervisor"]
        assert sup["engine_failures"] == 1 and sup["restarts"] == 1 and sup["requests_failed"] == 1
        assert sup["inflight"] == 0 and (await c.health())["ok"]
    finally:
        await server.stop(c)
    assert "engine restarted" in (tmp_path / "server.log").read_text()


def running(stats: dict) -> int:
    e = stats["engine"]
    return e["requests_started"] - e["requests_finished"] - e["requests_aborted"]


async def test_vanished_clients_leave_no_engine_requests(tiny_pair, engine_options, tmp_path):
    s = Server("ws", args=("--allow-model-dir", str(tiny_pair[0].parent)), log_path=tmp_path / "ws.log")
    try:
        watcher = await s.start()
        assert "result" in await watcher.initialize(engine_options, maxTokens=400, debounceMs=0)
        await watcher.wait_ready()
        for how in ("drop", "close"):
            victim = await s.start()
            assert "result" in await victim.initialize(engine_options, maxTokens=400, debounceMs=0)
            for i in range(3):                                    # three documents, one long completion each
                uri = f"file:///faults/{how}{i}.py"
                await victim.notify("textDocument/didOpen", {"textDocument": {
                    "uri": uri, "languageId": "python", "version": 1, "text": DOC}})
                await victim.request("textDocument/inlineCompletion", inline(uri, 5, 8))
            stats = {}
            for _ in range(200):                                  # until the engine is working on them
                stats = await watcher.call("completer/stats", {})
                if running(stats) > 0:
                    break
                await asyncio.sleep(0.02)
            assert running(stats) > 0, stats["engine"]
            aborted_before = stats["engine"]["requests_aborted"]
            if how == "drop":
                victim.transport.transport.abort()                       # no close frame: the client just vanished
            else:
                await victim.transport.close()
            for _ in range(250):
                stats = await watcher.call("completer/stats", {})
                if running(stats) == 0:
                    break
                await asyncio.sleep(0.02)
            assert running(stats) == 0, stats["engine"]
            assert stats["engine"]["requests_aborted"] > aborted_before
            assert stats["engine"]["supervisor"]["inflight"] == 0
        assert (await watcher.health())["ok"]
        await watcher.close()
    finally:
        await s.stop()
