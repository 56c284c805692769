"""Typed server settings: ``initializationOptions`` and ``workspace/didChangeConfiguration``.

JSON keys are camelCase; ``engine`` is the :class:`completer.engine.EngineConfig` dict (its own snake_case field
names). Example with the defaults::

    {"engine": {"backend": "torch", "model": "default", "draft": "default", "speculation": "auto", ...},
     "maxTokens": 32, "debounceMs": 0, "contextBudgetTokens": 1024, "cancelStaleRequests": true,
     "typeThroughCache": true, "template": "auto", "maxDocumentChars": 2000000, "maxPromptTokens": 4096,
     "engineStartTimeoutS": 300, "reuseInFlight": true, "earlyAnswer": false, "adaptiveDebounce": false,
     "debounceMinMs": 0, "debounceMaxMs": 300, "answerBoundMs": 1000, "partialAnswerMs": 30,
     "contextSources": ["imports", "similar", "edits"], "snippetShare": 0.1, "warmOnCursor": true}

Bad options in ``initialize`` are answered with an ``initialize`` error (-32602, InvalidParams) whose message names
the bad field; the server keeps running and the client may ``initialize`` again. Bad options in
``didChangeConfiguration`` (a notification, so no response) are reported with ``window/showMessage`` and the
previous settings stay in force. Settings may be sent bare or under a ``"completer"`` key.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from completer.engine import EngineConfig
from completer.context import SNIPPET_SHARE
from completer.pipeline import COLD_PROMPT_MS, Settings
from completer.prompt import TEMPLATES


class ConfigError(ValueError):
    """A bad setting; the message starts with the setting's name."""


