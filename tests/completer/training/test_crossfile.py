"""Cross-file training samples (``completer.training.crossfile``): the server's own prompt at a cross-file position,
made with the project's snippets, followed by what the file has there; read from a package corpus archive."""

import asyncio
import json
import lzma

import pytest

from completer.engine import EngineConfig, create_engine
from completer.context.builder import _snippet_block
from completer.context.plan import Snippet
from completer.training.crossfile import read_projects, samples, with_definition

UTIL = "def parse_header(line, strict=False):\n    return line.split(':', 1)\n\n\ndef render_row(row):\n    return str(row)\n"
MAIN = ('"""Loads rows."""\n'
        "from .util import parse_header, render_row\n\n\n"
        "def load(lines):\n"
        "    first = parse_header(lines[0], strict=True)\n"
        "    out = [render_row(r) for r in lines[1:]]\n"
        "    return first, out\n") * 3


def _archive(tmp_path, files, package="pypi:rows"):
    path = tmp_path / "train.jsonl.xz"
    with lzma.open(path, "wt", encoding="utf-8") as fh:
        for rel, text in files.items():
            fh.write(json.dumps({"path": f"{package}/rows-1.0/{rel}", "language": "python", "text": text,
                                 "package": package, "licence": "MIT"}) + "\n")
    return path


@pytest.fixture(scope="module")
def engine():
    eng = create_engine(EngineConfig(model="house:v2/target", speculation="none", device="cpu"))
    yield eng
    asyncio.run(eng.close())


def test_projects_are_read_by_package_without_their_common_folders(tmp_path):
    path = _archive(tmp_path, {"rows/__init__.py": "", "rows/util.py": UTIL, "rows/main.py": MAIN})
    assert {k: sorted(v) for k, v in read_projects(path).items()} == {
        ("pypi:rows", "python"): ["__init__.py", "main.py", "util.py"]}
    bad = tmp_path / "plain.jsonl.xz"
    with lzma.open(bad, "wt") as fh:
        fh.write(json.dumps({"path": "a.py", "language": "python", "text": "x = 1\n"}) + "\n")
    with pytest.raises(ValueError, match="package"):
        read_projects(bad)


def test_a_cross_file_sample_is_the_servers_prompt_with_the_block_then_the_rest_of_the_line(tmp_path, engine):
    path = _archive(tmp_path, {"rows/__init__.py": "", "rows/util.py": UTIL, "rows/main.py": MAIN})
    out = list(samples(read_projects(path), engine, per_kind=3, random_per_file=0, no_context=0.0))
    tok = engine.tokenizer
    at = [s for s in out if s.kind == "at_name"]
    assert at and all(s.context for s in out)
    for s in at:
        prompt = tok.decode(s.prompt, skip_special_tokens=False)
        target = tok.decode(s.target, skip_special_tokens=False)
        assert "from util.py:" in prompt and "def parse_header(line, strict=False)" in prompt   # the imports block
        assert prompt.endswith("<|fim_middle|>") and target.endswith("<|endoftext|>")
        # prompt (healed back to a token boundary) + target = the file's line
        line = prompt[prompt.rindex("\n") + 1:-len("<|fim_middle|>")] + target[:-len("<|endoftext|>")]
        assert line in MAIN.split("\n")
    without = list(samples(read_projects(path), engine, per_kind=3, random_per_file=0, no_context=1.0))
    assert not any(s.context for s in without)
    assert all("from util.py:" not in tok.decode(s.prompt, skip_special_tokens=False) for s in without)


def test_the_needed_definition_can_be_put_in_a_small_block():
    snippets = [Snippet("util.py", "import", (f"def helper_{i}(a, b):",), (f"helper_{i}",), rank=i) for i in range(8)]
    snippets.append(Snippet("other.py", "similar", ("x = helper_0(1, 2)",), rank=0))
    count = lambda t: len(t) // 4 + 1
    block = _snippet_block(snippets, 40, count, "#")
    assert "helper_0" in block and "helper_7" not in block            # the ranking fills a small budget first
    moved = with_definition(snippets, "helper_7")
    assert [s.rank for s in moved if s.names == ("helper_7",)] == [-1]
    assert "def helper_7(a, b):" in _snippet_block(moved, 40, count, "#")
    assert with_definition(snippets, "absent") == snippets           # nothing defines it: the same snippets
    assert [s.rank for s in with_definition(snippets, "helper_7", 0) if s.names == ("helper_7",)] == [0]
