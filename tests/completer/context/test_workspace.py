"""Cross-file context: imports resolved through a workspace's files, per language, and the snippets made of them;
similar windows; recently edited ranges; and how the prompt takes them."""

from __future__ import annotations

from pathlib import Path

import pytest

from completer.context import SourceFile, Snippet, build_prompt
from completer.context.edits import EditLog, edit_snippets
from completer.context.similar import jaccard, identifiers, query_window, similar_snippets
from completer.context.workspace import Workspace, import_snippets, imported_files, rank_by_use, uri_of


def count(s: str) -> int:
    return len(s) // 3 + 1


def project(tmp_path: Path, files: dict[str, str]) -> Workspace:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return Workspace([tmp_path])


def doc(tmp_path: Path, rel: str, language: str) -> SourceFile:
    p = tmp_path / rel
    return SourceFile(uri_of(p), language, p.read_text())


def rels(tmp_path: Path, paths: list[str]) -> list[str]:
    return [str(Path(p).relative_to(tmp_path.resolve())) for p in paths]


CASES = {
    "python": ({"pkg/__init__.py": "", "pkg/util.py": "def parse_version(s):\n    return s\n",
                "pkg/sub/model.py": "class Record:\n    def __init__(self, key, value):\n        pass\n",
                "pkg/main.py": "from .util import parse_version\nfrom pkg.sub.model import Record\nx = 1\n"},
               "pkg/main.py", ["pkg/util.py", "pkg/sub/model.py"], "def parse_version(s):"),
    "javascript": ({"lib/helpers.js": "function slugify(text) {\n  return text\n}\nmodule.exports = { slugify }\n",
                    "lib/app.js": "const { slugify } = require('./helpers')\nconst x = 1\n"},
                   "lib/app.js", ["lib/helpers.js"], "function slugify(text) {"),
    "typescript": ({"src/codegen/index.ts": "export class CodeGen {\n  constructor(opts: Options) {}\n}\n",
                    "src/core.ts": "import {CodeGen} from './codegen'\nconst g = 1\n"},
                   "src/core.ts", ["src/codegen/index.ts"], "class CodeGen { constructor(opts: Options) {"),
    "go": ({"uuid/uuid.go": "package uuid\n\nfunc Parse(s string) (UUID, error) {\n\treturn nil, nil\n}\n",
            "uuid/hash.go": "package uuid\n\nimport \"crypto/md5\"\n\nvar x = 1\n",
            "uuid/uuid_test.go": "package uuid\n\nfunc TestParse(t *testing.T) {}\n"},
           "uuid/hash.go", ["uuid/uuid.go"], "func Parse(s string) (UUID, error) {"),
    "rust": ({"src/lib.rs": "mod parse;\nmod error;\npub struct Version {\n    pub major: u64,\n}\n",
              "src/error.rs": "pub struct Error {\n    kind: ErrorKind,\n}\n",
              "src/parse.rs": "use crate::error::Error;\nuse crate::Version;\nfn f() {}\n"},
             "src/parse.rs", ["src/error.rs", "src/lib.rs"], "pub struct Error {"),
    "c": ({"crypto/internal.h": "static inline int constant_time_eq_w(int a, int b) {\n  return a == b;\n}\n",
           "crypto/limbs/limbs.c": "#include \"../internal.h\"\n#include <stdint.h>\nint x;\n"},
          "crypto/limbs/limbs.c", ["crypto/internal.h"], "static inline int constant_time_eq_w(int a, int b) {"),
}


@pytest.mark.parametrize("language", list(CASES))
def test_imports_resolve_to_workspace_files_and_give_their_signatures(tmp_path, language):
    files, target, expected, signature = CASES[language]
    ws = project(tmp_path, files)
    d = doc(tmp_path, target, language)
    got = rels(tmp_path, imported_files(d, ws).files)
    assert got[:len(expected)] == expected or sorted(got) == sorted(expected), got
    lines = [l for s in import_snippets(d, ws) for l in s.lines]
    assert signature in lines, lines


def test_explicitly_imported_names_rank_before_the_rest(tmp_path):
    ws = project(tmp_path, {"a.py": "def zeta():\n    pass\n\n\ndef alpha():\n    pass\n",
                            "b.py": "from a import zeta\n"})
    snips = import_snippets(doc(tmp_path, "b.py", "python"), ws)
    ranked = sorted(snips, key=lambda s: s.rank)
    assert ranked[0].lines == ("def zeta():",) and ranked[-1].lines == ("def alpha():",)