def _int(name: str, v: Any, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ConfigError(f"{name}: expected an integer, got {v!r}")
    if not lo <= v <= hi:
        raise ConfigError(f"{name}: must be in {lo}..{hi}, got {v}")
    return v


def _number(name: str, v: Any, lo: float, hi: float) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ConfigError(f"{name}: expected a number, got {v!r}")
    if not lo <= v <= hi:
        raise ConfigError(f"{name}: must be in {lo}..{hi}, got {v}")
    return float(v)


def _bool(name: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise ConfigError(f"{name}: expected true or false, got {v!r}")
    return v


# the context sources a client may switch on (lsp/context_sources.py): definitions of imported names from the
# workspace's files, similar windows of recently used files, recently edited ranges
CONTEXT_SOURCES = ("imports", "similar", "edits")


def _sources(name: str, v: Any) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise ConfigError(f"{name}: expected a list of names, got {v!r}")
    bad = sorted(set(v) - set(CONTEXT_SOURCES))
    if bad:
        raise ConfigError(f"{name}: unknown source(s) {bad}; known: {list(CONTEXT_SOURCES)}")
    return tuple(x for x in CONTEXT_SOURCES if x in v)


def _template(name: str, v: Any) -> str:
    if v != "auto" and v not in TEMPLATES:
        raise ConfigError(f"{name}: must be 'auto' or one of {', '.join(TEMPLATES)}, got {v!r}")
    return v


@dataclass(frozen=True)
class ServerConfig:
    engine: EngineConfig = field(default_factory=EngineConfig)
    max_tokens: int = 32                  # new tokens per completion (64 answered later under load and was right
                                          # no more often: bench/results/replay/)
    debounce_ms: float = 0.0              # wait before calling the engine (not when answering from cache); 30 ms
                                          # tied or lost to none in every replay cell (bench/results/replay-partial/)
    context_budget_tokens: int = 1024     # prompt budget given to completer.context.build_prompt
    cancel_stale_requests: bool = True    # False: every request runs to the end (naive server, for benchmarks)
    type_through_cache: bool = True       # answer from the last completion when the user types through it
    template: str = "auto"                # FIM template name for completer.context ("auto" = by model family)
    max_document_chars: int = 2_000_000   # larger documents are refused with a clear error
    max_prompt_tokens: int = 4096         # hard cap on the prompt, whatever the context budget says
    engine_start_timeout_s: float = 300.0  # how long the engine may take to start (vLLM cold start: 50-120 s); a
                                           # request waits at most --engine-loading-wait, then gets "engine loading"
    reuse_in_flight: bool = True          # a keystroke that types what the running request writes is answered by it
    early_answer: bool = False            # answer at the end of the first line; the block finishes in the background
    adaptive_debounce: bool = False       # debounce learned from the client's typing rhythm and the engine's time
                                          # (else debounceMs); off: on a busy 2-core machine it left ghost text
                                          # before the next key on far fewer keystrokes (bench/results/replay/)
    debounce_min_ms: float = 0.0          # bounds of the adaptive debounce
    debounce_max_ms: float = 300.0        # under load the adaptive wait skips mid-burst keys
                                          # (bench/results/reliability-issue13-bound at b4844c3)
    token_healing: bool = True            # prompt backed up to a token boundary at the cursor (completer.healing)
    answer_bound_ms: float = 1000.0       # refuse ("server busy") what cannot be answered within this; 0 = never
    partial_answer_ms: float = 30.0       # to clients that ask again on a partial answer (partialGhost): what the
                                          # model has written by then, instead of all of it after the next key; 0 = off
    context_sources: tuple[str, ...] = CONTEXT_SOURCES   # context from beyond the open file (lsp/context_sources.py)
    snippet_share: float = SNIPPET_SHARE  # most of the prompt budget those sources take
    warm_on_cursor: bool = True           # prefill the prompt where the editor reports the cursor
                                          # (completer/didMoveCursor, lsp/warm.py) before the user types there
    cold_prompt_ms: float = COLD_PROMPT_MS  # the budget is cut to what the engine prefills in this time from a
                                            # cold cache (pipeline.prompt_budget; SmolLM2 on 2 cores: 384-640); 0 = off

    # JSON name -> (field name, validator)
    _KEYS = {
        "maxTokens": ("max_tokens", lambda n, v: _int(n, v, 1, 4096)),
        "debounceMs": ("debounce_ms", lambda n, v: _number(n, v, 0, 10_000)),
        "contextBudgetTokens": ("context_budget_tokens", lambda n, v: _int(n, v, 16, 1_000_000)),
        "cancelStaleRequests": ("cancel_stale_requests", _bool),
        "typeThroughCache": ("type_through_cache", _bool),
        "template": ("template", _template),
        "maxDocumentChars": ("max_document_chars", lambda n, v: _int(n, v, 1, 1 << 31)),
        "maxPromptTokens": ("max_prompt_tokens", lambda n, v: _int(n, v, 16, 1_000_000)),
        "engineStartTimeoutS": ("engine_start_timeout_s", lambda n, v: _number(n, v, 0.1, 3600)),
        "reuseInFlight": ("reuse_in_flight", _bool),
        "earlyAnswer": ("early_answer", _bool),
        "adaptiveDebounce": ("adaptive_debounce", _bool),
        "debounceMinMs": ("debounce_min_ms", lambda n, v: _number(n, v, 0, 10_000)),
        "debounceMaxMs": ("debounce_max_ms", lambda n, v: _number(n, v, 0, 10_000)),
        "tokenHealing": ("token_healing", _bool),
        "answerBoundMs": ("answer_bound_ms", lambda n, v: _number(n, v, 0, 3_600_000)),
        "partialAnswerMs": ("partial_answer_ms", lambda n, v: _number(n, v, 0, 3_600_000)),
        "contextSources": ("context_sources", _sources),
        "snippetShare": ("snippet_share", lambda n, v: _number(n, v, 0, 0.6)),
        "warmOnCursor": ("warm_on_cursor", _bool),
        "coldPromptMs": ("cold_prompt_ms", lambda n, v: _number(n, v, 0, 3_600_000)),
    }

    def updated(self, options: Any, where: str = "initializationOptions") -> "ServerConfig":
        """A copy with ``options`` (a partial settings dict) applied; ConfigError names the bad field."""
        if options is None:
            return self
        if not isinstance(options, dict):
            raise ConfigError(f"{where}: expected an object, got {type(options).__name__}")
        if "completer" in options and isinstance(options["completer"], dict) and len(options) == 1:
            options = options["completer"]
        known = {"engine", *self._KEYS}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ConfigError(f"{where}: unknown setting(s) {unknown}; known: {sorted(known)}")
        changes: dict[str, Any] = {}
        for key, value in options.items():
            name = f"{where}.{key}"
            if key == "engine":
                changes["engine"] = _engine(name, self.engine, value)
            else:
                fname, check = self._KEYS[key]
                changes[fname] = check(name, value)
        new = dataclasses.replace(self, **changes)
        if new.debounce_min_ms > new.debounce_max_ms:
            raise ConfigError(f"{where}.debounceMinMs: {new.debounce_min_ms:g} is above debounceMaxMs "
                              f"{new.debounce_max_ms:g}")
        return new

    @classmethod
    def from_options(cls, options: Any) -> "ServerConfig":
        return cls().updated(options)

    def settings(self) -> Settings:
        """The pipeline's settings: the prompt gets ``min(contextBudgetTokens, maxPromptTokens)`` tokens."""
        return Settings(template=self.template, budget_tokens=min(self.context_budget_tokens, self.max_prompt_tokens),
                        max_tokens=self.max_tokens, token_healing=self.token_healing, snippet_share=self.snippet_share,
                        cold_prompt_ms=self.cold_prompt_ms)

    def to_json(self) -> dict:
        d = {key: getattr(self, fname) for key, (fname, _) in self._KEYS.items()}
        d["contextSources"] = list(self.context_sources)
        d["engine"] = dataclasses.asdict(self.engine)
        return d


def _engine(name: str, current: EngineConfig, value: Any) -> EngineConfig:
    if not isinstance(value, dict):
        raise ConfigError(f"{name}: expected an object, got {type(value).__name__}")
    merged = {**current.given(), **value}      # a model left to its default follows a change of backend
    try:
        return EngineConfig.from_dict(merged)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{name}: {e}") from None
