"""bench/vllm/lines.py (time to the first line and to the full block), run as a program on traces written here (its
CPU dry run, the embedded engine): the next text of a keystroke, the cases built from a trace by the server's
pipeline, and one timed case."""

import json

import pytest

from lsp import trace as tr
from tests.helpers.programs import run_program

URI = "file:///t/a.py"


def _lines(tmp_path, trace: tr.Trace | str) -> dict:
    """lines.json of the program's CPU dry run (house:v2/target, no warm-up) over ``trace``."""
    path = tmp_path / "t.jsonl"
    path.write_text(trace if isinstance(trace, str) else tr.dumps(trace))
    run_program("bench.vllm.lines", "--out", tmp_path / "out", "--model", "house:v2/target", "--traces", path,
                "--warmup", "0", "--engine-json", '{"backend": "torch", "device": "cpu"}')
    return json.loads((tmp_path / "out" / "lines.json").read_text())


def _keystroke_then(final: str, before: str, after: str) -> tr.Trace:
    """A trace whose keystroke types the last character of ``before`` (the cursor then between ``before`` and
    ``after``), then one edit that makes the document ``final``."""
    start = before[:-1] + after
    key = tr.insert_edit(start, len(before) - 1, before[-1])
    doc, _ = tr.apply_edit(start, key)
    if final.startswith(before) and final.endswith(after) and len(before) + len(after) <= len(final):
        rest = tr.insert_edit(doc, len(before), final[len(before):len(final) - len(after)])
    else:                                     # the user rewrites the document
        rest = {"range": {"start": tr.position_of(doc, 0), "end": tr.position_of(doc, len(doc))}, "text": final}
    return tr.Trace(tr.Header(URI, "python", start), [tr.Event(0.0, URI, edit=key), tr.Event(90.0, URI, edit=rest)])


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
def test_truth(tmp_path, final, before, after, mode, want):
    out = _lines(tmp_path, _keystroke_then(final, before, after))
    mine = [r for r in out["records"] if r["offset"] == len(before)]
    if want is None:
        assert mine == [] and out["skipped"]["rewritten_later"] == 1
        return
    [r] = mine
    assert r["mode"] == mode and (r["line"], r["block"]) == want
    assert (r["line_chars"], r["block_chars"]) == (len(want[0]), len(want[1]))


TRACE = """{"trace": 1, "uri": "file:///t/a.py", "languageId": "python", "text": "import os\\n\\n"}
{"t_ms": 0, "uri": "file:///t/a.py", "edit": {"range": {"start": {"line": 2, "character": 0}, "end": {"line": 2, "character": 0}}, "text": "x"}}
{"t_ms": 90, "uri": "file:///t/a.py", "edit": {"range": {"start": {"line": 2, "character": 1}, "end": {"line": 2, "character": 1}}, "text": " = os.getcwd()\\ny = len(x)\\n"}}
"""


def test_cases_and_one_timed_request_on_the_embedded_engine(tmp_path):
    import asyncio

    from completer.engine import EngineConfig, create_engine

    out = _lines(tmp_path, TRACE)
    # the first keystroke has " = os.getcwd()" left on its line; the second types to the end: nothing left
    assert len(out["records"]) == 1 and out["skipped"] == {"rewritten_later": 0, "nothing_left_to_type": 1}
    c = out["records"][0]
    assert c["line_chars"] == len(" = os.getcwd()")
    engine = create_engine(EngineConfig(model="house:v2/target", speculation="none", device="cpu"))
    try:
        assert c["n_line"] == engine.count_tokens(" = os.getcwd()") + 1
    finally:
        asyncio.run(engine.close())
    assert c["n_line"] <= c["n_block"] <= 64
    assert 0 < c["tokens"] <= c["n_block"]
    assert c["ttft_ms"] <= c["block_ms"] and (c["line_ms"] is None or c["line_ms"] <= c["block_ms"])
    s = out["summary"]
    assert s["keystrokes"] == 1 and s["full_block_ms"]["p50"] == c["block_ms"]
