"""Process-level behaviour over raw stdio: a vanished client (EOF mid-request) and shutdown/exit end the server."""

from __future__ import annotations

import asyncio

from lsp.client import Client, Server

PY = "import os\n\n\ndef main():\n    "


async def start(engine_options, tmp_path, **options) -> tuple[Server, Client]:
    server = Server("stdio", log_path=tmp_path / "server.log")
    c = await server.start()
    assert "result" in await c.initialize(engine_options, **options)
    await c.wait_ready()
    return server, c


async def test_vanished_client_mid_request_ends_the_server(engine_options, tmp_path):
    server, c = await start(engine_options, tmp_path, maxTokens=400, debounceMs=0)
    await c.open_document("file:///a.py", PY)
    await c.request("textDocument/inlineCompletion", {
        "textDocument": {"uri": "file:///a.py"}, "position": {"line": 4, "character": 4},
        "context": {"triggerKind": 2}})
    await asyncio.sleep(0.2)
    await c.close()                          # the editor is gone: stdin closed mid-request
    assert await asyncio.wait_for(server.proc.wait(), 60) == 0


async def test_shutdown_then_exit(engine_options, tmp_path):
    server, c = await start(engine_options, tmp_path)
    assert (await c.ask("shutdown"))["result"] is None
    assert (await c.ask("completer/health"))["error"]["code"] == -32600     # answered, not dropped
    await c.notify("exit")
    assert await asyncio.wait_for(server.proc.wait(), 60) == 0


async def test_engine_that_cannot_start_and_oversized_documents_get_clear_errors(tmp_path):
    server = Server("stdio", log_path=tmp_path / "server.log")
    c = await server.start()
    r = await c.initialize({"model": "/nonexistent/model", "draft": None, "speculation": "none"},
                           maxDocumentChars=100)
    assert "result" in r                                     # initialize answers before the engine loads
    for _ in range(100):
        health = await c.health()
        if health["engineError"]:
            break
        await asyncio.sleep(0.05)
    assert "/nonexistent/model" in health["engineError"] and health["ok"] is False
    await c.open_document("file:///small.py", "x = 1\n")
    err = (await c.ask("textDocument/inlineCompletion", {
        "textDocument": {"uri": "file:///small.py"}, "position": {"line": 1, "character": 0},
        "context": {"triggerKind": 1}}))["error"]
    assert err["code"] == -32803 and "/nonexistent/model" in err["message"]
    await c.open_document("file:///big.py", "x" * 101)
    err = (await c.ask("textDocument/inlineCompletion", {
        "textDocument": {"uri": "file:///big.py"}, "position": {"line": 0, "character": 0},
        "context": {"triggerKind": 1}}))["error"]
    assert err["code"] == -32602 and "not open" in err["message"]
    await c.close()
    assert await asyncio.wait_for(server.proc.wait(), 60) == 0
