"""The engine interface every backend implements (embedded PyTorch, vLLM).

An engine takes a :class:`Request`, streams :class:`Chunk` deltas from ``generate()`` and stops a request when
``abort(request_id)`` is called or the consumer of ``generate()`` goes away (``CancelledError``/``GeneratorExit``).
Counters use vLLM's vocabulary for speculation (arXiv 2211.17192): *draft* tokens proposed by a proposer,
*accepted* draft tokens, and the *bonus* token the target adds after the last accepted one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import AsyncIterator, Protocol, Sequence, runtime_checkable


class EngineError(RuntimeError):
    """A request failed inside the engine (bad request, engine crash); the message is meant for the user."""


class InjectedFault(RuntimeError):
    """A failure made on purpose inside an engine's model step (``fault_after_steps``), as a dead device would
    fail: the test hook for the supervisor's failure handling and restart."""


class RequestError(EngineError):
    """The request itself cannot be served (empty prompt, token ids outside the vocabulary, longer than the
    model's context): the engine is fine and stays up; the caller has to change the request."""


@dataclass(frozen=True)
class Request:
    request_id: str
    prompt: str | Sequence[int]          # text, or token ids of the engine's tokenizer
    max_new_tokens: int = 64
    stop: tuple[str, ...] = ()           # generation ends before the first occurrence of any of these
    temperature: float = 0.0             # 0 = greedy
    top_p: float = 1.0
    seed: int | None = None
    cache_key: str | None = None         # scope of KV-cache reuse across requests (e.g. the document URI)
    heal: str = ""                       # token healing: the prompt was backed up by these characters; the first
                                         # tokens must re-type them (completer.healing), the output leaves them out

    def __post_init__(self) -> None:
        if not self.request_id:
            raise ValueError("request_id must be a non-empty string")
        if self.max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not isinstance(self.heal, str):
            raise ValueError(f"heal must be a string, got {type(self.heal).__name__}")


@dataclass(frozen=True)
class Chunk:
    """One streamed delta. The last chunk of a request has ``finished=True`` and a ``finish_reason``."""

    request_id: str
    text: str = ""                       # new text since the previous chunk (stop strings removed)
    token_ids: tuple[int, ...] = ()      # new token ids since the previous chunk
    finished: bool = False
    finish_reason: str | None = None     # "stop" | "length" | "abort"


@dataclass
class Counters:
    requests_started: int = 0
    requests_finished: int = 0
    requests_aborted: int = 0
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0        # prompt tokens whose KV came from the cache instead of a prefill
    generated_tokens: int = 0
    draft_tokens: int = 0                # draft tokens proposed
    accepted_tokens: int = 0             # draft tokens accepted by the target
    draft_per_position: list[int] = field(default_factory=list)     # proposed at position i of a draft
    accepted_per_position: list[int] = field(default_factory=list)  # accepted at position i of a draft
    wasted_tokens: int = 0               # tokens generated for requests that were later aborted

    def record_draft(self, proposed: int, accepted: int) -> None:
        """Count one verification step: ``proposed`` draft tokens of which the first ``accepted`` were kept."""
        for lst, n in ((self.draft_per_position, proposed), (self.accepted_per_position, accepted)):
            if len(lst) < proposed:
                lst.extend([0] * (proposed - len(lst)))
            for i in range(n):
                lst[i] += 1
        self.draft_tokens += proposed
        self.accepted_tokens += accepted

    def snapshot(self) -> dict:
        return with_acceptance(dataclasses.asdict(self))


def with_acceptance(d: dict) -> dict:
    """``d`` (the counts of :class:`Counters`, or a difference of two snapshots' counts) with the ratios derived from
    them: ``acceptance_rate`` and ``acceptance_per_position`` (None where nothing was drafted). Ratios are derived
    from counts, never subtracted: the difference of two ratios is no ratio."""
    d["acceptance_rate"] = d["accepted_tokens"] / d["draft_tokens"] if d.get("draft_tokens") else None
    d["acceptance_per_position"] = [a / p if p else None for a, p in
                                    zip(d.get("accepted_per_position") or [], d.get("draft_per_position") or [])]
    return d


