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


def choose_mode(text: str, offset: int, language: str, empty_body: bool = False) -> Mode:
    line_start = text.rfind("\n", 0, offset) + 1
    line_end = text.find("\n", offset)
    line_end = len(text) if line_end < 0 else line_end
    before = text[line_start:offset]
    rest = text[offset:line_end]
    opener = ":" if language in INDENTED else "{"
    unit = indent_unit(text, language)
    line_indent = _indent(text[line_start:line_end])

    def closed_after(header_indent: str) -> bool:
        if language in INDENTED:
            return True
        if rest.strip().startswith("}"):
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

    code = before.strip()
    if code:
        opens = code.endswith(opener) and (language not in INDENTED or _PY_BLOCK.match(code))
        if opens and _CLOSERS_ONLY.match(rest):
            return Mode("block", line_indent + unit, closed_after(line_indent), line_indent)
        if language not in INDENTED and language != "text" and code.endswith("=>") and not rest.strip():
            return Mode("block", line_indent + unit, closed_after(line_indent), line_indent)
        return Mode("line", line_indent, True)
    # nothing but indentation before the cursor
    prev = text[:line_start].rstrip("\n")
    prev_line = ""
    while prev:
        cut = prev.rfind("\n") + 1
        prev_line = prev[cut:]
        if prev_line.strip():
            break
        prev = prev[:cut].rstrip("\n")
    prev_indent = _indent(prev_line)
    if not rest.strip() or _CLOSERS_ONLY.match(rest):
        prev_opens = prev_line.rstrip().endswith(opener) and (language not in INDENTED
                                                              or _PY_BLOCK.match(prev_line))
        if prev_opens:
            indent = before if len(before.expandtabs(4)) > len(prev_indent.expandtabs(4)) else prev_indent + unit
            return Mode("block", indent, closed_after(prev_indent), prev_indent)
        if empty_body:      # a body of comments so far: the line above is already inside the block, at its indent
            indent = before if len(before.expandtabs(4)) > len(prev_indent.expandtabs(4)) else prev_indent
            outer = prev_indent[: len(prev_indent) - len(unit)] if prev_indent.endswith(unit) else ""
            return Mode("block", indent, closed_after(outer), outer)
    return Mode("line", before if not rest.strip() else line_indent, True)
