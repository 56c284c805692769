"""The real server over ``--tcp``: LSP framing on a socket, two clients one after the other on one process."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from e2e_helpers import SERVER_MODULE, frame, response  # noqa: E402


async def test_tcp_serves_clients_one_after_another(engine_options):
    allow = [] if engine_options["model"].startswith("house:") else [
        "--allow-model-dir", str(Path(engine_options["model"]).parent)]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", SERVER_MODULE, "--tcp", "127.0.0.1:0", *allow, stderr=asyncio.subprocess.PIPE)
    try:
        line = await asyncio.wait_for(proc.stderr.readline(), 60)
        port = int(re.search(rb"listening on tcp .*?(\d+)\)", line).group(1))
        for round_ in range(2):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(frame({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "processId": None, "rootUri": None, "capabilities": {},
                "initializationOptions": {"engine": engine_options, "maxTokens": 8}}}))
            assert "result" in await response(reader, 1)
            writer.write(frame({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
                "uri": "file:///t.py", "languageId": "python", "version": 1, "text": "def f(x):\n    "}}}))
            writer.write(frame({"jsonrpc": "2.0", "id": 2, "method": "textDocument/inlineCompletion", "params": {
                "textDocument": {"uri": "file:///t.py"}, "position": {"line": 1, "character": 4},
                "context": {"triggerKind": 1}}}))
            res = await response(reader, 2)
            assert "items" in res["result"], res
            writer.write(b"Content-Length: 9\r\n\r\n{bad json")                 # still serving afterwards
            writer.write(frame({"jsonrpc": "2.0", "id": 3, "method": "completer/stats"}))
            s = (await response(reader, 3))["result"]
            assert s["server"]["requests_received"] == 1            # per connection
            assert s["engine"]["requests_started"] == round_ + 1    # one engine for the whole process
            writer.close()
            await writer.wait_closed()
    finally:
        proc.terminate()
        await proc.wait()
