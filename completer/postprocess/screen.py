"""Screen-text rules: ghost text neither re-types what is already before the cursor on its line nor re-writes the
line that follows; a block opened at the cursor starts on a new line."""

from __future__ import annotations

import re

from completer.text import indentation, width

from .context import Context

_WORD_START = re.compile(r"(?<!\w)\w")


def drop_repeated_line_start(text: str, ctx: Context) -> str:
    """After ``return self.`` a completion ``self.items.pop()`` would give ``return self.self.items.pop()``: when
    the text begins with the end of the code before the cursor (from a word start, at least 3 characters), that
    part is already on screen and is dropped."""
    code = ctx.line_before.lstrip()
    if len(code) < 3 or not text or text[0].isspace():
        return text
    for m in _WORD_START.finditer(code):                # longest repeated tail first
        tail = code[m.start():]
        if len(tail) >= 3 and text.startswith(tail) and not tail.isdigit():
            return text[len(tail):]
    return text


COPY_TYPED_MAX = 2     # drop_next_line_copy: at most this many characters of code typed on the line


def drop_next_line_copy(text: str, ctx: Context) -> str:
    """Line mode: a completion that makes the cursor's line a copy of the next non-blank line of the document
    (the model reached text the editor already has) is no completion, while the user has typed at most
    ``COPY_TYPED_MAX`` characters of code on the line: then the model chose the line. Once the user has typed more of
    it, the line is theirs: in the CPU replay's C trace a declaration typed above another one that ends the same way
    (``xmlNodePtr cur);``) lost its right ghost text on 13 keystrokes."""
    if ctx.mode != "line" or "\n" in text or len(ctx.line_before.strip()) > COPY_TYPED_MAX:
        return text
    following = [l.strip() for l in ctx.suffix.split("\n")[1:] if l.strip()]
    line = (ctx.line_before + text + ctx.rest).strip()
    if following and len(line) > 3 and line == following[0]:
        return ""
    return text


def drop_previous_line_copy(text: str, ctx: Context) -> str:
    """Line mode on a fresh line (nothing but indentation before the cursor): a completion that makes the line a copy
    of the line above (``Z_FINISH: 4,`` again right after ``Z_FINISH: 4,``) is the model repeating itself, no
    completion. Short or punctuation-only lines (``}``, ``});``) do repeat in code and stay."""
    if ctx.mode != "line" or "\n" in text or not ctx.on_blank_line:
        return text
    line = (ctx.line_before + text + ctx.rest).strip()
    if len(line) > 3 and any(c.isalnum() for c in line) and line == ctx.line_above.strip():
        return ""
    return text


def _opens_block(ctx: Context) -> bool:
    code = ctx.line_before.rstrip()
    return ctx.mode == "block" and bool(code.strip()) and code.endswith(":" if ctx.language == "python" else "{")


def block_on_new_line(text: str, ctx: Context) -> str:
    """At the end of a block header (``def peek(self):``, ``if (x) {``) the body starts on the next line at the
    block's indentation: a completion that starts with the body's indentation but no newline would put the body
    on the header's line. A brace language's one-liner (``{ return 1; }``, one line, no indentation) stays."""
    if not _opens_block(ctx) or not text or text.startswith(("\n", "\r\n")):
        return text
    first, nl, rest = text.partition("\n")
    if not first.strip():                                # spaces, then the body on the next line
        return "\n" + rest if nl else ""
    indented = width(indentation(first)) >= 2
    if not (ctx.language == "python" or indented or (nl and rest.strip())):
        return text
    body = rest.split("\n") if nl else []
    nonblank = [l for l in body if l.strip()]
    if ctx.language == "python" and nonblank and not indentation(nonblank[0]):   # the whole body flush left
        body = [ctx.indent + l if l.strip() else l for l in body]
    return "\n".join(["\n" + ctx.indent + first.lstrip()] + body)
