"""Definitions of the names a document imports, found in the files of its workspace (cross-file context).

``Workspace(roots)`` is the set of source files under the workspace folders (read from disk when they are not open;
an open document's own text wins); ``imported_files(doc, workspace)`` resolves the document's imports to files of
the workspace, per language:

- Python: ``import a.b`` / ``from a.b import c`` / ``from .x import y`` (relative to the document's package, or any
  workspace file whose dotted path ends with the module);
- JavaScript / TypeScript: ``import ... from './x'``, ``require('./x')``, ``export ... from``: relative paths with
  the usual extensions and ``index`` files;
- Go: the other files of the document's package (same folder: they need no import), and imported packages whose
  import path ends with a workspace folder;
- Rust: ``mod x;``, ``use crate::a::b``, ``use super::...``, ``use self::...`` from the crate root (the folder of
  ``lib.rs`` / ``main.rs``);
- C / C++: ``#include "x.h"`` (and ``<x/y.h>``) relative to the document, else any workspace file whose path ends
  with it.

``import_snippets(doc, workspace)`` then gives the signatures of those files' definitions (tree-sitter, the same
outline as the open file's context), the names the document imports or uses first. Everything here reads files and
parses them: the language server runs it in the background on open/save/change (``lsp/context_sources.py``), never
on a keystroke, and caches it per document version; each call stops at its ``deadline``.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Iterable, Sequence

from completer.text import clean_surrogates as sanitize

from .languages import EXTENSIONS, canonical_language, _path_of
from .plan import Snippet, SourceFile
from .syntax import outline

log = logging.getLogger(__name__)

MAX_FILES = 20_000              # files indexed per workspace (a huge monorepo is cut, not walked for minutes)
MAX_FILE_BYTES = 256 * 1024     # bigger files are not read (generated tables, bundles)
MAX_IMPORTED_FILES = 12         # files whose definitions one document gets
MAX_DEFS_PER_FILE = 40
SKIP_DIRS = {".git", "node_modules", "__pycache__", "target", "build", "dist", ".venv", "venv", ".tox", "vendor",
             "testdata", ".mypy_cache", ".pytest_cache"}
FAMILY = {"c": "c", "cpp": "c", "javascript": "js", "typescript": "js", "tsx": "js"}
JS_EXTS = (".ts", ".tsx", ".js", ".mjs", ".cjs", ".jsx", ".d.ts")


def path_of(uri: str) -> str:
    """The file system path of a ``file://`` URI (or a plain path)."""
    return _path_of(uri)


def uri_of(path: str | Path) -> str:
    return Path(path).resolve().as_uri()


@dataclass(frozen=True)
class _Entry:
    path: str
    language: str


