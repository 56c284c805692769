"""Degenerate repetition: a model that loops (``{ path: Argument<{path: Argument<...``, ``(0, sizeof(buf),
sizeof(buf)...``) writes until the token limit; the ghost text stops where the loop starts."""

from __future__ import annotations

from .context import Context

MIN_UNIT = 3          # shorter units ("0, 0, 0", "====") are ordinary code
LONG_UNIT = 10        # a unit this long repeated twice up to the end of the text is a loop cut off by the limit


def _collapsed(text: str) -> tuple[str, list[int]]:
    """``text`` without whitespace, and for each kept character its index in ``text`` (loops differ in spacing:
    ``{ path:`` then ``{path:``)."""
    keep = [i for i, ch in enumerate(text) if not ch.isspace()]
    return "".join(text[i] for i in keep), keep


def loop_start(text: str) -> int | None:
    """Index in ``text`` where a repetition loop's second unit begins, or None. A loop is a unit of at least
    MIN_UNIT non-space characters (with a letter or digit in it) repeated back to back three times, or twice when
    the unit is long and the repetition runs to the end of the text."""
    s, where = _collapsed(text)
    n = len(s)
    for i in range(n):
        for p in range(MIN_UNIT, (n - i) // 2 + 1):
            unit = s[i:i + p]
            if s[i + p:i + 2 * p] != unit or not any(c.isalnum() for c in unit):
                continue
            k, j = 2, i + 2 * p
            while s[j:j + p] == unit:
                k, j = k + 1, j + p
            to_end = s[j:] == unit[: n - j]                   # the rest is the start of one more unit
            if k >= 3 or (p >= LONG_UNIT and to_end):
                return where[i + p]
    return None


def cut_repetition(text: str, ctx: Context) -> str:
    """Cut the text where it starts repeating itself (keeping the first occurrence), trailing space removed."""
    cut = loop_start(text)
    return text if cut is None else text[:cut].rstrip(" \t")
