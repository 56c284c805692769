"""Filters that put the completion at the block's indentation."""

from __future__ import annotations

from .context import Context
from completer.text import indentation as indent_of, width


def _reindent(first: str, line_before: str, indent: str) -> str:
    if not first.strip():
        return first
    return (indent[len(line_before):] if indent.startswith(line_before) else "") + first.lstrip()


def reindent_first_line(text: str, ctx: Context) -> str:
    """On a blank line the whitespace already typed is part of the indentation: the model's first line must not
    indent again (byte-level BPE splits "    return" as "   " + " return", so a prompt that ends in the whole
    indentation makes the model emit the rest of it once more). In block mode a completion that begins with a
    newline on an already indented line starts on the cursor's line instead."""
    if not ctx.on_blank_line:
        return text
    first, _, rest = text.partition("\n")
    if ctx.mode == "block" and not first.strip() and rest:
        second, nl, after = rest.partition("\n")
        if second.strip() and width(indent_of(second)) >= width(ctx.line_before):
            extra = width(indent_of(second)) - width(ctx.line_before)
            return " " * extra + second.lstrip() + nl + after
    first = _reindent(first, ctx.line_before, ctx.indent)
    return first + ("\n" + rest if "\n" in text else "")


def indent_body(text: str, ctx: Context) -> str:
    """Block mode after a header: a body the model wrote flush left is shifted to the block's indentation."""
    if ctx.mode != "block" or ctx.on_blank_line or width(ctx.indent) == 0:
        return text
    first, *body = text.split("\n")
    nonblank = [l for l in body if l.strip()]
    if not nonblank or width(indent_of(nonblank[0])) > 0:
        return text
    return "\n".join([first] + [ctx.indent + l if l.strip() else l for l in body])
