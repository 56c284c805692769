"""bench/crossfile.py, run as a program: the cross-file positions (CrossCodeEval's construction) of a small
project."""

import hashlib
import json

from tests.helpers.programs import ROOT, run_program

UTIL = "def parse_header(line, strict=False):\n    return line\n\n\ndef render_row(row):\n    return str(row)\n"
MAIN = ('"""Loads rows."""\n'
        "from .util import parse_header, render_row\n\n\n"
        "def load(lines):\n"
        "    first = parse_header(lines[0], strict=True)\n"
        "    # render_row in a comment: not a position, and the name is no longer new after it\n"
        "    out = [render_row(r) for r in lines[1:]]\n"
        "    again = parse_header(lines[1])\n"
        "    return first, out\n")


def test_positions_use_a_name_another_file_defines_first_time_outside_imports(tmp_path):
    root = tmp_path / "pkg"
    root.mkdir()
    files = {"__init__.py": "", "util.py": UTIL, "main.py": MAIN}
    for rel, text in files.items():
        (root / rel).write_text(text)
    manifest = {"projects": [{"language": "python", "name": "pkg", "source": "test", "install": "-",
                              "root": str(root), "targets": ["main.py"],
                              "files": {r: hashlib.sha1(t.encode()).hexdigest() for r, t in files.items()}}]}
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest))
    out = run_program("bench.crossfile", "--manifest", path, "--json", "--per-kind", "10").stdout
    pos = [json.loads(line) for line in out.splitlines()]
    assert not [p for p in pos if "note" in p]
    # line 8's parse_header is a second use; render_row was seen in a comment (line 6) before its code (line 7)
    assert sorted((p["kind"], p["name"], p["line"]) for p in pos) == [("at_name", "parse_header", 5),
                                                                        ("in_name", "parse_header", 5)]
    for p in pos:
        assert p["defined_in"] == "util.py" and p["file"] == "pkg/main.py"
        assert p["line_before"] + p["expected"] == MAIN.split("\n")[5]
        assert p["expected"].startswith("parse_header" if p["kind"] == "at_name" else "rse_header")
    (root / "util.py").write_text(UTIL + "\n")                    # a changed file is flagged
    out = run_program("bench.crossfile", "--manifest", path, "--json").stdout
    assert json.loads(out.splitlines()[0]) == {"note": "content differs from the manifest: pkg/util.py"}


def test_no_project_of_the_set_was_in_a_training_split(tmp_path):
    large = ROOT / "completer" / "training" / "corpus_large_manifest.json"
    extra = ROOT / "completer" / "training" / "crossfile_packages.json"
    assert "none of the" in run_program("bench.crossfile", "--trained-on", large, extra).stdout
    # the large corpus had koa in its train split (why it left the set); a project found there is named
    data = json.loads(large.read_text())
    data["packages"]["npm:postcss"] = {"split": "train"}
    (tmp_path / "large.json").write_text(json.dumps(data))
    packages = json.loads(extra.read_text())
    packages["npm"].append("@tanstack/query-core")
    (tmp_path / "extra.json").write_text(json.dumps(packages))
    out = run_program("bench.crossfile", "--trained-on", tmp_path / "large.json", tmp_path / "extra.json", check=False)
    assert out.returncode == 1 and "trained on: postcss, query-core" in out.stdout
