"""lsp.client.Server keeps what a ws/tcp server prints on stdout in its log, beside stderr: vLLM's engine core
logged its fatal traceback to stdout and the 2026-12-03b device run lost it (stdout went to /dev/null)."""

from __future__ import annotations

import sys

from lsp.client import Server

FAKE = ("import sys, time\n"
        "print('engine core traceback on stdout', flush=True)\n"
        "print(\"completer-lsp listening on ws ('127.0.0.1', 1)\", file=sys.stderr, flush=True)\n"
        "time.sleep(30)\n")


async def test_a_ws_servers_stdout_reaches_its_log(tmp_path):
    server = Server("ws", server_cmd=[sys.executable, "-c", FAKE], log_path=tmp_path / "server.log")
    try:
        await server.launch(timeout=30)
        assert server.address == ("127.0.0.1", 1)
        assert "engine core traceback on stdout" in server.log_text()
    finally:
        await server.stop()
