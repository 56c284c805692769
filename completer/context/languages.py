"""Language names: LSP language ids and file extensions to canonical names, grammars and comment syntax.

Grammars come from the prebuilt ``tree-sitter-<lang>`` wheels (no compiler at run time). A language whose grammar
package is missing, or any id we do not know, is ``"text"``: the prompt falls back to plain line windows.
"""

from __future__ import annotations

import functools
import importlib
import logging
import re
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlparse

log = logging.getLogger(__name__)

QUERY_DIR = Path(__file__).parent / "queries"

# canonical name -> (python module, function returning the language pointer)
GRAMMARS = {
    "python": ("tree_sitter_python", "language"),
    "javascript": ("tree_sitter_javascript", "language"),
    "typescript": ("tree_sitter_typescript", "language_typescript"),
    "tsx": ("tree_sitter_typescript", "language_tsx"),
    "go": ("tree_sitter_go", "language"),
    "rust": ("tree_sitter_rust", "language"),
    "c": ("tree_sitter_c", "language"),
    "cpp": ("tree_sitter_cpp", "language"),
}

# LSP language identifiers (as VS Code / Neovim send them) -> canonical
LANGUAGE_IDS = {
    "python": "python", "py": "python",
    "javascript": "javascript", "javascriptreact": "javascript", "js": "javascript", "jsx": "javascript",
    "typescript": "typescript", "ts": "typescript",
    "typescriptreact": "tsx", "tsx": "tsx",
    "go": "go", "golang": "go",
    "rust": "rust", "rs": "rust",
    "c": "c",
    "cpp": "cpp", "c++": "cpp", "cuda-cpp": "cpp", "objective-cpp": "cpp",
}

EXTENSIONS = {
    ".py": "python", ".pyi": "python", ".pyw": "python",
    ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript", ".jsx": "javascript",
    ".ts": "typescript", ".mts": "typescript", ".cts": "typescript", ".tsx": "tsx",
    ".go": "go", ".rs": "rust",
    ".c": "c", ".h": "c",
    ".cc": "cpp", ".cpp": "cpp", ".cxx": "cpp", ".c++": "cpp", ".hpp": "cpp", ".hh": "cpp", ".hxx": "cpp",
    ".cu": "cpp",
}

# How a comment line starts in each language (the context block is written as comments).
COMMENT = {"python": "#"}
DEFAULT_COMMENT = "//"

# Languages whose blocks are delimited by indentation rather than braces.
INDENTED = {"python"}


def comment_prefix(language: str) -> str:
    return COMMENT.get(language, DEFAULT_COMMENT)


def _path_of(uri: str) -> str:
    if "://" in uri or uri.startswith("file:"):
        return unquote(urlparse(uri).path)
    return uri


def display_name(uri: str) -> str:
    """A short file name for comment lines (the last path component of the URI)."""
    name = PurePosixPath(_path_of(uri).replace("\\", "/")).name
    return name or uri


def canonical_language(language_id: str | None, uri: str = "") -> str:
    """The canonical language for an LSP language id, else the URI's file extension, else ``"text"``."""
    lang = LANGUAGE_IDS.get((language_id or "").strip().lower())
    if lang is None:
        suffix = PurePosixPath(_path_of(uri).replace("\\", "/")).suffix.lower()
        lang = EXTENSIONS.get(suffix)
    if lang is None or grammar(lang) is None:
        return "text"
    return lang


@functools.lru_cache(maxsize=None)
def grammar(language: str):
    """The ``tree_sitter.Language`` for a canonical name, or None when its grammar package is not installed."""
    spec = GRAMMARS.get(language)
    if spec is None:
        return None
    try:
        import tree_sitter
        module = importlib.import_module(spec[0])
        return tree_sitter.Language(getattr(module, spec[1])())
    except Exception as e:  # missing wheel or ABI mismatch: degrade to plain text, say why once
        log.warning("tree-sitter grammar for %s unavailable (%s: %s); using plain text context",
                    language, type(e).__name__, e)
        return None


def _query_file(name: str) -> str | None:
    path = QUERY_DIR / f"{name}.scm"
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8")
    inherits = re.match(r";\s*inherits:\s*([\w, ]+)\n", text)
    if inherits is None:
        return text
    parents = [_query_file(n.strip()) for n in inherits.group(1).split(",") if n.strip()]
    return "".join(p + "\n" for p in parents if p) + text


@functools.lru_cache(maxsize=None)
def query_source(language: str) -> str | None:
    """The text of ``queries/<language>.scm`` (TSX uses TypeScript's) with the files its first line
    ``; inherits: a, b`` names put in front, so patterns two grammars share are written once; None without one."""
    return _query_file("typescript" if language == "tsx" else language)


@functools.lru_cache(maxsize=None)
def query(language: str):
    """The compiled context query (``query_source``) for a canonical name, or None."""
    lang = grammar(language)
    src = query_source(language)
    if lang is None or src is None:
        return None
    import tree_sitter
    return tree_sitter.Query(lang, src)