class Workspace:
    """The source files under ``roots`` (folders), indexed once (``refresh`` to walk again), read lazily and cached
    by modification time. ``texts``: text of open documents by path, which wins over the disk."""

    def __init__(self, roots: Sequence[str | Path], max_files: int = MAX_FILES):
        self.roots = [str(Path(r).resolve()) for r in roots if r and Path(r).is_dir()]
        self.max_files = max_files
        self.texts: dict[str, str] = {}
        self._files: list[_Entry] | None = None
        self._cache: dict[str, tuple[float, str | None]] = {}
        self.truncated = False

    # --- the index -----------------------------------------------------------------------------------------------
    def files(self) -> list[_Entry]:
        if self._files is None:
            self._files = self._walk()
        return self._files

    def refresh(self) -> None:
        self._files = None
        self._by_suffix.cache_clear()

    def _walk(self) -> list[_Entry]:
        out: list[_Entry] = []
        for root in self.roots:
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
                for name in sorted(filenames):
                    lang = EXTENSIONS.get(PurePosixPath(name).suffix.lower())
                    if lang is None:
                        continue
                    out.append(_Entry(os.path.join(dirpath, name), lang))
                    if len(out) >= self.max_files:
                        self.truncated = True
                        return out
        return out

    def add(self, path: str, language: str | None = None) -> None:
        """A file the index did not have (created after the walk, or outside the roots but open)."""
        lang = language or EXTENSIONS.get(PurePosixPath(path).suffix.lower())
        if lang is None:
            return
        files = self.files()
        if all(e.path != path for e in files):
            files.append(_Entry(path, lang))
            self._by_suffix.cache_clear()

    def contains(self, path: str) -> bool:
        return any(path == r or path.startswith(r.rstrip("/") + "/") for r in self.roots)

    @functools.lru_cache(maxsize=4)
    def _by_suffix(self) -> dict[str, list[str]]:
        """File name -> paths (resolution by path suffix looks the name up first)."""
        d: dict[str, list[str]] = {}
        for e in self.files():
            d.setdefault(os.path.basename(e.path), []).append(e.path)
        return d

    def ending_with(self, tail: str) -> list[str]:
        """Workspace files whose path ends with ``/tail``, shortest path first."""
        tail = tail.lstrip("/")
        cands = self._by_suffix().get(os.path.basename(tail), [])
        return sorted((p for p in cands if p.endswith("/" + tail) or p == tail), key=len)

    def exists(self, path: str) -> bool:
        return path in self.texts or os.path.basename(path) in self._by_suffix() and path in set(
            self._by_suffix()[os.path.basename(path)])

    def indexed(self) -> int:
        """Files indexed so far (0 before the first walk)."""
        return len(self._files or ())

    def read(self, path: str) -> str | None:
        """The text of ``path``: an open document's, else the disk's when it lies under a root (None otherwise)."""
        if path in self.texts:
            return self.texts[path]
        if not self.contains(path):
            return None
        try:
            st = os.stat(path)
        except OSError:
            return None
        hit = self._cache.get(path)
        if hit is not None and hit[0] == st.st_mtime:
            return hit[1]
        text = None
        if st.st_size <= MAX_FILE_BYTES:
            try:
                data = Path(path).read_bytes()
                text = None if b"\0" in data else sanitize(data.decode("utf-8", "replace"))
            except OSError:
                text = None
        self._cache[path] = (st.st_mtime, text)
        return text


# --- import resolution, per language ---------------------------------------------------------------------------------
_PY_FROM = re.compile(r"^[ \t]*from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]*(?:\(([^)]*)\)|([^\n#]*))", re.M)
_PY_IMPORT = re.compile(r"^\s*import\s+([\w., ]+)", re.M)
_JS_SPEC = re.compile(r"""(?:\bfrom\s*|\brequire\s*\(\s*|\bimport\s*\(\s*|^\s*import\s+)(['"])([^'"\n]+)\1""", re.M)
_JS_NAMES = re.compile(r"import\s+(?:type\s+)?(?:(\w+)\s*,?\s*)?(?:\{([^}]*)\})?[^'\"]*from", re.M)
_JS_REQ_NAMES = re.compile(r"(?:const|let|var)\s+(?:\{([^}]*)\}|(\w+))\s*=\s*require\(", re.M)
_GO_IMPORT = re.compile(r'"([^"\n]+)"')
_RS_MOD = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", re.M)
_RS_USE = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", re.M)
_C_INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"\n]+)[>"]', re.M)


@dataclass
class Imports:
    files: list[str]            # resolved workspace paths, in the document's order
    names: set[str]             # names the document imports explicitly (their definitions come first)


def _first(paths: Iterable[str], ws: Workspace) -> str | None:
    for p in paths:
        if os.path.isfile(p) or p in ws.texts:
            return p
    return None


def _python(text: str, path: str, ws: Workspace) -> Imports:
    files, names = [], set()
    here = os.path.dirname(path)

    def module(dots: str, dotted: str) -> str | None:
        parts = [p for p in dotted.split(".") if p]
        if dots:
            base = here
            for _ in range(len(dots) - 1):
                base = os.path.dirname(base)
            stem = os.path.join(base, *parts) if parts else base
            return _first([stem + ".py", os.path.join(stem, "__init__.py")], ws)
        if not parts:
            return None
        for tail in ("/".join(parts) + ".py", "/".join(parts) + "/__init__.py"):
            found = ws.ending_with(tail)
            if found:
                return found[0]
        return None

    for m in _PY_FROM.finditer(text):
        dots, dotted, what = m.group(1), m.group(2), m.group(3) or m.group(4) or ""
        imported = [w.strip().split(" as ")[0].strip() for w in what.replace("\\", " ").split(",")]
        imported = [w for w in imported if w and w != "*" and w.isidentifier()]
        mod = module(dots, dotted)
        for w in imported:                       # from . import sub: the name may be a module itself
            sub = module(dots, f"{dotted}.{w}" if dotted else w)
            if sub is not None:
                files.append(sub)
            else:
                names.add(w)
        if mod is not None and any(w in names for w in imported):
            files.append(mod)
    for m in _PY_IMPORT.finditer(text):
        for part in m.group(1).split(","):
            dotted = part.strip().split(" as ")[0].strip()
            mod = module("", dotted) if dotted else None
            if mod is not None:
                files.append(mod)
    return Imports(files, names)


