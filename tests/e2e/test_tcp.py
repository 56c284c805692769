"""The real server over ``--tcp``: LSP framing on a socket, two clients one after the other on one process."""

from __future__ import annotations

from lsp.client import Server


async def test_tcp_serves_clients_one_after_another(engine_options, tmp_path):
    server = Server("tcp", log_path=tmp_path / "tcp.log")
    try:
        for round_ in range(2):
            c = await server.start()
            assert "result" in await c.initialize(engine_options, maxTokens=8)
            await c.open_document("file:///t.py", "def f(x):\n    ")
            res = await c.ask("textDocument/inlineCompletion", {
                "textDocument": {"uri": "file:///t.py"}, "position": {"line": 1, "character": 4},
                "context": {"triggerKind": 1}}, timeout=300)
            assert "items" in res["result"], res
            await c.send_bytes(b"Content-Length: 9\r\n\r\n{bad json")              # still serving afterwards
            s = await c.call("completer/stats", {})
            assert s["server"]["requests_received"] == 1            # per connection
            assert s["engine"]["requests_started"] == round_ + 1    # one engine for the whole process
            await c.close()
    finally:
        await server.stop()