def test_ranked_by_use_the_definitions_the_code_near_the_cursor_uses_come_first(tmp_path):
    """Four names from two files; the cursor at line 30: the name imported and not used yet first, then the one used
    on line 28, then line 3's; the file's other definition (tier 2) keeps its rank after them. A small budget then
    holds what the cursor's region needs, where file order gave it the first file's definitions."""
    ws = project(tmp_path, {
        "a.py": "def first():\n    pass\n\n\ndef near():\n    pass\n\n\ndef other():\n    pass\n",
        "b.py": "def fresh():\n    pass\n",
        "c.py": "from a import first, near\nfrom b import fresh\n\nfirst()\n" + "x = 1\n" * 23 + "near()\n\n\n"})
    d = doc(tmp_path, "c.py", "python")
    snips = import_snippets(d, ws)
    assert [s.source for s in sorted(snips, key=lambda s: s.rank)][0] == "a.py"     # file order first
    ranked = sorted(rank_by_use(snips, d.text, 30), key=lambda s: s.rank)
    assert [s.names for s in ranked] == [("fresh",), ("near",), ("first",), ("other",)], ranked
    assert [s.rank for s in ranked][:3] == [0, 1, 7]                               # 2 and 26 lines away, 4 a step
    assert all(len(s.lines) == 1 for s in ranked[:3]) and ranked[1].lines == ("def near():",)
    def block(snippets):
        return build_prompt(d, len(d.text), count_tokens=count, snippets=snippets, budget_tokens=250,
                            snippet_share=0.1).context
    assert "def fresh():" not in block(snips) and "def other():" in block(snips)    # a.py's, in file order
    assert "def fresh():" in block(ranked) and "def near():" in block(ranked) and "def other():" not in block(ranked)
    assert rank_by_use(snips, d.text, 30) == rank_by_use(snips, d.text, 30)       # a plain function: the same block


def test_the_document_itself_and_files_outside_the_roots_are_never_read(tmp_path):
    ws = project(tmp_path / "ws", {"m.py": "import m\n"})
    assert imported_files(doc(tmp_path / "ws", "m.py", "python"), ws).files == []
    outside = tmp_path / "secret.py"
    outside.write_text("def token(): pass\n")
    assert ws.read(str(outside)) is None
    ws.texts[str(outside)] = "def token(): pass\n"          # an open document may be read wherever it lives
    assert ws.read(str(outside)) == "def token(): pass\n"


def test_similar_windows_pick_the_file_that_shares_identifiers():
    query = "total = order.subtotal + order.shipping_fee\nreturn apply_discount(total, order.coupon)\n"
    files = [("unrelated.py", "import os\nprint(os.getcwd())\n" * 5),
             ("pricing.py", "def apply_discount(total, coupon):\n    return total - coupon.amount\n")]
    snips = similar_snippets(query, files)
    assert [s.source for s in snips] == ["pricing.py"]
    assert snips[0].lines[0] == "def apply_discount(total, coupon):"
    assert jaccard(identifiers("a_b c_d"), identifiers("a_b e_f")) == pytest.approx(1 / 3)
    assert query_window("x\n" * 100 + "abc", 203).count("\n") == 20


def test_edit_log_merges_touching_ranges_and_skips_what_the_window_shows():
    log = EditLog()
    log.record("file:///a.py", 10, 10, 0)
    log.record("file:///a.py", 11, 11, 1)       # touches line 10's range: merged, one line added
    log.record("file:///b.py", 3, 3, 0)
    assert [(u, r.first, r.last) for u, r in log.recent()] == [("file:///b.py", 3, 3), ("file:///a.py", 10, 12)]
    texts = {"file:///a.py": "\n".join(f"a{i}" for i in range(30)), "file:///b.py": "b0\nb1\nb2\nb3\nb4\n"}
    snips = edit_snippets(log, texts.get, lambda u: u.rsplit("/", 1)[1], "file:///a.py", shown=(0, 20))
    assert [s.source for s in snips] == ["b.py"] and "b3" in snips[0].lines


def test_snippets_come_first_in_the_block_within_their_share():
    text = "x = 1\n" * 400 + "y = "
    d = SourceFile("file:///w/main.py", "python", text)
    snips = [Snippet("util.py", "import", tuple(f"def helper_{i}(a, b):" for i in range(200)), rank=0)]
    plan = build_prompt(d, len(text), count_tokens=count, budget_tokens=600, snippets=snips, snippet_share=0.25)
    assert plan.context.startswith("# from util.py:\n# def helper_0(a, b):\n")
    assert count(plan.context) <= 0.25 * 600 + 20
    assert plan.prompt_tokens <= 600
    none = build_prompt(d, len(text), count_tokens=count, budget_tokens=600)
    assert "util.py" not in none.prompt and none.prompt != plan.prompt
    # the same snippets give the same block (the engine reuses the KV of the prompt's start across keystrokes)
    again = build_prompt(SourceFile(d.uri, "python", text + "f"), len(text) + 1, count_tokens=count,
                         budget_tokens=600, snippets=snips, snippet_share=0.25)
    assert again.context == plan.context
