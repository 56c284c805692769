"""The context sources' background computation (a plain function) and what a keystroke gets: imports resolved again
only when the import lines change, similar windows kept within a region, the cache only on the keystroke path."""

from __future__ import annotations

from types import SimpleNamespace

from completer.context import SourceFile
from completer.context.workspace import Workspace, uri_of
from lsp.context_sources import ContextSources, compute, edit_ranges, import_key
from lsp.documents import Change


def test_compute_resolves_imports_once_and_keeps_windows_within_a_region(tmp_path):
    (tmp_path / "util.py").write_text("def parse_header(line, strict):\n    return line\n")
    text = "from util import parse_header\n\n" + "value = compute(item)\n" * 40
    doc = SourceFile(uri_of(tmp_path / "main.py"), "python", text)
    other = SourceFile(uri_of(tmp_path / "other.py"), "python", "def compute(item):\n    return item * 2\n" * 5)
    ws = Workspace([tmp_path])
    first, over, resolved = compute(doc, ws, ("imports", "similar"), 20, [other], None, None)
    assert resolved and first.imports[0].lines[0] == "def parse_header(line, strict):"
    assert first.similar and first.similar[0].source == "other.py"
    edited = SourceFile(doc.uri, "python", text + "value = 1\n")
    again, _, resolved = compute(edited, ws, ("imports", "similar"), 21, [other], None, first)
    assert not resolved and again.imports is first.imports       # same import lines: not resolved again
    assert again.similar is first.similar                        # same region (line // 16): the same windows
    assert import_key("import os\nx = 1\nfrom a import b\n") == ("import os", "from a import b")


def test_a_keystroke_only_reads_the_cache():
    cfg = SimpleNamespace(context_sources=("imports", "similar", "edits"))
    docs = {}
    cs = ContextSources(lambda: docs, lambda: cfg)
    assert cs.snippets("file:///a.py", 3) == []                # nothing computed yet: nothing, at once
    cs.changed("file:///a.py", edit_ranges([Change("x", ((3, 0), (3, 0))), Change("a\nb", None)]))
    assert [(u, r.first) for u, r in cs.edits.recent()] == [("file:///a.py", 0), ("file:///a.py", 3)]
    assert cs.stats.computations == 0                            # no event loop here: nothing was scheduled
