"""Process-level behaviour over raw stdio: a vanished client (EOF mid-request) and shutdown/exit end the server."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from e2e_helpers import SERVER_MODULE, frame, response  # noqa: E402

PY = "import os\n\n\ndef main():\n    "


async def start(engine_options, **options):
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", SERVER_MODULE, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL)
    proc.stdin.write(frame({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "processId": None, "rootUri": None, "capabilities": {},
        "initializationOptions": {"engine": engine_options, **options}}}))
    assert "result" in await response(proc.stdout, 1)
    proc.stdin.write(frame({"jsonrpc": "2.0", "method": "initialized", "params": {}}))
    for i in range(600):
        proc.stdin.write(frame({"jsonrpc": "2.0", "id": f"s{i}", "method": "completer/stats"}))
        if (await response(proc.stdout, f"s{i}"))["result"]["engineReady"]:
            return proc
        await asyncio.sleep(0.1)
    raise AssertionError("engine never ready")


async def test_vanished_client_mid_request_ends_the_server(engine_options):
    proc = await start(engine_options, maxTokens=400, debounceMs=0)
    proc.stdin.write(frame({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
        "uri": "file:///a.py", "languageId": "python", "version": 1, "text": PY}}}))
    proc.stdin.write(frame({"jsonrpc": "2.0", "id": 7, "method": "textDocument/inlineCompletion", "params": {
        "textDocument": {"uri": "file:///a.py"}, "position": {"line": 4, "character": 4},
        "context": {"triggerKind": 2}}}))
    await proc.stdin.drain()
    await asyncio.sleep(0.2)
    proc.stdin.close()                       # the editor is gone
    rc = await asyncio.wait_for(proc.wait(), 60)
    assert rc == 0


async def test_shutdown_then_exit(engine_options):
    proc = await start(engine_options)
    proc.stdin.write(frame({"jsonrpc": "2.0", "id": 2, "method": "shutdown"}))
    assert (await response(proc.stdout, 2))["result"] is None
    proc.stdin.write(frame({"jsonrpc": "2.0", "id": 3, "method": "completer/health"}))
    assert (await response(proc.stdout, 3))["error"]["code"] == -32600     # answered, not dropped
    proc.stdin.write(frame({"jsonrpc": "2.0", "method": "exit"}))
    await proc.stdin.drain()
    assert await asyncio.wait_for(proc.wait(), 60) == 0


async def test_engine_that_cannot_start_and_oversized_documents_get_clear_errors():
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", SERVER_MODULE, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL)
    send = proc.stdin.write
    send(frame({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "processId": None, "rootUri": None, "capabilities": {},
        "initializationOptions": {"engine": {"model": "/nonexistent/model", "draft": None, "speculation": "none"},
                                  "maxDocumentChars": 100}}}))
    assert "result" in await response(proc.stdout, 1)       # initialize answers before the engine loads
    for i in range(100):
        send(frame({"jsonrpc": "2.0", "id": f"h{i}", "method": "completer/health"}))
        health = (await response(proc.stdout, f"h{i}"))["result"]
        if health["engineError"]:
            break
        await asyncio.sleep(0.05)
    assert "/nonexistent/model" in health["engineError"] and health["ok"] is False
    send(frame({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
        "uri": "file:///small.py", "languageId": "python", "version": 1, "text": "x = 1\n"}}}))
    send(frame({"jsonrpc": "2.0", "id": 2, "method": "textDocument/inlineCompletion", "params": {
        "textDocument": {"uri": "file:///small.py"}, "position": {"line": 1, "character": 0},
        "context": {"triggerKind": 1}}}))
    err = (await response(proc.stdout, 2))["error"]
    assert err["code"] == -32803 and "/nonexistent/model" in err["message"]
    send(frame({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
        "uri": "file:///big.py", "languageId": "python", "version": 1, "text": "x" * 101}}}))
    send(frame({"jsonrpc": "2.0", "id": 3, "method": "textDocument/inlineCompletion", "params": {
        "textDocument": {"uri": "file:///big.py"}, "position": {"line": 0, "character": 0},
        "context": {"triggerKind": 1}}}))
    err = (await response(proc.stdout, 3))["error"]
    assert err["code"] == -32602 and "not open" in err["message"]
    proc.stdin.close()
    assert await asyncio.wait_for(proc.wait(), 60) == 0
