"""From a document snapshot to an engine prompt, and from the engine's text to the ghost text shown.

Thin adapter over ``completer.context.build_prompt`` (tree-sitter context, FIM templates, budgets, cache-friendly
windows) and ``completer.postprocess.postprocess``. The FIM template is the ``template`` setting, or with
``"auto"`` the one ``completer.prompt.template_for_model`` reads off the target model's folder.
"""

from __future__ import annotations

import functools
from typing import Sequence

from completer.context import PromptPlan, SourceFile, build_prompt
from completer.postprocess import postprocess
from completer.prompt import TEMPLATES, template_for_model

from .config import ConfigError, ServerConfig
from .documents import Snapshot


@functools.lru_cache(maxsize=16)
def _auto_template(model: str) -> str:
    from completer.models import resolve_model

    return template_for_model(resolve_model(model))


def template(cfg: ServerConfig) -> str:
    if cfg.template == "auto":
        return _auto_template(cfg.engine.model)
    if cfg.template not in TEMPLATES:
        raise ConfigError(f"template: must be 'auto' or one of {', '.join(TEMPLATES)}, got {cfg.template!r}")
    return cfg.template


def _source(snap: Snapshot) -> SourceFile:
    return SourceFile(uri=snap.uri, language_id=snap.language_id, text=snap.text)


def build(snap: Snapshot, offset: int, others: Sequence[Snapshot], engine, cfg: ServerConfig) -> PromptPlan:
    """The prompt plan at ``offset``: within ``min(contextBudgetTokens, maxPromptTokens)`` prompt tokens."""
    return build_prompt(
        _source(snap), offset, others=[_source(o) for o in others], count_tokens=engine.count_tokens,
        budget_tokens=min(cfg.context_budget_tokens, cfg.max_prompt_tokens), template=template(cfg),
        max_tokens=cfg.max_tokens)


def finish(raw: str, plan: PromptPlan) -> str:
    return postprocess(raw, plan)
