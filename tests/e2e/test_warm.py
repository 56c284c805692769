"""The warm-up over raw stdio (``completer/didMoveCursor``, lsp/warm.py), the real server and house model: the
cursor reported before typing fills the engine's cache with the prompt there, so the keystroke's request after it
runs only the last tokens; bad params get a message and the server goes on."""

from __future__ import annotations

import asyncio

import pytest

from lsp.client import Client, Server

URI = "file:///w/warm.py"
TEXT = "import os\n\n\n" + "".join(f"def f{i}(path):\n    return os.path.join(path, '{i}')\n\n" for i in range(12)) + \
    "def main():\n    result = "
LINE, COL = TEXT.count("\n"), len("    result = ")


@pytest.fixture
async def server(tmp_path):
    return Server("stdio", log_path=tmp_path / "server.log")


async def start(server: Server, engine_options: dict, **options) -> Client:
    return await server.session(engine_options, {}, {URI: TEXT}, maxTokens=8, debounceMs=0, **options)


async def stats(c: Client) -> dict:
    return await c.call("completer/stats", {})


async def warmed(c: Client) -> None:
    """Until the warm-up's engine request has ended (it runs in the background)."""
    for _ in range(400):
        s = await stats(c)
        if s["engine"]["requests_started"] >= 1 and s["engine"]["requests_started"] == (
                s["engine"]["requests_finished"] + s["engine"]["requests_aborted"]):
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"the warm-up did not end: {s}")


@pytest.mark.parametrize("warm", [True, False])
async def test_the_reported_cursor_is_prefilled_before_the_keystroke(server, engine_options, warm):
    c = await start(server, engine_options, warmOnCursor=warm)
    try:
        await c.notify("completer/didMoveCursor", {"textDocument": {"uri": URI}, "position": {"line": LINE,
                                                                                              "character": COL}})
        if warm:
            await warmed(c)
        before = (await stats(c))["engine"]
        prompt = await c.call("completer/prompt", {"textDocument": {"uri": URI},
                                                   "position": {"line": LINE, "character": COL}})
        assert (await c.inline(URI, LINE, COL))["result"] is not None
        after = await stats(c)
        cached = after["engine"]["cached_prompt_tokens"] - before["cached_prompt_tokens"]
        assert after["server"]["warmups"] == int(warm)
        assert before["generated_tokens"] == 0             # the warm-up wrote nothing
        if warm:
            assert prompt["promptTokens"] > 200 and cached >= prompt["promptTokens"] - 3
        else:
            assert cached == 0 and before["requests_started"] == 0
    finally:
        await server.stop(c)


async def test_bad_params_get_a_message_and_the_server_goes_on(server, engine_options):
    c = await start(server, engine_options)
    try:
        await c.notify("completer/didMoveCursor", {"textDocument": {"uri": URI}, "position": {"line": "x"}})
        await c.notify("completer/didMoveCursor", {"textDocument": {"uri": "file:///w/not-open.py"},
                                                   "position": {"line": 0, "character": 0}})
        await c.notify("completer/didMoveCursor", {"textDocument": {"uri": URI},
                                                   "position": {"line": 10_000, "character": 0}})
        assert (await c.inline(URI, LINE, COL))["result"] is not None
        shown = [n["params"]["message"] for n in c.messages if n["method"] == "window/showMessage"]
        assert any("completer/didMoveCursor" in m for m in shown), shown
        assert (await stats(c))["server"]["warmups"] == 0
    finally:
        await server.stop(c)
