"""A client's mistakes are one log line each; a server bug keeps its traceback (issue 14)."""

from __future__ import annotations

import asyncio
import io
import logging

from pygls.exceptions import JsonRpcInvalidParams

from lsp.client import Server
from lsp import client_errors


def _log_through_filter(error: BaseException) -> str:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(client_errors.Filter())
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger = logging.getLogger("test.client_errors")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        try:
            raise error
        except BaseException:
            logger.exception('Exception occurred for message "%s"', 7)
    finally:
        logger.removeHandler(handler)
    return out.getvalue()


def test_the_filter_keeps_tracebacks_of_bugs_only():
    client = _log_through_filter(JsonRpcInvalidParams("line 9 is past the end of file:///a.py"))
    assert client == 'WARNING client error: Exception occurred for message "7": line 9 is past the end of file:///a.py\n'
    bug = _log_through_filter(KeyError("oops"))
    assert bug.startswith('ERROR Exception occurred for message "7"\nTraceback (most recent call last):')
    assert "KeyError: 'oops'" in bug


def test_client_mistakes_over_stdio_are_one_line_each(tmp_path):
    async def session() -> str:
        server = Server("stdio", log_path=tmp_path / "server.log")
        c = await server.start()
        await c.initialize({"model": "house:target", "draft": "house:draft", "device": "cpu"})
        await c.open_document("file:///a.py", "x = 1\n")
        bad = [{"uri": "file:///nope.py", "line": 0}, {"uri": "file:///a.py", "line": 9},
               {"uri": "file:///a.py", "line": -1}]
        for b in bad:
            r = await c.ask("textDocument/inlineCompletion", {
                "textDocument": {"uri": b["uri"]}, "position": {"line": b["line"], "character": 0},
                "context": {"triggerKind": 2}})
            assert r["error"]["code"] == -32602
        assert (await c.ask("no/such/method", {}))["error"]["code"] == -32601
        await c.send_bytes(b"Content-Length: 5\r\n\r\n{bad}")
        assert (await c.ask("completer/prompt", {"x": 1}))["error"]["code"] == -32602
        await c.ask("shutdown")
        await c.notify("exit")
        await server.proc.wait()
        return server.log_text()

    log = asyncio.run(session())
    assert "Traceback" not in log and "sub-exception" not in log, log
    lines = [line for line in log.splitlines() if line.strip()]
    assert all(" WARNING " in line for line in lines), log
    assert any("client error: unable to structure a message: ValueError: Position.line should be in range "
               "[0:2147483647], but was -1." in line for line in lines), log
    assert sum("client error:" in line for line in lines) == 5, log   # 3 positions, bad JSON, prompt params
