"""From the model's text to the ghost text shown: ``postprocess(completion, plan)``.

Post-processing is a list of small named filters (``FILTERS``), each a pure function ``(text, Context) -> text``
applied in order (as Tabby's tabby-agent post-processing is): each can be read, table-tested and switched off
alone (``postprocess(..., skip={"name"})``), and ``trace`` shows which filter changed what, so the quality
benchmark can report where ghost text goes wrong by kind. The ``Context`` is built once from the ``PromptPlan``.

- ``cut_at_end_token``, ``normalize_newlines``: the raw text (end tokens, CRLF);
- ``one_line``: line mode keeps the first line;
- ``reindent_first_line``, ``indent_body``: the block's indentation (typed indentation not repeated, a flush-left
  body shifted);
- ``cut_at_block_end``: block mode stops at the first line that dedents below the block or repeats the suffix;
- ``trim_line_overlap``: no closing brackets/quotes or rest of line the editor already has;
- ``strip_trailing_whitespace``: "" when nothing useful is left;
- ``close_bracket_line``: ``{|}`` gets the closer on its own line;
- ``restore_crlf``: CRLF documents get CRLF ghost text.
"""

from __future__ import annotations

from typing import Callable, Iterable

from completer.context import PromptPlan

from .blocks import close_bracket_line, cut_at_block_end, one_line
from .cleanup import cut_at_end_token, normalize_newlines, restore_crlf, strip_trailing_whitespace
from .context import Context
from .indentation import indent_body, reindent_first_line
from .overlap import trim_line_overlap

Filter = Callable[[str, Context], str]

FILTERS: tuple[Filter, ...] = (
    cut_at_end_token,
    normalize_newlines,
    one_line,
    reindent_first_line,
    indent_body,
    cut_at_block_end,
    trim_line_overlap,
    strip_trailing_whitespace,
    close_bracket_line,
    restore_crlf,
)


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


__all__ = ["Context", "FILTERS", "Filter", "postprocess", "trace"] + [f.__name__ for f in FILTERS]
