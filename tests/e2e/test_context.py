"""Through the server: each supported language's prompt carries its enclosing scope when that header is far above
the cursor (outside the near-text window), and the prompt for consecutive keystrokes shares its prefix."""

from __future__ import annotations

import asyncio

import pytest
from lsprotocol import types

from tests.helpers.pygls_session import edit, open_doc, stats

N = 150  # body lines between the scope header and the cursor: far more than the near window holds

CASES = {
    # language id: (file name, header (must reach the prompt), filler line, closing text)
    "python": ("cart.py", "def compute_total(items, tax):", "    v{i} = items[{i}] * tax\n", ""),
    "javascript": ("cart.js", "function computeTotal(items, tax) {", "  const v{i} = items[{i}] * tax;\n", "}\n"),
    "typescript": ("cart.ts", "function computeTotal(items: number[], tax: number): number {",
                   "  const v{i} = items[{i}] * tax;\n", "}\n"),
    "go": ("cart.go", "func ComputeTotal(items []float64, tax float64) float64 {", "\tv{i} := items[{i}] * tax\n",
           "}\n"),
    "rust": ("cart.rs", "fn compute_total(items: &[f64], tax: f64) -> f64 {", "    let v{i} = items[{i}] * tax;\n",
             "}\n"),
    "c": ("cart.c", "double compute_total(const double *items, double tax) {", "    double v{i} = items[{i}] * tax;\n",
          "}\n"),
    "cpp": ("cart.cpp", "double compute_total(const std::vector<double>& items, double tax) {",
            "    double v{i} = items[{i}] * tax;\n", "}\n"),
}

pytestmark = pytest.mark.asyncio(loop_scope="module")   # one server per module (conftest)


async def prompt_at(client, uri, line, ch) -> dict:
    res = await client.protocol.send_request_async("completer/prompt", {
        "textDocument": {"uri": uri}, "position": {"line": line, "character": ch}})
    return res._asdict() if hasattr(res, "_asdict") else res


async def test_each_language_prompt_has_its_enclosing_scope(client):
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"contextBudgetTokens": 256}))
    await stats(client)
    for language, (name, header, filler, closing) in CASES.items():
        uri = f"file:///work/{name}"
        body = "".join(filler.format(i=i) for i in range(N))
        indent = filler[: len(filler) - len(filler.lstrip())]
        text = f"{header}\n{body}{indent}\n{closing}"
        open_doc(client, uri, text, language=language)
        line = 1 + N
        plan = await prompt_at(client, uri, line, len(indent))
        assert plan["language"] in (language, "tsx", "typescript", "cpp", "c"), plan["language"]
        assert header.split("(")[0] in plan["context"], (language, plan["context"])
        # the header is not in the near text: the context put it there
        assert plan["prompt"].count(header.split("(")[0]) >= 1
        assert plan["promptTokens"] <= 256


async def test_consecutive_keystrokes_share_the_prompt_prefix(client):
    uri = "file:///work/keys.py"
    text = "import os\n\n\ndef main(path):\n    data = os.path.join(path, 'x')\n    \n"
    done = (await stats(client))["context"]["computations"]
    open_doc(client, uri, text)
    for _ in range(200):   # the context sources' first computation after the open (lsp/context_sources.py) is in
        if (await stats(client))["context"]["computations"] > done:    # the cache before the first keystroke
            break
        await asyncio.sleep(0.05)
    a = (await prompt_at(client, uri, 5, 4))["prompt"]
    edit(client, uri, 2, (5, 4), (5, 4), "re")
    b = (await prompt_at(client, uri, 5, 6))["prompt"]
    common = 0
    while common < min(len(a), len(b)) and a[common] == b[common]:
        common += 1
    # everything up to the cursor's last token is shared, whatever the template's order (the engine reuses that KV
    # cache); token healing (completer.healing) backs the prompt up by that token, here the line's indentation
    before = "data = os.path.join(path, 'x')"
    assert common >= a.index(before) + len(before), (a, b)
