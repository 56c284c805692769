"""bench/quality.py, run as a program: positions of each kind (``--positions``), the scores and each failure kind on
the issue's reproductions (``--judge``), the manifest's checks, the paired ratio of two configurations (``--render`` of
results written here), and a small end-to-end run (tiny pair, none vs draft speculation) that writes JSON, markdown
and a plot."""

import hashlib
import json
import re
from pathlib import Path

import pytest

from tests.helpers.programs import run_program

MANIFEST = Path(__file__).resolve().parents[2] / "bench" / "quality_manifest.json"
KINDS = ("line_start", "mid_line", "mid_word", "empty_line")

PY = '''class Stack:
    def __init__(self):
        self.items = []

    def push(self, item):
        self.items.append(item)

    def pop(self):
        return self.items.pop()
'''



def _manifest(tmp_path, *files: Path, added: bool = False, sha1: str | None = None) -> Path:
    m = tmp_path / "m.json"
    m.write_text(json.dumps({"files": [{"language": "python", "root": "abs", "path": str(f).lstrip("/"), "source": "t",
                                        "sha1": sha1 or hashlib.sha1(f.read_bytes()).hexdigest(),
                                        **({"added": True} if added else {})} for f in files]}))
    return m


def _positions(tmp_path, text=PY, per_kind: int = 2, seed: int = 3, name="stack.py", added: bool = False) -> dict:
    tmp_path.mkdir(parents=True, exist_ok=True)
    f = tmp_path / name                 # positions are seeded with the file's name: its path, for an "abs" root
    f.write_text(text)
    m = _manifest(tmp_path, f, added=added)
    return json.loads(run_program("bench.quality", "--positions", "--manifest", m, "--per-kind", per_kind,
                                  "--seed", seed).stdout)


def _judge(tmp_path, *cases: tuple) -> list[dict]:
    """(document, offset, expected, ghost, kind, language) -> {score, failures} each, from ``--judge``."""
    path = tmp_path / "cases.json"
    path.write_text(json.dumps([{"document": d, "offset": o, "expected": e, "ghost": g, "kind": k, "language": lang}
                                for d, o, e, g, k, lang in cases]))
    return json.loads(run_program("bench.quality", "--judge", path).stdout)


def test_positions_are_seeded_of_each_kind_and_the_truth_is_the_removed_rest_of_line(tmp_path):
    a, b = _positions(tmp_path)["positions"], _positions(tmp_path)["positions"]
    assert [(p["kind"], p["offset"]) for p in a] == [(p["kind"], p["offset"]) for p in b]
    assert {p["kind"] for p in a} == set(KINDS)
    for p in a:
        line = PY.split("\n")[p["line"]]
        assert line.rstrip().endswith(p["expected"]) and p["expected"]
        assert p["document"] == PY[:p["offset"]] + PY[p["offset"] + len(line) - len(p["line_before"]):]   # rest gone
        if p["kind"] == "mid_word":        # inside an identifier ("_" is one of its characters)
            assert re.match(r"\w", p["line_before"][-1]) and re.match(r"\w", p["expected"][0])
        if p["kind"] == "empty_line":
            assert p["line_before"].strip() == "" and p["line_before"]
        if p["kind"] == "line_start":
            assert not (re.match(r"\w", p["line_before"][-1]) and re.match(r"\w", p["expected"][0]))


def test_scores_exact_prefix_and_word_by_word_acceptance(tmp_path):
    doc = "x = 1\n    return \ny = 2\n"
    at = doc.index("return ") + 7
    full, part, other, empty = [j["score"] for j in _judge(tmp_path, *[
        (doc, at, "self.items.pop()", g, "mid_line", "python")
        for g in ("self.items.pop()", "self.items", "self.item_list", "")])]
    assert full["exact"]
    assert part["prefix"] and not part["exact"] and part["accepted"] == len("self.items")
    assert not other["prefix"] and other["accepted"] == len("self.")      # words: "self", "." accepted; not "item_list"
    assert empty["shown"] is False


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
def test_each_failure_kind_is_found(tmp_path, kind, doc, cursor_after, expected, ghost, language):
    [j] = _judge(tmp_path, (doc, doc.index(cursor_after) + len(cursor_after), expected, ghost,
                            "mid_word" if kind == "mid_word" else "mid_line", language))
    assert kind in j["failures"]