def _js(text: str, path: str, ws: Workspace) -> Imports:
    files, names = [], set()
    here = os.path.dirname(path)
    for m in _JS_SPEC.finditer(text):
        spec = m.group(2)
        if not spec.startswith("."):
            continue                                 # a package: not the workspace's own code
        stem = os.path.normpath(os.path.join(here, spec))
        base, ext = os.path.splitext(stem)
        cands = [stem] if ext in JS_EXTS and os.path.isfile(stem) else []
        if ext in (".js", ".mjs", ".cjs", ".jsx"):       # TypeScript sources import their compiled names
            cands += [base + e for e in (".ts", ".tsx", ".mts", ".cts")]
        cands += [stem + e for e in JS_EXTS] + [os.path.join(stem, "index" + e) for e in JS_EXTS]
        found = _first(cands, ws)
        if found is not None:
            files.append(found)
    for m in _JS_NAMES.finditer(text):
        if m.group(1):
            names.add(m.group(1))
        for part in (m.group(2) or "").split(","):
            w = part.strip().split(" as ")[0].replace("type ", "").strip()
            if w.isidentifier():
                names.add(w)
    for m in _JS_REQ_NAMES.finditer(text):
        for part in (m.group(1) or m.group(2) or "").split(","):
            w = part.strip().split(":")[0].strip()
            if w.isidentifier():
                names.add(w)
    return Imports(files, names)


def _go(text: str, path: str, ws: Workspace) -> Imports:
    here = os.path.dirname(path)
    files = [e.path for e in ws.files() if os.path.dirname(e.path) == here and e.path != path
             and e.language == "go" and not e.path.endswith("_test.go")]
    block = re.search(r"^import\s*(\([^)]*\)|\"[^\"]+\")", text, re.M | re.S)
    for spec in _GO_IMPORT.findall(block.group(1) if block else ""):
        parts = spec.split("/")
        for k in range(len(parts), 0, -1):           # longest tail of the import path that is a workspace folder
            tail = "/".join(parts[-k:])
            dirs = {os.path.dirname(p) for e in ws.files() if e.language == "go"
                    for p in (e.path,) if os.path.dirname(p).endswith("/" + tail)}
            if dirs:
                d = sorted(dirs, key=len)[0]
                files += [e.path for e in ws.files() if os.path.dirname(e.path) == d and e.language == "go"
                          and not e.path.endswith("_test.go")]
                break
    return Imports(files, set())


def _rust_root(path: str) -> str:
    d = os.path.dirname(path)
    while True:
        if os.path.isfile(os.path.join(d, "lib.rs")) or os.path.isfile(os.path.join(d, "main.rs")):
            if os.path.basename(d) == "src" or not os.path.isfile(os.path.join(os.path.dirname(d), "lib.rs")):
                return d
        parent = os.path.dirname(d)
        if parent == d or os.path.basename(d) == "src":
            return os.path.dirname(path) if parent == d else d
        d = parent


def _rust_module_dir(path: str) -> str:
    """The folder that a module's ``mod x;`` children live in."""
    d, name = os.path.dirname(path), os.path.basename(path)
    if name in ("lib.rs", "main.rs", "mod.rs"):
        return d
    return os.path.join(d, name[:-3])


