"""From the model's text to the ghost text shown: ``postprocess(completion, plan)``.

Post-processing is a list of small named filters (``FILTERS``), each a pure function ``(text, Context) -> text``
applied in order (as Tabby's tabby-agent post-processing is): each can be read, table-tested and switched off
alone (``postprocess(..., skip={"name"})``), and ``trace`` shows which filter changed what, so the quality
benchmark can report where ghost text goes wrong by kind. The ``Context`` is built once from the ``PromptPlan``.

- ``cut_at_end_token``, ``normalize_newlines``: the raw text (end tokens, CRLF);
- ``cut_repetition``: a model that loops stops where the loop starts;
- ``drop_repeated_line_start``: no re-typing of the code before the cursor (``return self.`` + ``self.x``);
- ``one_line``: line mode keeps the first line;
- ``block_on_new_line``: after ``def f():`` / ``{`` the body starts on a new line;
- ``reindent_first_line``, ``indent_body``: the block's indentation (typed indentation not repeated, a flush-left
  body shifted);
- ``cut_foreign_lines``: no Python docstrings or ``#`` comments in Go/JS/TS/Rust, no ``//`` in Python;
- ``cut_at_block_end``: block mode stops at the first line that dedents below the block or repeats the suffix;
- ``trim_line_overlap``: no closing brackets/quotes or rest of line the editor already has;
- ``drop_next_line_copy``: line mode: not a copy of the next line;
- ``drop_previous_line_copy``: line mode on a fresh line: not a copy of the line above;
- ``drop_empty_comment``: a bare comment marker (``#``, ``//``) is no completion;
- ``strip_trailing_whitespace``: "" when nothing useful is left;
- ``close_bracket_line``: ``{|}`` gets the closer on its own line;
- ``restore_crlf``: CRLF documents get CRLF ghost text.

``KIND`` names the kind of wrong ghost text each filter prevents (``repetition``, ``screen``, ``indentation``,
``language``, ``format``), the categories the quality benchmark reports.
"""

from __future__ import annotations

from typing import Callable, Iterable

from completer.context import PromptPlan

from .blocks import close_bracket_line, cut_at_block_end, one_line
from .cleanup import cut_at_end_token, drop_empty_comment, normalize_newlines, restore_crlf, strip_trailing_whitespace
from .context import Context
from .indentation import indent_body, reindent_first_line
from .language import cut_foreign_lines
from .overlap import trim_line_overlap
from .repetition import cut_repetition
from .screen import block_on_new_line, drop_next_line_copy, drop_previous_line_copy, drop_repeated_line_start

Filter = Callable[[str, Context], str]

FILTERS: tuple[Filter, ...] = (
    cut_at_end_token,
    normalize_newlines,
    cut_repetition,
    drop_repeated_line_start,
    one_line,
    block_on_new_line,
    reindent_first_line,
    indent_body,
    cut_foreign_lines,
    cut_at_block_end,
    trim_line_overlap,
    drop_next_line_copy,
    drop_previous_line_copy,
    drop_empty_comment,
    strip_trailing_whitespace,
    close_bracket_line,
    restore_crlf,
)

KIND = {
    "cut_at_end_token": "format", "normalize_newlines": "format", "cut_repetition": "repetition",
    "drop_repeated_line_start": "screen", "one_line": "format", "block_on_new_line": "indentation",
    "reindent_first_line": "indentation", "indent_body": "indentation", "cut_foreign_lines": "language",
    "cut_at_block_end": "screen", "trim_line_overlap": "screen", "drop_next_line_copy": "screen",
    "drop_previous_line_copy": "repetition",
    "drop_empty_comment": "format", "strip_trailing_whitespace": "format", "close_bracket_line": "indentation",
    "restore_crlf": "format",
}


def trace(completion: str, plan: PromptPlan, skip: Iterable[str] = ()) -> list[tuple[str, str]]:
    """(filter name, text after it) for each filter that ran, starting with ("raw", completion)."""
    steps = [("raw", completion if isinstance(completion, str) else "")]
    if not steps[0][1]:
        return steps
    ctx, skip = Context.from_plan(plan), set(skip)
    text = steps[0][1]
    for f in FILTERS:
        if f.__name__ in skip:
            continue
        text = f(text, ctx)
        steps.append((f.__name__, text))
    return steps


def postprocess(completion: str, plan: PromptPlan, skip: Iterable[str] = ()) -> str:
    """The ghost text for the model's ``completion`` ("" when nothing useful is left); ``skip`` names filters to
    leave out (to measure what each one is worth)."""
    return trace(completion, plan, skip)[-1][1]


__all__ = ["Context", "FILTERS", "Filter", "KIND", "postprocess", "trace"] + [f.__name__ for f in FILTERS]