def test_right_text_has_no_failure_and_c_directives_are_not_python(tmp_path):
    doc = "class S:\n    def pop(self):\n        return self.\n"
    c = "#include <a.h>\n\n"
    right, directive = _judge(tmp_path, (doc, doc.index("self.\n") + 5, "items.pop()", "items.pop()", "mid_line",
                                         "python"),
                              (c, len("#include <a.h>\n"), "#define X 1", "#define X 1", "mid_line", "c"))
    assert right["failures"] == [] and directive["failures"] == []


def test_manifest_flags_changed_and_missing_files(tmp_path):
    a = tmp_path / "a.py"
    a.write_text("x = 1\n")
    m = tmp_path / "m.json"
    m.write_text(json.dumps({"files": [
        {"language": "python", "root": "abs", "path": str(a).lstrip("/"), "source": "t",
         "sha1": hashlib.sha1(b"other").hexdigest()},
        {"language": "c", "root": "abs", "path": "no/such/file.h", "source": "t", "sha1": "0"}]}))
    res = json.loads(run_program("bench.quality", "--positions", "--manifest", m).stdout)
    assert [f["name"] for f in res["files"]] == [str(a).lstrip("/")] and not res["files"][0]["sha1_ok"]
    notes = res["notes"]
    assert any("missing" in n for n in notes) and any("differs" in n for n in notes)


def test_shipped_manifest_is_well_formed():
    data = json.loads(MANIFEST.read_text())
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
    run_program("bench.quality", "--manifest", m, "--per-kind", "1", "--max-tokens", "8", "--out", out,
                "--config", f'plain={{"model": "{target}", "speculation": "none"}}',
                "--config", f'spec={{"model": "{target}", "draft": "{draft}", "speculation": "draft", '
                            f'"num_speculative_tokens": 3}}',
                "--config", f'noheal={{"model": "{target}", "speculation": "none", '
                            f'"settings": {{"token_healing": false}}}}')
    res = json.loads((out / "quality.json").read_text())
    assert len(res["positions"]) == 4 and [c["name"] for c in res["configs"]] == ["plain", "spec", "noheal"]
    assert res["configs"][2]["engine"]["settings"] == {"token_healing": False}
    # only configurations that differ in speculation alone must give the same text
    assert set(res["summary"]["same_text"]) == {"plain vs spec"}
    assert res["summary"]["same_text"]["plain vs spec"]["raw_text_differs"] == 0
    run_program("bench.quality", "--render", out / "quality.json", "--out", tmp_path / "again", "--no-plot")
    assert json.loads((tmp_path / "again" / "quality.json").read_text())["summary"] == res["summary"]
    assert res["loadavg_before"] and res["machine"]["cores"] >= 1
    summ = res["summary"]["configs"]["plain"]
    assert "all" in summ["variants"] and summ["variants"]["all"]["n"] == 4
    assert all(r["tokens"] > 0 or r["raw"] == "" for r in res["configs"][0]["records"])
    assert "| plain | all |" in (out / "quality.md").read_text()
    assert (out / "quality.png").stat().st_size > 1000
    again = run_program("bench.quality", "--manifest", m, "--out", out, "--config", "house", check=False)
    assert again.returncode != 0 and "already has results" in again.stderr   # results are never overwritten by accident


def test_more_positions_per_kind_keep_the_earlier_three_as_the_base_subset(tmp_path):
    text = "def f():\n" + "\n".join(f"    value_{i} = compute_something(value_{i - 1}, offset={i})"
                                     for i in range(1, 60)) + "\n"
    three = _positions(tmp_path, text, 3, 0, "many.py")["positions"]
    eight = _positions(tmp_path, text, 8, 0, "many.py")["positions"]
    key = lambda p: (p["kind"], p["offset"])                                        # noqa: E731
    assert [key(p) for p in eight if p["base"]] == [key(p) for p in three]
    assert sum(not p["base"] for p in eight) == 5 * len(KINDS) and len({key(p) for p in eight}) == len(eight)
    added = _positions(tmp_path / "added", text, 8, 0, "many.py", added=True)["positions"]
    assert added and not any(p["base"] for p in added)                              # a new file: no base positions


