"""Filters that decide how much of the model's text is one completion: one line, or the block at the cursor."""

from __future__ import annotations

from .context import Context
from completer.text import indentation as indent_of, width


def one_line(text: str, ctx: Context) -> str:
    """Line mode finishes the cursor's line: the first line only."""
    return text.split("\n", 1)[0] if ctx.mode == "line" else text


def _block_width(body: list[str], ctx: Context) -> int:
    """The block's indentation width: the first body line sets it (after ``indent_body``); on a blank line what
    the user typed bounds it."""
    if ctx.on_blank_line:
        return min(width(ctx.indent), width(ctx.line_before))
    nonblank = [l for l in body if l.strip()]
    w = width(indent_of(nonblank[0])) if nonblank else 0
    return w if w > 0 else width(ctx.indent)


def cut_at_block_end(text: str, ctx: Context) -> str:
    """Block mode: cut at the first line that dedents below the block (a brace language keeps that closing brace
    only when the suffix does not already close the block) or that is the next line the editor already has."""
    if ctx.mode != "block":
        return text
    first, *body = text.split("\n")
    block_w = _block_width(body, ctx)
    suffix_lines = [l.strip() for l in ctx.suffix.split("\n")[1:] if l.strip()]
    next_suffix = suffix_lines[0] if suffix_lines else None
    out = [first]
    for l in body:
        if not l.strip():
            out.append("")
            continue
        if width(indent_of(l)) < block_w:
            if ctx.brace_language and not ctx.block_closed and l.strip().startswith("}"):
                out.append(l.rstrip())
            break
        if next_suffix is not None and l.strip() == next_suffix and len(next_suffix) > 1:
            break
        out.append(l.rstrip())
    return "\n".join(out)


def close_bracket_line(text: str, ctx: Context) -> str:
    """A multi-line block typed between brackets (``{|}``) ends with a newline and the header's indentation, so the
    closing bracket already after the cursor lands on its own line."""
    if "\n" in text and ctx.rest.strip()[:1] in (")", "]", "}"):
        return text + "\n" + ctx.outer_indent
    return text