def counted_between(before: dict | None, after: dict | None) -> dict:
    """What a counters snapshot (an engine's :meth:`Engine.counters`, or any dict of counts) counted between
    ``before`` and ``after``: numbers and per-position lists subtracted (an entry missing or unset before counts as
    zero); an engine's acceptance ratios derived again from the subtracted counts (``with_acceptance``)."""
    if not after:
        return {}
    before = before or {}
    out = {}
    for k, v in after.items():
        if k in ("acceptance_rate", "acceptance_per_position"):
            continue                                   # ratios: derived below from the counts, not subtracted
        b = before.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[k] = v - (b if isinstance(b, (int, float)) else 0)
        elif isinstance(v, list) and all(isinstance(x, (int, float)) for x in v):
            bl = b if isinstance(b, list) else []
            out[k] = [x - (bl[i] if i < len(bl) and isinstance(bl[i], (int, float)) else 0)
                      for i, x in enumerate(v)]
    return with_acceptance(out) if "draft_tokens" in out and "accepted_tokens" in out else out


def tokens_per_step(d: dict) -> float:
    """Mean tokens a speculative step yields over counts ``d`` (a snapshot or :func:`counted_between`): the bonus
    token plus the accepted drafts per step (a step drafts at position 0 once); 1.0 when nothing was drafted."""
    drafts = (d.get("draft_per_position") or [0])[0]
    return 1 + d.get("accepted_tokens", 0) / drafts if drafts else 1.0


@runtime_checkable
class Engine(Protocol):
    """What the language server and the benchmarks need from a backend."""

    name: str
    prompt_template: str
    """The fill-in-the-middle template of the model it serves (a ``completer.prompt.TEMPLATES`` name): the engine
    knows its model folder, so callers ask it instead of looking the folder up again."""

    def generate(self, request: Request) -> AsyncIterator[Chunk]:
        """Stream the completion of ``request``; closing the iterator aborts the request."""
        ...

    async def abort(self, request_id: str) -> None:
        """Stop ``request_id`` within one decode step and free its resources; unknown ids are ignored."""
        ...

    def counters(self) -> dict:
        """A snapshot of :class:`Counters` (plus ``acceptance_rate`` and ``acceptance_per_position``)."""
        ...

    def count_tokens(self, text: str) -> int:
        """Tokens ``text`` takes in this engine's tokenizer (for prompt budgets)."""
        ...

    async def close(self) -> None:
        ...


def open_model(spec: str):
    """(folder, tokenizer) of model ``spec`` ("house:<name>", a folder, a hub id) for any backend, or an
    :class:`EngineError` that says what is missing."""
    from ..models import resolve_model
    from ..models.tokenizer import load_tokenizer

    try:
        folder = resolve_model(spec)
        return folder, load_tokenizer(folder)
    except FileNotFoundError as e:
        raise EngineError(str(e)) from e


def check_prompt(ids: Sequence[int], *, n_vocab: int | None, positions: int | None, reserve: int = 1) -> None:
    """The one check of a tokenized prompt, for every backend: not empty, ids inside ``0..n_vocab-1``, and
    ``len(ids) + reserve`` (room for new tokens) within the model's ``positions``. Raises :class:`RequestError`.
    (Fields of the request itself are checked once, in ``Request.__post_init__``.)"""
    if not ids:
        raise RequestError("empty prompt")
    if n_vocab is not None:
        bad = [t for t in ids if not isinstance(t, int) or not 0 <= t < n_vocab]
        if bad:
            raise RequestError(f"prompt token ids out of range 0..{n_vocab - 1}: {bad[:5]}")
    if positions is not None and len(ids) + reserve > positions:
        raise RequestError(f"prompt of {len(ids)} tokens (+{reserve} new) exceeds the model's context of "
                           f"{positions} positions")


def admit(request: Request, *, closed: bool, running, encode, n_vocab: int | None, positions: int | None,
          counters) -> list[int]:
    """The admission of a request by a backend that tokenizes for a server (vLLM in process, remote): the engine
    open, the id not running (``running``: the ids in flight), the prompt's token ids (``encode`` for text)
    checked by :func:`check_prompt` with room for ``max_new_tokens``; counts it as started. Returns the ids."""
    if closed:
        raise EngineError("engine is closed")
    if request.request_id in running:
        raise EngineError(f"request id {request.request_id!r} is already running")
    ids = list(request.prompt) if not isinstance(request.prompt, str) else encode(request.prompt)
    check_prompt(ids, n_vocab=n_vocab, positions=positions, reserve=max(request.max_new_tokens, 1))
    counters.requests_started += 1
    counters.prompt_tokens += len(ids)
    return ids


def apply_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """Cut ``text`` before the earliest stop string. Returns (text, stopped)."""
    cut = min((i for i in (text.find(s) for s in stop if s) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


def held_back(text: str, stop: Sequence[str]) -> int:
    """How many trailing characters of ``text`` could be the start of a stop string (not yet safe to stream)."""
    n = 0
    for s in stop:
        for k in range(min(len(s) - 1, len(text)), 0, -1):
            if text.endswith(s[:k]):
                n = max(n, k)
                break
    return n
