"""bench/quality.py: positions of each kind, the scores, each failure kind on the issue's reproductions, and a small
end-to-end run (tiny pair, none vs draft speculation) that writes JSON, markdown and a plot."""

import hashlib
import json

import pytest

from bench import quality as q

PY = '''class Stack:
    def __init__(self):
        self.items = []

    def push(self, item):
        self.items.append(item)

    def pop(self):
        return self.items.pop()
'''


def _file(tmp_path, text=PY, language="python", name="stack.py"):
    p = tmp_path / name
    p.write_text(text)
    return q.EvalFile(language, p, name, "test", text, True)


def _pos(document, offset, expected, kind="mid_line", language="python"):
    return q.Position("f", language, kind, document[:offset].count("\n"), offset, document, expected)


def test_positions_are_seeded_of_each_kind_and_the_truth_is_the_removed_rest_of_line(tmp_path):
    f = _file(tmp_path)
    a, b = q.sample_positions(f, 2, seed=3), q.sample_positions(f, 2, seed=3)
    assert [(p.kind, p.offset) for p in a] == [(p.kind, p.offset) for p in b]
    assert {p.kind for p in a} == set(q.KINDS)
    for p in a:
        line = PY.split("\n")[p.line]
        assert line.rstrip().endswith(p.expected) and p.expected
        assert p.document == PY[:p.offset] + PY[p.offset + len(line) - len(p.line_before):]   # rest of line gone
        if p.kind == "mid_word":
            assert p.line_before[-1].isalnum() and p.expected[0].isalnum()
        if p.kind == "empty_line":
            assert p.line_before.strip() == "" and p.line_before
        if p.kind == "line_start":
            assert not (p.line_before[-1].isalnum() and p.expected[0].isalnum())


def test_scores_exact_prefix_and_word_by_word_acceptance():
    doc = "x = 1\n    return \ny = 2\n"
    p = _pos(doc, doc.index("return ") + 7, "self.items.pop()")
    assert q.score(p, "self.items.pop()")["exact"]
    s = q.score(p, "self.items")
    assert s["prefix"] and not s["exact"] and s["accepted"] == len("self.items")
    s = q.score(p, "self.item_list")
    assert not s["prefix"] and s["accepted"] == len("self.")      # words: "self", "." accepted; "item_list" not
    assert q.score(p, "")["shown"] is False


@pytest.mark.parametrize("kind,doc,cursor_after,expected,ghost,language", [
    # the reproductions
    ("duplicate", "class S:\n    def pop(self):\n        return self.\n", "return self.", "items.pop()",
     "self.items.pop()", "python"),
    ("indentation", "class S:\n    def peek(self):\n\n", "def peek(self):", "", "        return self.items[-1]",
     "python"),
    ("mid_word", "def f(self):\n    sel\n", "sel", "f.items", "e(self.r, self.r)", "python"),
    ("repetition", "f(\n", "f(", "path)", "{ path: Argument<{ path: Argument<{ path: Argument<{ path: Argument<",
     "javascript"),
    ("language", "function f() {\n  \n}\n", "function f() {\n  ", "return 1;", "# TODO(x): fix", "javascript"),
    ("language", "func f() {\n\t\n}\n", "func f() {\n\t", "return nil", '"""Return nothing."""', "go"),
    ("duplicate", "if x:\n    \n    y = compute(x)\n", "if x:\n    ", "z = 1", "z = 1\n    y = compute(x)", "python"),
])
def test_each_failure_kind_is_found(kind, doc, cursor_after, expected, ghost, language):
    p = _pos(doc, doc.index(cursor_after) + len(cursor_after), expected,
             kind="mid_word" if kind == "mid_word" else "mid_line", language=language)
    assert kind in q.failures(p, ghost)


def test_right_text_has_no_failure_and_c_directives_are_not_python():
    doc = "class S:\n    def pop(self):\n        return self.\n"
    p = _pos(doc, doc.index("self.\n") + 5, "items.pop()")
    assert q.failures(p, "items.pop()") == []
    c = "#include <a.h>\n\n"
    assert q.failures(_pos(c, len("#include <a.h>\n"), "#define X 1", language="c"), "#define X 1") == []


def test_manifest_flags_changed_and_missing_files(tmp_path):
    a = tmp_path / "a.py"
    a.write_text("x = 1\n")
    m = tmp_path / "m.json"
    m.write_text(json.dumps({"files": [
        {"language": "python", "root": "abs", "path": str(a).lstrip("/"), "source": "t",
         "sha1": hashlib.sha1(b"other").hexdigest()},
        {"language": "c", "root": "abs", "path": "no/such/file.h", "source": "t", "sha1": "0"}]}))
    files, notes = q.load_manifest(m)
    assert [f.name for f in files] == [str(a).lstrip("/")] and not files[0].sha1_ok
    assert any("missing" in n for n in notes) and any("differs" in n for n in notes)


