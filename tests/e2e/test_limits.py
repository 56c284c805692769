"""A prompt longer than the model's context, through the real server on the real embedded engine: that request is
refused with the engine's own limit in the message, the engine is not restarted, and the next request is served
(issue 15 item 4: on vLLM an over-long prompt used to cost an engine restart of 50-120 s)."""

from __future__ import annotations

from lsp.client import Server, inline_params


async def test_a_prompt_over_the_models_context_is_refused_without_a_restart(tiny_options, tmp_path):
    server = Server("stdio", args=("--allow-client-models",), log_path=tmp_path / "server.log")
    c = await server.start()
    try:
        # budgets far above the model's context, so the prompt is cut by nothing but the engine's own limit
        assert "result" in await c.initialize(tiny_options, maxTokens=8, debounceMs=0, contextBudgetTokens=100_000,
                                              maxPromptTokens=100_000, tokenHealing=False)
        await c.wait_ready()
        limit = (await c.call("completer/stats", {}))["engine"]["supervisor"]["limits"]["max_model_len"]
        uri = "file:///long.py"
        text = "".join(f"value_{i} = compute({i}, {i * 7})\n" for i in range(limit)) + "result = "
        await c.open_document(uri, text)
        line = text.count("\n")
        r = await c.ask("textDocument/inlineCompletion", inline_params(uri, line, 9), timeout=300)
        assert r["error"]["code"] == -32803, r
        assert f"exceeds the model's context of {limit} positions" in r["error"]["message"], r
        await c.notify("workspace/didChangeConfiguration", {"settings": {"contextBudgetTokens": limit // 2}})
        r = await c.ask("textDocument/inlineCompletion", inline_params(uri, line, 9), timeout=300)
        assert "result" in r, r
        sup = (await c.call("completer/stats", {}))["engine"]["supervisor"]
        assert sup["restarts"] == 0 and sup["engine_failures"] == 0 and sup["requests_refused"] == 1
    finally:
        await server.stop(c)
    assert "Traceback" not in (tmp_path / "server.log").read_text()      # the request's problem, not a server bug
