"""Language rules: a model trained mostly on Python writes Python comments and docstrings into Go, JavaScript or
Rust; such a line is not code of the document's language and ends the completion."""

from __future__ import annotations

import re

from .context import Context

# line starts that are foreign to a language (after indentation): docstrings and "#" comments outside Python and
# the shells; "//" comments in Python. C/C++ keep "#" (preprocessor), Rust keeps "#[" / "#!" (attributes), JS/TS
# keep "#name" (private fields).
_PY_DOCSTRING = re.compile(r'^\s*("""|\'\'\')')
_FOREIGN = {
    "python": re.compile(r"^\s*//"),
    "javascript": re.compile(r'^\s*("""|\'\'\'|#(?![\w!]))'),
    "typescript": re.compile(r'^\s*("""|\'\'\'|#(?![\w!]))'),
    "tsx": re.compile(r'^\s*("""|\'\'\'|#(?![\w!]))'),
    "go": re.compile(r'^\s*("""|\'\'\'|#)'),
    "rust": re.compile(r'^\s*("""|\'\'\'|#(?![\[!]))'),
    "c": _PY_DOCSTRING,
    "cpp": _PY_DOCSTRING,
}


# Python statements in a brace language: a block header ending in ":" (C's "case x:" / "default:" and C++'s
# "public:" are not in the list), "from x import y"
_PY_STATEMENT = re.compile(r"^\s*((def|class|if|elif|else|for|while|try|except|finally|with)\b[^{};]*:\s*$"
                           r"|from\s+[\w.]+\s+import\b)")
# a "#" comment after code, where "#" does not start a private name (JS), an attribute (Rust) or a directive (C)
_INLINE_HASH = re.compile(r"(?<=\s)#(?=\s|$)")
_HASH_IS_FOREIGN = {"go", "javascript", "typescript", "tsx", "rust"}
_TRIPLE_QUOTE = re.compile(r"\"\"\"|'''")


def foreign_line(line: str, language: str) -> bool:
    """Whether ``line`` starts like a comment, docstring or statement of another language than ``language``."""
    pattern = _FOREIGN.get(language)
    if pattern is None:
        return False
    return bool(pattern.match(line) or (language != "python" and _PY_STATEMENT.match(line)))


def _outside_strings(line: str, index: int) -> bool:
    """Whether ``index`` of ``line`` is outside string literals (quotes counted from the line start)."""
    quote, esc = "", False
    for ch in line[:index]:
        if esc:
            esc = False
        elif ch == "\\":
            esc = True
        elif quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'`":
            quote = ch
    return not quote


def cut_foreign_lines(text: str, ctx: Context) -> str:
    """Cut the completion at its first line that starts in another language's comment syntax or is a Python
    statement in a brace language (the first line only counts when the cursor's line has nothing but indentation
    before it), and at a "#" comment or a triple quote after code in languages without them."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if (i > 0 or ctx.on_blank_line) and foreign_line(line, ctx.language):
            return "\n".join(lines[:i])
        if ctx.language in _HASH_IS_FOREIGN:
            before = ctx.line_before if i == 0 else ""
            cut = _foreign_inline(before + line, len(before))
            if cut is not None:
                return "\n".join(lines[:i] + [line[:cut - len(before)].rstrip()])
    return text


def _foreign_inline(line: str, start: int) -> int | None:
    """Where, at or after ``start``, ``line`` has a Python-only token in a language without it: a ``#`` comment
    after code (outside strings) or a triple quote (no string in Go, JavaScript or Rust starts that way)."""
    cuts = [m.start() for m in _INLINE_HASH.finditer(line) if m.start() >= start and _outside_strings(line, m.start())]
    cuts += [m.start() for m in _TRIPLE_QUOTE.finditer(line, start)]
    return min(cuts) if cuts else None