def test_shipped_manifest_is_well_formed():
    data = json.loads(q.MANIFEST.read_text())
    langs = {e["language"] for e in data["files"]}
    assert {"python", "c", "javascript", "go"} <= langs
    for e in data["files"]:
        assert e["root"] in ("stdlib", "abs") and len(e["sha1"]) == 40 and e["source"]
        if e["language"] == "python":                   # never in the house training split
            from completer.training.corpus import is_heldout
            assert is_heldout(e["path"])


def test_small_run_writes_results_and_speculation_keeps_the_text(tiny_pair, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    f = src / "stack.py"
    f.write_text(PY * 3)
    m = tmp_path / "m.json"
    m.write_text(json.dumps({"files": [{"language": "python", "root": "abs", "path": str(f).lstrip("/"),
                                        "source": "test", "sha1": hashlib.sha1(f.read_bytes()).hexdigest()}]}))
    out = tmp_path / "out"
    target, draft = map(str, tiny_pair)
    assert q.main(["--manifest", str(m), "--per-kind", "1", "--max-tokens", "8", "--out", str(out),
                   "--config", f'plain={{"model": "{target}", "speculation": "none"}}',
                   "--config", f'spec={{"model": "{target}", "draft": "{draft}", "speculation": "draft", '
                               f'"num_speculative_tokens": 3}}',
                   "--config", f'noheal={{"model": "{target}", "speculation": "none", '
                               f'"settings": {{"token_healing": false}}}}']) == 0
    res = json.loads((out / "quality.json").read_text())
    assert len(res["positions"]) == 4 and [c["name"] for c in res["configs"]] == ["plain", "spec", "noheal"]
    assert res["configs"][2]["engine"]["settings"] == {"token_healing": False}
    # only configurations that differ in speculation alone must give the same text
    assert set(res["summary"]["same_text"]) == {"plain vs spec"}
    assert res["summary"]["same_text"]["plain vs spec"]["raw_text_differs"] == 0
    assert q.main(["--render", str(out / "quality.json"), "--out", str(tmp_path / "again"), "--no-plot"]) == 0
    assert json.loads((tmp_path / "again" / "quality.json").read_text())["summary"] == res["summary"]
    assert res["loadavg_before"] and res["machine"]["cores"] >= 1
    summ = res["summary"]["configs"]["plain"]
    assert "all" in summ["variants"] and summ["variants"]["all"]["n"] == 4
    assert all(r["tokens"] > 0 or r["raw"] == "" for r in res["configs"][0]["records"])
    assert "| plain | all |" in (out / "quality.md").read_text()
    assert (out / "quality.png").stat().st_size > 1000
    with pytest.raises(SystemExit):                    # committed results are never overwritten by accident
        q.main(["--manifest", str(m), "--out", str(out), "--config", "house"])


def test_more_positions_per_kind_keep_the_earlier_three_as_the_base_subset(tmp_path):
    text = "\n".join(f"    value_{i} = compute_something(value_{i - 1}, offset={i})" for i in range(1, 60))
    f = _file(tmp_path, "def f():\n" + text + "\n", name="many.py")
    three, eight = q.sample_positions(f, 3, seed=0), q.sample_positions(f, 8, seed=0)
    key = lambda p: (p.kind, p.offset)                                              # noqa: E731
    assert [key(p) for p in eight if p.base] == [key(p) for p in three]
    assert sum(not p.base for p in eight) == 5 * len(q.KINDS) and len({key(p) for p in eight}) == len(eight)
    added = q.EvalFile("python", f.path, "many.py", "test", f.text, True, added=True)
    assert not any(p.base for p in q.sample_positions(added, 8, seed=0))          # a new file has no base positions


def test_ratio_ci_counts_the_same_positions_and_brackets_the_ratio():
    rec = lambda ok: {"score": {"all": {"exact": ok}}}                              # noqa: E731
    a = [rec(i % 5 == 0) for i in range(200)]            # 40 exact
    b = [rec(i % 20 == 0) for i in range(200)]           # 10 exact
    r = q.ratio_ci(a, b)
    assert (r["a"], r["b"], r["ratio"]) == (40, 10, 4.0)
    assert r["ci95"][0] < 4.0 < r["ci95"][1] and 0 < r["p_ratio_ge_3"] < 1
    assert q.ratio_ci(a, [rec(False)] * 200)["ratio"] is None


def test_a_configuration_sets_the_healing_rules_for_its_run_only():
    from completer import healing
    before = (healing.ANY_PREFIX_TOKEN, healing.WHITESPACE_AFTER_HEAL)
    with q._healing_rules({"ANY_PREFIX_TOKEN": True, "WHITESPACE_AFTER_HEAL": True}):
        assert healing.ANY_PREFIX_TOKEN and healing.WHITESPACE_AFTER_HEAL
    assert (healing.ANY_PREFIX_TOKEN, healing.WHITESPACE_AFTER_HEAL) == before
    with pytest.raises(ValueError):
        with q._healing_rules({"NO_SUCH_RULE": True}):
            pass
