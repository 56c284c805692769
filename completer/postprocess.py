"""From the model's text to the ghost text shown: ``postprocess(completion, plan)``.

- never repeat what is already after the cursor: closing brackets/quotes the line already has, the rest of the
  line, the next lines of the suffix;
- line mode: one line; block mode: cut at the first line that dedents below the block (for brace languages the
  closing brace is kept only when the suffix does not already close the block), keep the block's indentation
  (a body the model wrote flush left is shifted to it);
- line ends follow the document (CRLF documents get CRLF ghost text);
- strip trailing whitespace and blank lines; return "" when nothing useful is left;
- a multi-line block typed between brackets (``{|}``) ends with a newline and the header's indentation, so the
  closing bracket already after the cursor lands on its own line.
"""

from __future__ import annotations

from completer.context import PromptPlan
from completer.context.languages import INDENTED
from completer.prompt import END_TOKENS

_PAIRS = {")": "(", "]": "[", "}": "{"}


def _badness(text: str) -> int:
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


def _trim_line_overlap(line: str, line_before: str, rest: str) -> str:
    """Drop the end of ``line`` that the rest of the cursor's line (``rest``) already has."""
    rest_s = rest.rstrip()
    if not line or not rest_s:
        return line
    if rest_s.startswith(line.rstrip()) and line.strip():
        return ""                                  # the whole completion is already there
    base = _badness(line_before + line + rest)
    if len(rest_s) >= 2 and line.rstrip().endswith(rest_s):    # the model wrote the rest of the line again
        cand = line.rstrip()[: len(line.rstrip()) - len(rest_s)]
        bad = _badness(line_before + cand + rest)
        if bad < base or bad == base and not any(c in rest_s for c in "()[]{}\"'`"):
            return cand
    best, best_bad = line, base
    for k in range(1, len(rest_s) + 1):
        if line.endswith(rest_s[:k]):
            cand = line[: len(line) - k]
            b = _badness(line_before + cand + rest)
            if b < best_bad:
                best, best_bad = cand, b
    return best


def _width(s: str) -> int:
    return len(s.expandtabs(4))


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def _reindent_first(first: str, line_before: str, indent: str) -> str:
    """The whitespace already typed on a blank line is part of the indentation: the model's first line must not
    indent again. (Byte-level BPE splits "    return" as "   " + " return", so a prompt that ends in the whole
    indentation makes the model emit the rest of it once more.)"""
    if not first.strip():
        return first
    return (indent[len(line_before):] if indent.startswith(line_before) else "") + first.lstrip()


def postprocess(completion: str, plan: PromptPlan) -> str:
    if not isinstance(completion, str) or not completion:
        return ""
    for end in END_TOKENS.get(plan.template, ()) + ("<|endoftext|>",):
        cut = completion.find(end)
        if cut >= 0:
            completion = completion[:cut]
    completion = completion.replace("\r\n", "\n")
    crlf = "\r\n" in plan.prefix[-4000:] or "\r\n" in plan.suffix[:4000]
    text = _postprocess(completion, plan)
    return text.replace("\n", "\r\n") if crlf else text


def _postprocess(completion: str, plan: PromptPlan) -> str:
    line_before = plan.prefix[plan.prefix.rfind("\n") + 1:]
    rest = plan.suffix.split("\n", 1)[0].rstrip("\r")
    if plan.mode == "line":
        line = completion.split("\n", 1)[0]
        if not line_before.strip():
            line = _reindent_first(line, line_before, plan.indent)
        line = _trim_line_overlap(line, line_before, rest)
        return line.rstrip() if line.strip() else ""

    lines = completion.split("\n")
    first, body = lines[0], lines[1:]
    block_w = _width(plan.indent)
    # the first body line sets the block's indentation; a body the model wrote flush left is shifted to the plan's
    starts_on_cursor_line = not line_before.strip()       # completion starts inside the (indented) blank line
    if not starts_on_cursor_line:
        nonblank = [l for l in body if l.strip()]
        first_w = _width(_indent(nonblank[0])) if nonblank else block_w
        if nonblank and first_w == 0 and block_w > 0:
            body = [plan.indent + l if l.strip() else l for l in body]
        elif nonblank and first_w > 0:
            block_w = first_w
    else:
        block_w = min(block_w, _width(line_before))
        if not first.strip() and body and body[0].strip() and _width(_indent(body[0])) >= _width(line_before):
            # the model began with a newline on an already indented line: start on the cursor's line instead
            extra = _width(_indent(body[0])) - _width(line_before)
            first, body = " " * extra + body[0].lstrip(), body[1:]
        elif first.strip():
            first = _reindent_first(first, line_before, plan.indent)
    out = [first]
    suffix_lines = [l.strip() for l in plan.suffix.split("\n")[1:] if l.strip()]
    next_suffix = suffix_lines[0] if suffix_lines else None
    brace = plan.language not in INDENTED and plan.language != "text"
    for l in body:
        if not l.strip():
            out.append("")
            continue
        w = _width(_indent(l))
        if w < block_w:                                    # dedent: the block ends here
            if brace and not plan.block_closed and l.strip().startswith("}"):
                out.append(l.rstrip())
            break
        if next_suffix is not None and l.strip() == next_suffix and len(next_suffix) > 1:
            break                                          # the model reached text the editor already has
        out.append(l.rstrip())
    # the rest of the cursor's line must not be repeated at the end of the first line (single-line blocks)
    if len(out) == 1:
        out[0] = _trim_line_overlap(out[0], line_before, rest)
    while out and not out[-1].strip():
        out.pop()
    text = "\n".join(out).rstrip()
    if "\n" in text and rest.strip()[:1] in (")", "]", "}"):
        text += "\n" + plan.outer_indent          # the closer after the cursor goes to its own line: `{|}`
    return text if text.strip() else ""
