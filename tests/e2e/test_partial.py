"""Partial answers over raw stdio (``partialAnswerMs``): only to a client that declares ``experimental.partialGhost``,
marked ``"partial": true``, and the same request again gets the whole ghost text, which extends the partial one."""

from __future__ import annotations

import pytest

from lsp.client import Client, Server

URI = "file:///w/partial.py"
TEXT = "import os\n\n\ndef main():\n    result = os.path.join('a', 'b')\n    "
LINE, COL = 5, 4


@pytest.fixture
async def server(tmp_path):
    return Server("stdio", log_path=tmp_path / "server.log")


async def start(server: Server, engine_options: dict, capabilities: dict) -> Client:
    # 1 ms: the first chunk the model writes is already late, so the answer is partial whenever the model writes
    # more than one chunk (maxTokens 24)
    return await server.session(engine_options, capabilities, {URI: TEXT}, maxTokens=24, debounceMs=0,
                                partialAnswerMs=1)


async def test_a_partial_answer_then_the_whole_ghost_text(server, engine_options):
    c = await start(server, engine_options, {"experimental": {"partialGhost": True}})
    try:
        first = (await c.inline(URI, LINE, COL))["result"]
        assert first.get("partial") is True and first["items"], first
        part = first["items"][0]["insertText"]
        again = (await c.inline(URI, LINE, COL))["result"]
        assert "partial" not in again and again["items"]
        whole = again["items"][0]["insertText"]
        assert whole.startswith(part) and len(whole) > len(part)
        stats = await c.call("completer/stats", {})
        assert stats["server"]["partial_answers"] == 1 and stats["server"]["engine_requests"] == 1
    finally:
        await server.stop(c)


async def test_no_partial_answer_without_the_capability(server, engine_options):
    c = await start(server, engine_options, {})
    try:
        r = (await c.inline(URI, LINE, COL))["result"]
        assert "partial" not in r and r["items"]
        assert (await c.call("completer/stats", {}))["server"]["partial_answers"] == 0
    finally:
        await server.stop(c)
