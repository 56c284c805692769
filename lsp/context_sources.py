"""Context from beyond the open file, made in the background and cached per document, so no keystroke waits on it.

Sources (setting ``contextSources``, all on by default; their plain functions live in ``completer.context``):

- ``imports``: signatures of the definitions a document imports, resolved through the workspace's files
  (``completer/context/workspace.py``; the workspace is the client's ``workspaceFolders`` / ``rootUri``, files read
  from disk when they are not open). Recomputed when the document's import lines change (checked after an edit
  pauses), on open and on save; ranked by how near the cursor's region the document uses each name
  (``rank_by_use``), once per region as the similar windows;
- ``similar``: the windows of recently used documents (the open ones, most recently edited first, and the files the
  document imports) most like the code above the cursor (``similar.py``, Jaccard over identifier sets), picked once
  per region of the document (``ANCHOR_STEP`` lines; again on open and save): a completion request in another region
  schedules a new pick;
- ``edits``: the lines edited most recently, in this document (outside the region of the cursor) and others
  (``edits.py``).

Everything is computed in one background thread (``_EXECUTOR``) after an edit pauses (``IDLE_S``), each source
within its time budget (``BUDGET_S``). A completion takes what the cache holds at that moment: the snippets of an
earlier version, or none before the first computation. The cache also keeps the prompt's context block the same
from one keystroke to the next, so the engine's prefix KV cache reuses it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

from completer.context import ANCHOR_STEP, Snippet, SourceFile
from completer.context.edits import EditLog, edit_snippets
from completer.context.languages import canonical_language
from completer.context.similar import query_window, similar_snippets
from completer.context.workspace import (FAMILY, IMPORT_LINE, Workspace, import_snippets, imported_files, path_of,
                                         rank_by_use, relative_name)

log = logging.getLogger(__name__)

IDLE_S = 0.3                  # an edit pause this long before the background computation starts
BUDGET_S = {"imports": 0.5, "similar": 0.1, "edits": 0.05}   # each source's time budget per computation
RECENT_DOCUMENTS = 8          # recently used documents searched for similar windows
_EXECUTOR = ThreadPoolExecutor(max_workers=1, thread_name_prefix="completer-context")


def workspace_roots(params) -> list[str]:
    """Folders of ``initialize``'s ``workspaceFolders``, else its ``rootUri``, else ``rootPath`` (file URIs only)."""
    roots = []
    for f in getattr(params, "workspace_folders", None) or ():
        if f.uri.startswith("file:"):
            roots.append(path_of(f.uri))
    if not roots and getattr(params, "root_uri", None) and params.root_uri.startswith("file:"):
        roots.append(path_of(params.root_uri))
    if not roots and getattr(params, "root_path", None):
        roots.append(params.root_path)
    return [r for r in roots if os.path.isdir(r)]


def import_key(text: str) -> tuple[str, ...]:
    """The document's import lines: its import snippets change only when these do (or a file is saved)."""
    return tuple(m.group(0).strip() for m in IMPORT_LINE.finditer(text))


@dataclass
class ContextStats:
    computations: int = 0          # background computations run
    import_resolutions: int = 0    # of those, with the imports resolved again (import lines changed, open, save)
    over_budget: int = 0           # sources that stopped at their time budget
    last_ms: float | None = None   # the last computation's time (in the background thread)
    served_stale: int = 0          # completions given the snippets of another region or version (being recomputed)


@dataclass
class _Cached:
    version: int
    key: tuple                     # import lines
    imports: list[Snippet]         # as resolved (import_snippets)
    similar: list[Snippet]
    anchor: int                    # the region (line // ANCHOR_STEP) the similar windows and the ranking are for
    edits: list[Snippet]
    ranked: list[Snippet]          # the imports ranked by their uses near the cursor's region (rank_by_use)


