"""bench/vllm/lines.py (time to the first line and to the full block): the next text of a keystroke, the cases
built from a trace by the server's pipeline, and one timed case on the embedded engine (CPU)."""

import asyncio

import pytest

from lsp import trace as tr
from bench.vllm import lines
from completer.postprocess.context import Context


@pytest.mark.parametrize("final,before,after,mode,want", [
    # typing at the end of a line: the rest of the line, then the block at the cursor (its dedent ends it)
    ("def f(x):\n    y = x + 1\n    return y\n\nz = 2\n", "def f(x):\n    y = x", "", "line",
     (" + 1", " + 1\n    return y")),
    # the rest of the line already after the cursor is not typed again
    ("print(a, b)\n", "print(a", ")\n", "line", (", b", ", b")),
    # block mode after an opener: the block's body
    ("if a:\n    b()\n    c()\nd()\n", "if a:\n    ", "", "block", ("b()", "b()\n    c()")),
    # the user later rewrites what is before the cursor: unknown
    ("print(1)\n", "prnt(", "", "line", None),
])
def test_truth(final, before, after, mode, want):
    ctx = Context(line_before=before.rsplit("\n", 1)[-1], rest=after.split("\n", 1)[0], suffix=after, mode=mode,
                  language="python", indent="    " if mode == "block" else "")
    assert lines.truth(final, before, after, ctx) == want


TRACE = """{"trace": 1, "uri": "file:///t/a.py", "languageId": "python", "text": "import os\\n\\n"}
{"t_ms": 0, "uri": "file:///t/a.py", "edit": {"range": {"start": {"line": 2, "character": 0}, "end": {"line": 2, "character": 0}}, "text": "x"}}
{"t_ms": 90, "uri": "file:///t/a.py", "edit": {"range": {"start": {"line": 2, "character": 1}, "end": {"line": 2, "character": 1}}, "text": " = os.getcwd()\\ny = len(x)\\n"}}
"""


def test_cases_and_one_timed_request_on_the_embedded_engine():
    from completer.engine import EngineConfig, create_engine

    engine = create_engine(EngineConfig(model="house:v2/target", speculation="none", device="cpu"))
    try:
        cases, skipped = lines.keystroke_cases([("a", tr.loads(TRACE, "a"))], engine)
        # the first keystroke has " = os.getcwd()" left on its line; the second types to the end: nothing left
        assert len(cases) == 1 and skipped == {"rewritten_later": 0, "nothing_left_to_type": 1}
        c = cases[0]
        assert c["line_chars"] == len(" = os.getcwd()")
        assert c["n_line"] == engine.count_tokens(" = os.getcwd()") + 1
        assert c["n_line"] <= c["n_block"] <= 64
        r = asyncio.run(lines.time_case(engine, c, "t0"))
        assert 0 < r["tokens"] <= c["n_block"]
        assert r["ttft_ms"] <= r["block_ms"] and (r["line_ms"] is None or r["line_ms"] <= r["block_ms"])
        s = lines.summarize([{**c, **r}])
        assert s["keystrokes"] == 1 and s["full_block_ms"]["p50"] == r["block_ms"]
    finally:
        asyncio.run(engine.close())