def _rust(text: str, path: str, ws: Workspace) -> Imports:
    files, names = [], set()
    root = _rust_root(path)
    mdir = _rust_module_dir(path)

    def module_file(segments: list[str], base: str) -> str | None:
        """The deepest file of ``segments`` below ``base`` (a use path names items inside modules)."""
        found = None
        d = base
        for seg in segments:
            f = _first([os.path.join(d, seg + ".rs"), os.path.join(d, seg, "mod.rs")], ws)
            if f is None:
                break
            found, d = f, os.path.join(d, seg)
        return found

    for m in _RS_MOD.finditer(text):
        f = module_file([m.group(1)], mdir)
        if f is not None:
            files.append(f)
    for m in _RS_USE.finditer(text):
        tree = re.sub(r"\s+", "", m.group(1))
        head, _, rest = tree.partition("::")
        prefixes = []
        for leaf in re.split(r"[{},]", tree):
            leaf = leaf.split("::")[-1].split("as")[0] if leaf else ""
            if leaf.isidentifier() and leaf not in ("self", "super", "crate"):
                names.add(leaf)
        segs = [s for s in re.split(r"::|[{},]", rest) if s.isidentifier() and s != "self"]
        if head == "crate":
            prefixes.append(root)
        elif head == "super":
            prefixes.append(os.path.dirname(mdir) if os.path.basename(path) not in ("lib.rs", "main.rs")
                            else mdir)
        elif head == "self":
            prefixes.append(mdir)
        else:
            continue                                   # another crate
        # each leaf path: crate::a::b::{C, d::E}: try the chain a, b, d
        chain = [s for s in rest.split("::") if s.isidentifier()]
        for base in prefixes:
            f = module_file(chain or segs, base)
            if f is None:              # an item of the module itself (use crate::Version): the module's own file
                f = _first([os.path.join(base, "lib.rs"), os.path.join(base, "main.rs"), os.path.join(base, "mod.rs"),
                            base + ".rs"], ws)
            if f is not None and f != path:
                files.append(f)
            for seg in segs:                           # a {group} of modules
                g = module_file([seg], base if not chain else os.path.join(base, *chain))
                if g is not None:
                    files.append(g)
    return Imports(files, names)


def _c(text: str, path: str, ws: Workspace) -> Imports:
    files = []
    here = os.path.dirname(path)
    for m in _C_INCLUDE.finditer(text):
        spec = m.group(2)
        local = os.path.normpath(os.path.join(here, spec))
        found = _first([local], ws) if m.group(1) == '"' else None
        if found is None:
            cands = ws.ending_with(spec)
            found = cands[0] if cands else None
        if found is not None:
            files.append(found)
    if path.endswith((".c", ".cc", ".cpp", ".cxx")):        # x.c's own header x.h declares what it defines
        stem = os.path.splitext(path)[0]
        own = _first([stem + ".h", stem + ".hpp"], ws)
        if own is not None and own not in files:
            files.append(own)
    return Imports(files, set())


RESOLVERS = {"python": _python, "javascript": _js, "typescript": _js, "tsx": _js, "go": _go, "rust": _rust,
             "c": _c, "cpp": _c}


def imported_files(doc: SourceFile, ws: Workspace) -> Imports:
    """The workspace files ``doc`` imports (deduplicated, in order, never ``doc`` itself) and the names it imports."""
    language = canonical_language(doc.language_id, doc.uri)
    resolve = RESOLVERS.get(language)
    if resolve is None:
        return Imports([], set())
    path = path_of(doc.uri)
    try:
        found = resolve(doc.text, path, ws)
    except (OSError, ValueError, RecursionError) as e:
        log.warning("import resolution failed for %s: %s: %s", doc.uri, type(e).__name__, e)
        return Imports([], set())
    seen, files = {path}, []
    for f in found.files:
        f = os.path.normpath(f)
        if f not in seen:
            seen.add(f)
            files.append(f)
    return Imports(files[:MAX_IMPORTED_FILES], found.names)


# --- the snippets ------------------------------------------------------------------------------------------------------
_IDENT = re.compile(r"[A-Za-z_]\w*")
# a line that imports (of any of the languages): its names are not uses (``rank_by_use``); the language server's
# import key is these lines (``lsp/context_sources.py``)
IMPORT_LINE = re.compile(r"^\s*(from\s+\S+\s+import|import\b|use\b|pub\s+use\b|mod\b|pub\s+mod\b|#\s*include|"
                         r".*\brequire\s*\(|export\s+.*\bfrom\b|\"[^\"]+\"\s*$|package\b).*$", re.M)


@functools.lru_cache(maxsize=256)
def _file_definitions(text: str, language: str) -> tuple:
    try:
        ol = outline(text, language, 0, all_definitions=True)
    except Exception as e:  # a grammar failure on a neighbour must not cost anything
        log.warning("outline failed: %s: %s", type(e).__name__, e)
        return ()
    return tuple(ol.definitions) if ol else ()


