"""Degenerate repetition: a model that loops (``{ path: Argument<{path: Argument<...``, ``(0, sizeof(buf),
sizeof(buf)...``) writes until the token limit; the ghost text stops where the loop starts."""

from __future__ import annotations

import re

from .context import Context

MIN_UNIT = 3          # shorter units ("0, 0, 0", "====") are ordinary code
LONG_UNIT = 10        # a unit this long repeated twice up to the end of the text is a loop cut off by the limit


def _collapsed(text: str) -> tuple[str, list[int]]:
    """``text`` without whitespace, and for each kept character its index in ``text`` (loops differ in spacing:
    ``{ path:`` then ``{path:``)."""
    keep = [i for i, ch in enumerate(text) if not ch.isspace()]
    return "".join(text[i] for i in keep), keep


MAX_UNIT = 64         # longer loops are not looked for (the search stays linear in the text's length)
SCAN_CHARS = 4000     # non-space characters searched (a completion is a few hundred; junk input stays cheap)
_THRICE = re.compile(r"(?=(.{%d,%d}?)\1\1)" % (MIN_UNIT, MAX_UNIT), re.S)
_TWICE = re.compile(r"(?=(.{%d,%d}?)\1)" % (LONG_UNIT, MAX_UNIT), re.S)


def _looping(s: str, i: int, unit: str) -> bool:
    """Whether ``unit``, repeated three times from ``i``, is a loop: it has a letter or digit, or it mixes
    punctuation and repeats at least four times."""
    if any(c.isalnum() for c in unit):
        return True
    return len(set(unit)) >= 2 and s.startswith(unit * 4, i)


def loop_start(text: str) -> int | None:
    """Index in ``text`` where a repetition loop's second unit begins, or None. A loop is a unit of at least
    MIN_UNIT non-space characters (with a letter or digit in it) repeated back to back three times, or twice when
    the unit is long and the repetition runs to the end of the text (the model was cut off inside the loop). A
    unit of punctuation only (``{\\]``) counts from four repeats (``====`` and ``)))`` are ordinary)."""
    s, where = _collapsed(text)
    s = s[:SCAN_CHARS]
    found = None
    for m in _THRICE.finditer(s):
        if _looping(s, m.start(), m.group(1)):
            found = m.start() + len(m.group(1))
            break
    for m in _TWICE.finditer(s):
        if found is not None and m.start() + len(m.group(1)) >= found:
            break
        unit, j = m.group(1), m.start() + 2 * len(m.group(1))
        while s.startswith(unit, j):
            j += len(unit)
        if s[j:] == unit[: len(s) - j] and any(c.isalnum() for c in unit):
            found = m.start() + len(unit)
            break
    return None if found is None else where[found]


def cut_repetition(text: str, ctx: Context) -> str:
    """Cut the text where it starts repeating itself (keeping the first occurrence), trailing space removed."""
    cut = loop_start(text)
    return text if cut is None else text[:cut].rstrip(" \t")
