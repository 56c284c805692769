"""Screen-text filters: the ghost text must not repeat what the editor already shows after the cursor."""

from __future__ import annotations

from .context import Context
from .brackets import badness


def _trim(line: str, line_before: str, rest: str) -> str:
    rest_s = rest.rstrip()
    if not line or not rest_s:
        return line
    if rest_s.startswith(line.rstrip()) and line.strip():
        return ""                                  # the whole completion is already there
    base = badness(line_before + line + rest)
    if len(rest_s) >= 2 and line.rstrip().endswith(rest_s):    # the model wrote the rest of the line again
        cand = line.rstrip()[: len(line.rstrip()) - len(rest_s)]
        bad = badness(line_before + cand + rest)
        if bad < base or bad == base and not any(c in rest_s for c in "()[]{}\"'`"):
            return cand
    best, best_bad = line, base
    for k in range(1, len(rest_s) + 1):
        if line.endswith(rest_s[:k]):
            cand = line[: len(line) - k]
            b = badness(line_before + cand + rest)
            if b < best_bad:
                best, best_bad = cand, b
    return best


def trim_line_overlap(text: str, ctx: Context) -> str:
    """A one-line completion loses the end that the rest of the cursor's line already has: closing brackets and
    quotes the line has (when dropping them balances the line), or the whole rest of the line written again."""
    if "\n" in text:
        return text
    return _trim(text, ctx.line_before, ctx.rest)
