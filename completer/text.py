"""Text facts every layer needs the same way: a line's indentation, its width in columns, and text a UTF-8
tokenizer or parser can take.

One definition each, because the context builder, the completion-mode choice, post-processing and the engine
supervisor must agree on them: a block's indentation measured one way when the prompt is planned and another when the
ghost text is cut would end blocks in the wrong place.
"""

from __future__ import annotations

import re

TAB_WIDTH = 4                      # columns a tab counts for when indentations are compared
_SURROGATE = re.compile("[\ud800-\udfff]")


def indentation(line: str) -> str:
    """The leading spaces and tabs of ``line``."""
    return line[: len(line) - len(line.lstrip(" \t"))]


def width(indent: str) -> int:
    """Columns ``indent`` takes, a tab counting ``TAB_WIDTH``."""
    return len(indent.expandtabs(TAB_WIDTH))


def clean_surrogates(text: str) -> str:
    """``text`` with lone surrogates (valid in JSON strings and editors' UTF-16 buffers, not in UTF-8) replaced by
    U+FFFD, one for one, so character offsets into it stay valid. Returns ``text`` itself when there are none."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
