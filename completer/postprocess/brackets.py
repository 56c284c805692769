"""Bracket balance, the measure the screen-text filters use to choose what to drop (indentation measures are
``completer.text``'s, shared with the prompt side)."""

from __future__ import annotations

_PAIRS = {")": "(", "]": "[", "}": "{"}


def badness(text: str) -> int:
    """Unmatched brackets (closing and still open) plus unterminated strings (lower is better)."""
    stack: list[str] = []
    bad = 0
    quote = ""
    esc = False
    for ch in text:
        if quote:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == quote:
                quote = ""
            elif ch == "\n" and quote != "`":
                quote = ""
                bad += 1
            continue
        if ch in "\"'`":
            quote = ch
        elif ch in "([{":
            stack.append(ch)
        elif ch in _PAIRS:
            if stack and stack[-1] == _PAIRS[ch]:
                stack.pop()
            else:
                bad += 1
    return bad + len(stack) + (1 if quote else 0)
