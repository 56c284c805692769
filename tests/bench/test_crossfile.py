"""bench/crossfile.py: the cross-file positions (CrossCodeEval's construction) of a small project, and the snippets
bench.quality --crossfile gives the prompt there."""

import hashlib
import json

from bench import crossfile as xf
from bench import quality as q

UTIL = "def parse_header(line, strict=False):\n    return line\n\n\ndef render_row(row):\n    return str(row)\n"
MAIN = ('"""Loads rows."""\n'
        "from .util import parse_header, render_row\n\n\n"
        "def load(lines):\n"
        "    first = parse_header(lines[0], strict=True)\n"
        "    # render_row in a comment: not a position, and the name is no longer new after it\n"
        "    out = [render_row(r) for r in lines[1:]]\n"
        "    again = parse_header(lines[1])\n"
        "    return first, out\n")


def project(tmp_path):
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
    return path


def test_positions_use_a_name_another_file_defines_first_time_outside_imports(tmp_path):
    projects, notes = xf.load(project(tmp_path))
    assert notes == [] and [p.name for p in projects] == ["pkg"]
    pos = xf.sample(projects, seed=0, per_kind=10)
    assert {(p.kind, p.name, p.line) for p in pos} == {("at_name", "parse_header", 5),
                                                       ("in_name", "parse_header", 5)}
    for p in pos:                                   # line 8's is a second use; render_row was seen in a comment
        assert p.line == 5
        assert p.expected.startswith(p.name[2:] if p.kind == "in_name" else p.name)
        assert p.defined_in == "util.py" and p.document == MAIN[:p.offset] + MAIN[p.offset + len(p.expected):]


def test_the_imports_source_puts_the_definition_in_the_snippets(tmp_path):
    projects, _ = xf.load(project(tmp_path))
    x = xf.sample(projects, seed=0)[0]
    pos = q.Position(x.file, x.language, x.kind, x.line, x.offset, x.document, x.expected, True, x.root, x.path,
                     x.name, x.defined_in)
    snippets, uri = q.context_snippets(pos, ["imports"], {})
    assert uri.endswith("/pkg/main.py")
    assert "def parse_header(line, strict=False):" in [l for s in snippets for l in s.lines]
    assert q.context_snippets(pos, [], {})[0] == []
    assert q.score(pos, x.expected + "\n")["name"]
