"""The prompt budget the server gives the engine over raw stdio, real server and house model: ``coldPromptMs`` cuts
``contextBudgetTokens`` to what the engine measured it prefills in that time (pipeline.prompt_budget); stats show
both."""

from __future__ import annotations

import pytest

from lsp.client import Server

URI = "file:///w/cold.py"
TEXT = "".join(f"def f{i}(path):\n    return path + '{i}' * {i}\n\n" for i in range(200)) + "def main():\n    x = "
LINE, COL = TEXT.count("\n"), len("    x = ")


@pytest.mark.parametrize("cold_ms, want", [(None, 1024), (0, 1024), (1e-3, 384)])
async def test_the_budget_follows_the_measured_cold_prompt_speed(tmp_path, engine_options, cold_ms, want):
    options = {} if cold_ms is None else {"coldPromptMs": cold_ms}
    server = Server("stdio", log_path=tmp_path / "server.log")
    c = await server.session(engine_options, {}, {URI: TEXT}, maxTokens=4, **options)
    try:
        s = (await c.call("completer/stats", {}))["prompt"]
        assert s["budgetTokens"] == want and s["coldMsPerToken"] > 0   # house v2: ~0.3 ms, 1 s holds 1,024
        plan = await c.call("completer/prompt", {"textDocument": {"uri": URI},
                                                 "position": {"line": LINE, "character": COL}})
        assert want // 2 < plan["promptTokens"] <= want           # (the window starts on whole lines)
    finally:
        await server.stop(c)