def test_ratio_ci_counts_the_same_positions_and_brackets_the_ratio(tmp_path):
    """``--compare A:B``: A's exact count over B's on the same positions, with a paired bootstrap interval (here
    through ``--render`` of results written here: scores from ``--judge``, one exact and one not)."""
    hit, miss = [j["score"] for j in _judge(tmp_path, *[("x = \n", 4, "1", g, "mid_line", "python") for g in "12"])]
    assert hit["exact"] and not miss["exact"]

    def config(name, exact):
        return {"name": name, "engine": {"model": name}, "variants": ["all"],
                "records": [{"i": i, "raw": "1", "tokens": 1, "ms": 5.0, "error": None, "mode": "line",
                             "ghost": {"all": "1"}, "score": {"all": hit if ok else miss}}
                            for i, ok in enumerate(exact)]}
    n = 200
    saved = {"date": "2026-01-01", "command": "test", "machine": "test", "loadavg_before": "0", "loadavg_after": "0",
             "files": [{"language": "python", "name": "f", "source": "t"}], "per_kind": 1, "seed": 0, "max_tokens": 8, "notes": [], "compare": [["a", "b"], ["a", "c"]],
             "positions": [{"file": "f", "language": "python", "kind": "mid_line", "line": 0, "offset": 4,
                            "expected": "1", "base": True} for _ in range(n)],
             "configs": [config("a", [i % 5 == 0 for i in range(n)]),          # 40 exact
                         config("b", [i % 20 == 0 for i in range(n)]),         # 10 exact
                         config("c", [False] * n)]}
    (tmp_path / "saved.json").write_text(json.dumps(saved))
    run_program("bench.quality", "--render", tmp_path / "saved.json", "--out", tmp_path / "out", "--no-plot")
    ratios = json.loads((tmp_path / "out" / "quality.json").read_text())["summary"]["ratios"]
    r = ratios["a / b"]["all positions"]
    assert (r["a"], r["b"], r["ratio"]) == (40, 10, 4.0)
    assert r["ci95"][0] < 4.0 < r["ci95"][1] and 0 < r["p_ratio_ge_3"] < 1
    assert ratios["a / c"]["all positions"]["ratio"] is None


def test_a_configuration_sets_the_healing_rules_for_its_run_only(tiny_pair, tmp_path):
    f = tmp_path / "stack.py"
    f.write_text(PY * 3)
    m = _manifest(tmp_path, f)
    target = str(tiny_pair[0])
    rules = '{"ANY_PREFIX_TOKEN": true, "WHITESPACE_AFTER_HEAL": true}'
    out = tmp_path / "out"
    run_program("bench.quality", "--manifest", m, "--per-kind", "1", "--max-tokens", "2", "--out", out, "--no-plot",
                "--config", f'rules={{"model": "{target}", "speculation": "none", "healing_rules": {rules}}}',
                "--config", f'plain={{"model": "{target}", "speculation": "none"}}')
    ran = {c["name"]: c["healing_rules_in_effect"] for c in json.loads((out / "quality.json").read_text())["configs"]}
    assert ran["rules"] == {"ANY_PREFIX_TOKEN": True, "WHITESPACE_AFTER_HEAL": True}
    assert ran["plain"] != ran["rules"]                      # put back after the configuration's run
    bad = run_program("bench.quality", "--manifest", m, "--per-kind", "1", "--max-tokens", "2", "--out",
                      tmp_path / "bad", "--no-plot", "--config",
                      f'x={{"model": "{target}", "speculation": "none", "healing_rules": {{"NO_SUCH_RULE": true}}}}',
                      check=False)
    assert bad.returncode != 0 and "NO_SUCH_RULE" in bad.stderr