def compute(doc: SourceFile, ws: Workspace, sources: Sequence[str], line: int, recent: Sequence[SourceFile],
            edit_log: EditLog | None, previous: _Cached | None, force_imports: bool = False
            ) -> tuple[_Cached, int, bool]:
    """The snippets of ``doc`` (a plain function: the server calls it in its background thread); returns them,
    how many sources ran over their budget, and whether the imports were resolved again."""
    over = 0
    key = import_key(doc.text)
    resolved = False
    imports = previous.imports if previous is not None else []
    if "imports" in sources and (force_imports or previous is None or previous.key != key):
        t = time.monotonic()
        imports = import_snippets(doc, ws, deadline=t + BUDGET_S["imports"])
        over += time.monotonic() - t > BUDGET_S["imports"]
        resolved = True
    elif "imports" not in sources:
        imports = []
    similar: list[Snippet] = []
    lines = doc.text.split("\n")
    offset = sum(len(l) + 1 for l in lines[:min(line, len(lines) - 1)]) + len(lines[min(line, len(lines) - 1)])
    same_region = previous is not None and previous.anchor == line // ANCHOR_STEP and not force_imports
    # the same region and imports: the same ranking (and similar windows below), so the prompt's start stays the same
    ranked = (previous.ranked if same_region and not resolved else rank_by_use(imports, doc.text, line)) if imports else []
    if "similar" in sources and same_region:
        similar = previous.similar        # the same region: the same windows, so the prompt's start stays the same
    elif "similar" in sources:
        t = time.monotonic()
        language = canonical_language(doc.language_id, doc.uri)
        files = [(relative_name(path_of(r.uri), ws), r.text) for r in recent
                 if r.uri != doc.uri and FAMILY.get(canonical_language(r.language_id, r.uri), "x")
                 == FAMILY.get(language, language) or canonical_language(r.language_id, r.uri) == language]
        seen = {path_of(r.uri) for r in recent} | {path_of(doc.uri)}
        for p in imported_files(doc, ws).files:
            if len(files) >= RECENT_DOCUMENTS:
                break
            if p not in seen and (text := ws.read(p)) is not None:
                files.append((relative_name(p, ws), text))
        similar = similar_snippets(query_window(doc.text, offset), files[:RECENT_DOCUMENTS],
                                   deadline=t + BUDGET_S["similar"])
        over += time.monotonic() - t > BUDGET_S["similar"]
    edits: list[Snippet] = []
    if "edits" in sources and edit_log is not None:
        texts = {doc.uri: doc.text, **{r.uri: r.text for r in recent}}
        region = (line // ANCHOR_STEP * ANCHOR_STEP - 2 * ANCHOR_STEP, line + ANCHOR_STEP)
        edits = edit_snippets(edit_log, texts.get, lambda u: relative_name(path_of(u), ws), doc.uri, region)
    return _Cached(0, key, imports, similar, line // ANCHOR_STEP, edits, ranked), over, resolved


class ContextSources:
    """One per connection: the background computation and the cache of each open document's snippets."""

    def __init__(self, documents: Callable[[], object], config: Callable[[], object]):
        self._documents, self._config = documents, config
        self.workspace = Workspace([])
        self.edits = EditLog()
        self.stats = ContextStats()
        self._cache: dict[str, _Cached] = {}
        self._recent: "OrderedDict[str, None]" = OrderedDict()
        self._line: dict[str, int] = {}            # the cursor's line as last seen (edit or request)
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._running: set[str] = set()
        self._force: set[str] = set()

    def set_roots(self, roots: Sequence[str]) -> None:
        self.workspace = Workspace(roots)

    # --- events (document sync) -------------------------------------------------------------------------------
    def opened(self, uri: str, text: str) -> None:
        self._touch(uri)
        self._line.setdefault(uri, 0)
        self._force.add(uri)
        self._schedule(uri, 0.0)

    def changed(self, uri: str, ranges: Sequence[tuple[int, int, int]]) -> None:
        """``ranges``: (first line, last line, lines added) of each change, in order."""
        for first, last, added in ranges:
            self.edits.record(uri, first, last, added)
            self._line[uri] = first
        self._touch(uri)
        self._schedule(uri, IDLE_S)

    def saved(self, uri: str) -> None:
        self._force.add(uri)
        self._schedule(uri, 0.0)

    def closed(self, uri: str) -> None:
        for d in (self._cache, self._line, self._recent):
            d.pop(uri, None)
        self.edits.drop(uri)
        t = self._timers.pop(uri, None)
        if t is not None:
            t.cancel()

    def cancel_all(self) -> None:
        for t in self._timers.values():
            t.cancel()
        self._timers.clear()

    # --- the keystroke path: the cache only ---------------------------------------------------------------------
    def snippets(self, uri: str, line: int) -> list[Snippet]:
        """The cached snippets for the cursor on ``line`` of ``uri`` (never computed here); a cursor in another
        region than the cache's schedules a new pick of similar windows."""
        sources = self._config().context_sources
        if not sources:
            return []
        self._line[uri] = line
        c = self._cache.get(uri)
        if c is None:
            return []
        if ("similar" in sources or "imports" in sources) and c.anchor != line // ANCHOR_STEP:
            self.stats.served_stale += 1
            self._schedule(uri, IDLE_S)
        return [*c.ranked, *c.similar, *c.edits]

    # --- the background -------------------------------------------------------------------------------------------
    def _touch(self, uri: str) -> None:
        self._recent.pop(uri, None)
        self._recent[uri] = None
        while len(self._recent) > 64:
            self._recent.popitem(last=False)

    def _schedule(self, uri: str, delay: float) -> None:
        if not self._config().context_sources:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        old = self._timers.pop(uri, None)
        if old is not None:
            old.cancel()
        self._timers[uri] = loop.call_later(delay, lambda: loop.create_task(self._run(uri)))

    async def _run(self, uri: str) -> None:
        self._timers.pop(uri, None)
        if uri in self._running:                 # one at a time per document: again once this one ends
            self._schedule(uri, IDLE_S)
            return
        docs = self._documents()
        if uri not in docs:
            return
        snap = docs.get(uri)
        cfg = self._config()
        recent = [docs.get(u) for u in reversed(self._recent) if u != uri and u in docs][:RECENT_DOCUMENTS]
        ws = self.workspace
        ws.texts = {path_of(s.uri): s.text for s in [snap, *recent]}
        force = uri in self._force
        self._force.discard(uri)
        line = self._line.get(uri, 0)
        doc = SourceFile(uri, snap.language_id, snap.text)
        others = [SourceFile(s.uri, s.language_id, s.text) for s in recent]
        self._running.add(uri)
        t = time.perf_counter()
        try:
            cached, over, resolved = await asyncio.get_running_loop().run_in_executor(
                _EXECUTOR, compute, doc, ws, cfg.context_sources, line, others, self.edits, self._cache.get(uri),
                force)
        except Exception:  # noqa: BLE001 -- a source's failure costs its snippets, never the server
            log.exception("context sources failed for %s", uri)
            return
        finally:
            self._running.discard(uri)
        self.stats.computations += 1
        self.stats.import_resolutions += resolved
        self.stats.over_budget += over
        self.stats.last_ms = (time.perf_counter() - t) * 1000
        if uri in self._documents():             # not closed meanwhile
            cached.version = snap.version
            self._cache[uri] = cached

    def snapshot_stats(self) -> dict:
        d = asdict(self.stats)
        d["workspaceFolders"] = list(self.workspace.roots)
        d["workspaceFiles"] = self.workspace.indexed()
        d["cachedDocuments"] = len(self._cache)
        return d


def edit_ranges(changes) -> list[tuple[int, int, int]]:
    """(first line, last line, lines added) of each ``lsp.documents.Change`` (a whole-document change: line 0)."""
    out = []
    for c in changes:
        if c.range is None:
            out.append((0, 0, 0))
            continue
        (sl, _), (el, _) = c.range
        out.append((sl, el, c.text.count("\n") - (el - sl)))
    return out