def _one_line(item) -> str:
    sig = " ".join(l.strip() for l in item.text.split("\n"))
    return f"{sig}  (in {item.parent})" if item.parent else sig


def relative_name(path: str, ws: Workspace) -> str:
    """How a snippet names its file: relative to the workspace root that holds it, else the file name."""
    for r in ws.roots:
        if path.startswith(r.rstrip("/") + "/"):
            return path[len(r.rstrip("/")) + 1:]
    return os.path.basename(path)


TIER_RANK = 100        # import snippets' ranks: tier * TIER_RANK + the file's order among the imports
USE_STEP = 4           # rank_by_use: lines of distance per rank step...
USE_RANKS = 50         # ...and its ranks 0..49, all before recent edits (edits.RANK) and similar windows (similar.RANK)


def import_snippets(doc: SourceFile, ws: Workspace, deadline: float | None = None,
                    max_defs: int = MAX_DEFS_PER_FILE) -> list[Snippet]:
    """The signatures of the imported files' definitions, up to three snippets per file by tier: (0) the names the
    document imports by name, (1) names it uses, (2) the rest, those whose signatures mention more of the
    document's identifiers first. A snippet's ``rank`` is ``tier * TIER_RANK + file order``, so a prompt budget
    takes every file's imported names before any file's other definitions. Stops at ``deadline``
    (``time.monotonic()``) with what it has."""
    language = canonical_language(doc.language_id, doc.uri)
    imports = imported_files(doc, ws)
    used = set(_IDENT.findall(doc.text))
    out: list[Snippet] = []
    for order, path in enumerate(imports.files):
        if deadline is not None and time.monotonic() > deadline:
            break
        text = ws.read(path)
        olang = EXTENSIONS.get(PurePosixPath(path).suffix.lower())
        if text is None or olang is None or FAMILY.get(olang, olang) != FAMILY.get(language, language):
            continue
        defs = _file_definitions(text, olang)[:400]
        tiers: list[list[tuple[int, int]]] = [[], [], []]
        for i, d in enumerate(defs):
            tier = 0 if d.name in imports.names else 1 if d.name in used else 2
            overlap = len(set(_IDENT.findall(d.text)) & used) if tier == 2 else 0
            tiers[tier].append((-overlap, i))
        name = relative_name(path, ws)
        for tier, items in enumerate(tiers):
            chosen = [i for _, i in sorted(items)[:max_defs]]
            if chosen:
                out.append(Snippet(name, "import", tuple(_one_line(defs[i]) for i in chosen),
                                   names=tuple(defs[i].name for i in chosen), rank=tier * TIER_RANK + order))
    return out


def rank_by_use(snippets: Sequence[Snippet], text: str, line: int) -> list[Snippet]:
    """``import_snippets``' snippets ranked for a cursor on ``line`` of ``text``: each definition of an imported or
    used name (tiers 0 and 1) becomes a snippet of its own, ranked by how near the cursor the document uses its name
    outside import lines (``USE_STEP`` lines a rank), a name imported but not used yet first (rank 0: what is about
    to be written); the rest keep their rank. A small budget then holds the definitions the code around the cursor
    needs, not the first imported file's (on the held-out cross-file set the name the line needs was in the block at
    the default share on 39 of 148 positions in file order, 57 so). A plain function of the region's cursor line, so
    the block stays the same while the cursor stays in the region."""
    nearest: dict[str, int] = {}
    for i, row in enumerate(text.split("\n")):
        if IMPORT_LINE.match(row):
            continue
        d = abs(i - line)
        for name in set(_IDENT.findall(row)):
            if d < nearest.get(name, 1 << 30):
                nearest[name] = d
    out: list[Snippet] = []
    for s in snippets:
        if s.kind != "import" or s.rank >= 2 * TIER_RANK or len(s.names) != len(s.lines):
            out.append(s)
            continue
        for row, name in zip(s.lines, s.names):
            d = nearest.get(name)
            rank = 0 if d is None else 1 + min(USE_RANKS - 2, d // USE_STEP)
            out.append(Snippet(s.source, "import", (row,), (name,), rank=rank))
    return out
