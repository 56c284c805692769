"""Positions a client gets wrong, and the suggestion selected in the editor's list (issue 14), over raw stdio."""

from __future__ import annotations

import pytest

from lsp.client import Client, Server
from tests.helpers.tiny_models import house_v1_options

URI = "file:///w/positions.py"
TEXT = "import os\n\n\ndef main():\n    result = os.path.join('a', 'b')\n    return result\n"


@pytest.fixture
async def server(tmp_path):
    return Server("stdio", log_path=tmp_path / "server.log")


@pytest.fixture
async def client(server, engine_options):
    c = await server.start()
    assert "result" in await c.initialize(engine_options, maxTokens=12, debounceMs=0)
    await c.wait_ready()
    await c.open_document(URI, TEXT)
    yield c
    await c.ask("shutdown")
    await c.notify("exit")
    await server.proc.wait()


def inline(line: int, character: int, **context) -> dict:
    return {"textDocument": {"uri": URI}, "position": {"line": line, "character": character},
            "context": {"triggerKind": 2, **context}}


async def test_a_negative_line_is_a_clear_32602(client: Client):
    r = await client.ask("textDocument/inlineCompletion", inline(-1, 0))
    assert r["error"]["code"] == -32602
    message = r["error"]["message"]
    assert "sub-exception" not in message and "While structuring" not in message
    assert message == ("invalid params for textDocument/inlineCompletion: "
                       "Position.line should be in range [0:2147483647], but was -1 @ $.params.position")
    assert "result" in await client.ask("completer/health")       # and the server keeps serving


# house v1: it writes something after `return result` (house v2, the default, ends the line there: no item to check)
@pytest.mark.parametrize("engine_options", [house_v1_options()])
async def test_a_character_past_the_line_end_is_clamped_and_the_range_says_where(client: Client):
    r = await client.ask("textDocument/inlineCompletion", inline(5, 999))
    items = r["result"]["items"]
    assert items, "the house target completes after `return result`"
    end = len("    return result")
    assert all(i["range"] == {"start": {"line": 5, "character": end}, "end": {"line": 5, "character": end}}
               for i in items)


async def test_the_selected_suggestion_is_extended_and_its_range_replaced(client: Client):
    # The user typed `os.pa` and the list has `path` selected: ghost text must start with `path`.
    await client.notify("textDocument/didChange", {
        "textDocument": {"uri": URI, "version": 2},
        "contentChanges": [{"range": {"start": {"line": 5, "character": 17}, "end": {"line": 5, "character": 17}},
                            "text": "\n    os.pa"}]})
    selected = {"range": {"start": {"line": 6, "character": 7}, "end": {"line": 6, "character": 9}},
                "text": "path"}
    r = await client.ask("textDocument/inlineCompletion", inline(6, 9, selectedCompletionInfo=selected))
    items = r["result"]["items"]
    assert items, "the house target completes after `os.path`"
    assert all(i["range"] == selected["range"] and i["insertText"].startswith("path") and len(i["insertText"]) > 4
               for i in items), items
    # A range that is not in the document is a clear -32602.
    bad = {"range": {"start": {"line": 60, "character": 0}, "end": {"line": 60, "character": 2}}, "text": "x"}
    r = await client.ask("textDocument/inlineCompletion", inline(6, 9, selectedCompletionInfo=bad))
    assert r["error"]["code"] == -32602 and "selectedCompletionInfo.range" in r["error"]["message"]


async def test_a_cancel_for_an_answered_request_is_not_a_warning(client: Client, server: Server):
    r = await client.ask("textDocument/inlineCompletion", inline(5, 4), rid="answered-1")
    assert "result" in r
    await client.notify("$/cancelRequest", {"id": "answered-1"})   # crossed with the answer on the wire
    assert "result" in await client.ask("completer/health")
    assert "Cancel notification for unknown message id" not in server.log_text()
