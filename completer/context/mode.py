"""Single-line or block completion, decided from the syntax tree and the text around the cursor.

- ``line``: there is code before the cursor on its line that does not end in a block opener; finish the line.
- ``block``: the cursor follows a block opener (``:`` in Python, ``{`` in brace languages) with at most closing
  brackets after it, or sits in an empty body (tree-sitter shows an empty block there, or the line above opens
  one); complete several lines, cut at the end of the enclosing block.
Anything else (a blank line between statements) is ``line``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from completer.text import indentation as _indent

from .languages import INDENTED

_CLOSERS_ONLY = re.compile(r"^[\s)\]}>;,]*$")
# a Python line whose ":" opens a block (not a slice, dict entry, annotation or lambda)
_PY_BLOCK = re.compile(r"^\s*(@.*\n\s*)?(async\s+)?(def|class|if|elif|else|for|while|try|except|finally|with|match|"
                       r"case)\b")
BLOCK_TYPES = {"block", "statement_block", "compound_statement", "declaration_list", "field_declaration_list",
               "class_body", "enumerator_list", "interface_body", "object_type", "enum_body", "match_block",
               "field_declaration_list", "struct_type"}


@dataclass(frozen=True)
class Mode:
    mode: str          # "line" | "block"
    indent: str        # indentation of the block the completion goes into
    block_closed: bool # brace languages: the suffix already closes the block (so the completion must not)
    outer: str = ""    # indentation of the block's header line


DEFAULT_UNIT = {"javascript": "  ", "typescript": "  ", "tsx": "  ", "go": "\t"}


def indent_unit(text: str, language: str = "", sample_chars: int = 20_000) -> str:
    """The file's indentation step: a tab if lines start with tabs, else the most common small space step."""
    sample = text[:sample_chars]
    tabs = len(re.findall(r"(?m)^\t+\S", sample))
    widths = [len(m) for m in re.findall(r"(?m)^( +)\S", sample)]
    if tabs > len(widths):
        return "\t"
    steps = {}
    for w in widths:
        for step in (2, 4, 8):
            if w % step == 0:
                steps[step] = steps.get(step, 0) + 1
    if not widths:
        return DEFAULT_UNIT.get(language, "    ")
    best = 4 if steps.get(4, 0) >= 0.8 * len(widths) else (2 if steps.get(2, 0) >= 0.8 * len(widths) else 4)
    return " " * best


def _closed_after(text: str, line_end: int, rest: str, header_indent: str, language: str) -> bool:
    """Whether the block whose header sits at ``header_indent`` is already closed after the cursor's line: the rest
    of the line starts with ``}``, or the next non-blank line (within 200) is a ``}`` at most at the header's
    indentation. Indented languages have nothing to close."""
    if language in INDENTED or rest.strip().startswith("}"):
        return True
    pos = line_end
    for _ in range(200):
        if pos >= len(text):
            return False
        nxt = text.find("\n", pos + 1)
        nxt = len(text) if nxt < 0 else nxt
        line = text[pos + 1:nxt]
        pos = nxt
        if line.strip():
            return line.strip().startswith("}") and len(_indent(line).expandtabs(4)) <= len(
                header_indent.expandtabs(4))
    return False


def _previous_code_line(text: str, line_start: int) -> str:
    """The nearest non-blank line above the cursor's line ("" at the top)."""
    prev = text[:line_start].rstrip("\n")
    while prev:
        cut = prev.rfind("\n") + 1
        if prev[cut:].strip():
            return prev[cut:]
        prev = prev[:cut].rstrip("\n")
    return ""


def choose_mode(text: str, offset: int, language: str, empty_body: bool = False) -> Mode:
    """The completion mode at ``offset``: after code on the cursor's line, a block when that code opens one;
    on a blank line, a block when the line above opens one or the body is still empty."""
    line_start = text.rfind("\n", 0, offset) + 1
    line_end = text.find("\n", offset)
    line_end = len(text) if line_end < 0 else line_end
    before, rest = text[line_start:offset], text[offset:line_end]
    opener = ":" if language in INDENTED else "{"
    unit = indent_unit(text, language)
    line_indent = _indent(text[line_start:line_end])

    def block(indent: str, outer: str) -> Mode:
        return Mode("block", indent, _closed_after(text, line_end, rest, outer, language), outer)

    code = before.strip()
    if code:
        opens = code.endswith(opener) and (language not in INDENTED or _PY_BLOCK.match(code))
        if opens and _CLOSERS_ONLY.match(rest):
            return block(line_indent + unit, line_indent)
        if language not in INDENTED and language != "text" and code.endswith("=>") and not rest.strip():
            return block(line_indent + unit, line_indent)
        return Mode("line", line_indent, True)
    # nothing but indentation before the cursor
    prev_line = _previous_code_line(text, line_start)
    prev_indent = _indent(prev_line)
    deeper = len(before.expandtabs(4)) > len(prev_indent.expandtabs(4))    # typed past the line above
    if not rest.strip() or _CLOSERS_ONLY.match(rest):
        if prev_line.rstrip().endswith(opener) and (language not in INDENTED or _PY_BLOCK.match(prev_line)):
            return block(before if deeper else prev_indent + unit, prev_indent)
        if empty_body:      # a body of comments so far: the line above is already inside the block, at its indent
            return block(before if deeper else prev_indent,
                         prev_indent[: len(prev_indent) - len(unit)] if prev_indent.endswith(unit) else "")
    return Mode("line", before if not rest.strip() else line_indent, True)
