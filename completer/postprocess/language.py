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


def foreign_line(line: str, language: str) -> bool:
    """Whether ``line`` starts like a comment or docstring of another language than ``language``."""
    pattern = _FOREIGN.get(language)
    return bool(pattern and pattern.match(line))


def cut_foreign_lines(text: str, ctx: Context) -> str:
    """Cut the completion at its first line that starts in another language's comment syntax (the first line
    only counts when the cursor's line has nothing but indentation before it)."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if i == 0 and not ctx.on_blank_line:
            continue
        if foreign_line(line, ctx.language):
            return "\n".join(lines[:i])
    return text
