"""From a document snapshot to an engine prompt, and from the engine's text to the ghost text shown.

The work is done by ``completer.context.build_prompt`` (tree-sitter context, FIM templates, budgets) and
``completer.postprocess.postprocess``; this module only adapts the server's types to them. Until those land (or for
a language they reject) a plain fill-in-the-middle prompt is used: PSM (``<|fim_prefix|>P<|fim_suffix|>S
<|fim_middle|>``) with the prefix starting at a line that moves in steps of ``_ANCHOR_LINES`` lines, so
consecutive keystrokes share the whole token prefix up to the cursor (the engine's prefix cache reuses it).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Sequence

from .config import ServerConfig
from .documents import Snapshot

log = logging.getLogger(__name__)

_ANCHOR_LINES = 64
_SUFFIX_LINES = 24


@dataclass(frozen=True)
class Built:
    prompt: str
    stop: tuple[str, ...]
    multiline: bool
    extra: Any = field(default=None, compare=False)   # whatever the context builder returned, for postprocess


def build(snap: Snapshot, offset: int, others: Sequence[Snapshot], engine, cfg: ServerConfig) -> Built:
    return build_plain(snap.text, offset, engine, cfg)


def build_plain(text: str, offset: int, engine, cfg: ServerConfig) -> Built:
    """PSM prompt within ``min(contextBudgetTokens, maxPromptTokens)`` tokens, prefix anchored for cache reuse."""
    budget = min(cfg.context_budget_tokens, cfg.max_prompt_tokens)
    before, after = text[:offset], text[offset:]
    line_start = before.rfind("\n") + 1
    line_prefix = before[line_start:]
    line_rest = after.split("\n", 1)[0]
    multiline = not line_prefix.strip() and not line_rest.strip()
    suffix = "\n".join(after.split("\n")[:_SUFFIX_LINES])
    lines = before.split("\n")
    cur = len(lines) - 1
    anchor = max(0, (cur - _ANCHOR_LINES) // (_ANCHOR_LINES // 2) * (_ANCHOR_LINES // 2))
    while True:
        prefix = "\n".join(lines[anchor:])
        prompt = f"<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>"
        n = engine.count_tokens(prompt)
        if n <= budget or anchor >= cur:
            break
        anchor = min(cur, anchor + max(1, (cur - anchor) // 2))
    if engine.count_tokens(prompt) > budget:  # one huge line: keep its end
        keep = max(16, budget * 2)
        prefix, suffix = prefix[-keep:], suffix[: keep // 2]
        prompt = f"<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>"
    stop = ("\n\n\n",) if multiline else ("\n",)
    return Built(prompt, stop, multiline)


def finish(raw: str, built: Built, snap: Snapshot, offset: int) -> str:
    return finish_plain(raw, snap.text[offset:], built.multiline)


def finish_plain(raw: str, after: str, multiline: bool) -> str:
    """Drop what the editor already has after the cursor on this line; trim trailing blank lines."""
    text = raw if multiline else raw.split("\n", 1)[0]
    rest = after.split("\n", 1)[0]
    if rest and text.endswith(rest):
        text = text[: len(text) - len(rest)]
    return text.rstrip() if multiline else text.rstrip("\r")
