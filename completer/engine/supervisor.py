"""An :class:`Engine` that survives its engine: limits up front, a clear error on a failure, restart with backoff.

``SupervisedEngine(config)`` builds the backend ``config`` names (``create_engine``) and serves through it. It

- holds every request to the operator's limits before the engine sees it: prompt tokens against
  ``max_prompt_tokens``, ``max_new_tokens`` against its limit, and sheds a request when ``max_inflight`` requests are
  already running (an :class:`EngineError` that says which limit, at once, instead of an unbounded queue); what the
  model itself cannot take (empty prompt, ids outside the vocabulary, longer than its context) the engine refuses
  with a :class:`RequestError` (``base.check_prompt``), passed on as a refusal;
- turns any failure of the engine during a request (an exception inside the embedded engine's step, vLLM's engine
  process dying) into an :class:`EngineError` for *every* request in flight on that engine ("engine failed: ...;
  restarting"), and then
- restarts: closes the failed engine and builds a new one from the same :class:`EngineConfig`, after a backoff that
  doubles with each consecutive failure (``backoff_s`` .. ``max_backoff_s``; reset by the first request that
  completes on the new engine). Requests that arrive meanwhile wait for the new engine at most ``restart_wait_s``
  (10 s; a vLLM engine takes 50-120 s to come back) and are then answered "engine restarting ... s so far" at once;
- replaces lone surrogates in text prompts (JSON allows them; a UTF-8 tokenizer does not) with U+FFFD;
- knows the backend's own limits from the engine itself (``max_model_len``, ``n_vocab``: the embedded engine's model
  config, vLLM's ``model_config`` read at its start), re-read from each rebuilt engine; each engine checks a prompt
  against them (``base.check_prompt``), so an over-long prompt is that request's refusal, never a restart;
- counts all of it in ``counters()["supervisor"]`` (restarts, failures, refused and shed requests, requests in
  flight), next to the current engine's own counters.

Whatever else the engine raises is taken as a failure of the engine (at worst a spurious restart, never a wrong
answer).

Fault injection (tests and ``bench/reliability.py``): :func:`inject_step_fault` makes a real embedded engine fail
inside its model step from the N-th step on, as a dead device would (the engine's ``fault_after_steps`` hook);
``SupervisedEngine(..., fault_after_steps=N)`` (``completer-lsp --fault-after-steps N``) does it to the first engine
it builds, so a restart heals it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from dataclasses import asdict, dataclass
from typing import AsyncIterator, Callable

from ..text import clean_surrogates
from .base import Chunk, Engine, EngineError, Request, RequestError
from .config import EngineConfig

log = logging.getLogger(__name__)

def inject_step_fault(engine, after_steps: int = 0) -> dict:
    """Make ``engine``'s model steps raise :class:`InjectedFault` from its ``after_steps``-th step on (every step
    after, too: a dead engine stays dead), through the engine's own ``fault_after_steps`` hook (the embedded
    TorchEngine has it). Returns the hook's live state (``{"steps": n, "raised": n}``)."""
    if not hasattr(engine, "fault_after_steps"):
        raise TypeError(f"{type(engine).__name__} has no fault_after_steps test hook")
    engine.fault_state = {"steps": 0, "raised": 0}
    engine.fault_after_steps = after_steps
    return engine.fault_state


@dataclass
class SupervisorCounters:
    requests_started: int = 0        # accepted and handed to the engine
    requests_finished: int = 0       # ended with finish_reason stop/length
    requests_aborted: int = 0        # cancelled by the caller (abort() or closing the stream)
    requests_failed: int = 0         # ended with an EngineError because the engine failed
    requests_refused: int = 0        # over a limit (prompt tokens, max_new_tokens, bad token ids)
    requests_shed: int = 0           # refused because max_inflight requests were running
    engine_failures: int = 0
    restarts: int = 0                # engines rebuilt after a failure
    restart_failures: int = 0        # rebuild attempts that failed themselves (retried with more backoff)
    generation: int = 0              # which engine serves now (0 = the first)
    inflight: int = 0
    restarting: bool = False
    last_failure: str | None = None
    last_restart_s: float | None = None   # how long the last rebuild took


@dataclass
class _Flight:
    request_id: str
    generation: int
    failure: str | None = None       # set when the engine failed under this request


class SupervisedEngine:
    def __init__(self, config: EngineConfig, factory: Callable[[EngineConfig], Engine] | None = None, *,
                 max_prompt_tokens: int | None = None, max_new_tokens: int = 4096, max_inflight: int | None = 64,
                 backoff_s: float = 0.25, max_backoff_s: float = 30.0, restart_wait_s: float = 10.0,
                 engine: Engine | None = None, fault_after_steps: int | None = None):
        if factory is None:
            from . import create_engine
            factory = create_engine
        self.config = config
        self._factory = factory
        self.max_prompt_tokens = max_prompt_tokens
        self.max_new_tokens = max_new_tokens
        self.max_inflight = max_inflight
        self.backoff_s, self.max_backoff_s, self.restart_wait_s = backoff_s, max_backoff_s, restart_wait_s
        self.inner: Engine = engine if engine is not None else factory(config)
        self.name = f"supervised-{getattr(self.inner, 'name', type(self.inner).__name__)}"
        if fault_after_steps is not None:
            inject_step_fault(self.inner, fault_after_steps)
            log.warning("test hook: the first engine fails from step %d on", fault_after_steps)
        self._stats = SupervisorCounters()
        self._flights: dict[str, _Flight] = {}
        self._consecutive = 0
        self._restart: asyncio.Task | None = None
        self._restart_began = 0.0                            # monotonic time of the last failure
        self._closed = False

    # --- Engine protocol ----------------------------------------------------------------------------------
    async def generate(self, request: Request) -> AsyncIterator[Chunk]:
        if self._closed:
            raise EngineError("engine is closed")
        engine = await self._current()
        if isinstance(request.prompt, str) and clean_surrogates(request.prompt) is not request.prompt:
            request = dataclasses.replace(request, prompt=clean_surrogates(request.prompt))
        self._check(request, engine)
        if request.request_id in self._flights:
            raise EngineError(f"request id {request.request_id!r} is already running")
        if self.max_inflight is not None and len(self._flights) >= self.max_inflight:
            self._stats.requests_shed += 1
            raise EngineError(f"server busy: {len(self._flights)} requests in flight (limit {self.max_inflight}); "
                              f"request {request.request_id!r} was not started")
        flight = _Flight(request.request_id, self._stats.generation)
        self._flights[request.request_id] = flight
        self._stats.requests_started += 1
        outcome = "aborted"                                    # unless it finishes or fails
        try:
            async with contextlib.aclosing(engine.generate(request)) as stream:
                try:
                    async for chunk in stream:
                        if flight.failure is not None:         # the engine failed under another request
                            break
                        if chunk.finished and chunk.finish_reason != "abort":
                            outcome = "finished"
                        yield chunk
                        if chunk.finished:
                            return
                except RequestError:                           # the engine refused the request: it is fine
                    outcome = "refused"
                    raise
                except (EngineError, Exception) as e:          # noqa: B014 - any engine exception is a failure
                    if flight.failure is None:
                        self._engine_failed(flight.generation, engine, e)
            if flight.failure is not None:
                outcome = "failed"
                raise EngineError(flight.failure)
        finally:
            self._flights.pop(request.request_id, None)
            if outcome == "finished":
                self._stats.requests_finished += 1
                if flight.generation == self._stats.generation:
                    self._consecutive = 0
            elif outcome == "failed":
                self._stats.requests_failed += 1
            elif outcome == "refused":
                self._stats.requests_refused += 1
            else:
                self._stats.requests_aborted += 1

    async def abort(self, request_id: str) -> None:
        if request_id in self._flights:
            await self.inner.abort(request_id)

    def counters(self) -> dict:
        c = dict(self.inner.counters())
        self._stats.inflight = len(self._flights)
        self._stats.restarting = self._restart is not None and not self._restart.done()
        c["supervisor"] = asdict(self._stats)
        c["supervisor"]["limits"] = {"max_model_len": self.max_model_len, "n_vocab": self.n_vocab,
                                     "max_prompt_tokens": self.max_prompt_tokens,
                                     "max_new_tokens": self.max_new_tokens, "max_inflight": self.max_inflight}
        return c

    @property
    def max_model_len(self) -> int | None:
        """Positions (prompt + new tokens) the current engine's model takes: the backend's own limit."""
        return getattr(self.inner, "max_model_len", None)

    @property
    def n_vocab(self) -> int | None:
        """Token ids the current engine accepts (``0..n_vocab-1``)."""
        return getattr(self.inner, "n_vocab", None)

    @property
    def prompt_template(self) -> str:
        return self.inner.prompt_template

    def _build(self) -> Engine:
        """A new engine, with its cold-prompt speed measured here rather than by the first keystroke's plan (the
        torch engine measures it on first use)."""
        engine = self._factory(self.config)
        getattr(engine, "prompt_s_per_token", None)
        return engine

    @property
    def prompt_s_per_token(self) -> float | None:
        """The current engine's measured time per token of a cold prompt (``pipeline.prompt_budget``), or None."""
        return getattr(self.inner, "prompt_s_per_token", None)

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(clean_surrogates(text))

    @property
    def tokenizer(self):
        """The engine's tokenizer, or None (token healing reads its vocabulary to find the prompt's last token)."""
        return getattr(self.inner, "tokenizer", None)

    async def close(self) -> None:
        self._closed = True
        if self._restart is not None and not self._restart.done():
            self._restart.cancel()
            with contextlib.suppress(BaseException):
                await self._restart
        await self.inner.close()

    # --- limits -------------------------------------------------------------------------------------------
    def _check(self, request: Request, engine: Engine) -> None:
        def refuse(msg: str) -> None:
            self._stats.requests_refused += 1
            raise EngineError(msg)

        if request.max_new_tokens > self.max_new_tokens:
            refuse(f"max_new_tokens={request.max_new_tokens} exceeds the limit of {self.max_new_tokens}")
        if self.max_prompt_tokens is not None:
            n = engine.count_tokens(request.prompt) if isinstance(request.prompt, str) else len(request.prompt)
            if n > self.max_prompt_tokens:
                refuse(f"prompt of {n} tokens exceeds the limit of {self.max_prompt_tokens} prompt tokens")

    # --- failure and restart ------------------------------------------------------------------------------
    def _engine_failed(self, generation: int, engine: Engine, error: BaseException) -> None:
        if generation != self._stats.generation or engine is not self.inner:
            # an old engine's leftover: that failure was handled already
            for f in self._flights.values():
                if f.generation == generation and f.failure is None:
                    f.failure = f"engine failed: {type(error).__name__}: {error}"
            return
        if self._restart is not None and not self._restart.done():
            return
        msg = f"engine failed: {type(error).__name__}: {error}; restarting it"
        log.error("%s", msg)
        self._restart_began = time.monotonic()
        self._stats.engine_failures += 1
        self._stats.last_failure = f"{type(error).__name__}: {error}"
        self._consecutive += 1
        for f in self._flights.values():
            if f.generation == generation and f.failure is None:
                f.failure = msg
        old_ids = [f.request_id for f in self._flights.values() if f.generation == generation]
        self._restart = asyncio.get_running_loop().create_task(self._restart_engine(engine, old_ids),
                                                               name="engine-restart")

    async def _restart_engine(self, old: Engine, old_ids: list[str]) -> None:
        for rid in old_ids:                                    # wake the other requests of the failed engine
            with contextlib.suppress(Exception):               # (a dead engine's abort may never answer)
                await asyncio.wait_for(old.abort(rid), timeout=1)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(old.close(), timeout=30)
        attempt = 0
        while not self._closed:
            delay = min(self.max_backoff_s, self.backoff_s * 2 ** (self._consecutive + attempt - 1))
            await asyncio.sleep(delay)
            t0 = time.perf_counter()
            try:
                new = await asyncio.to_thread(self._build)
            except Exception as e:
                attempt += 1
                self._stats.restart_failures += 1
                self._stats.last_failure = f"restart failed: {type(e).__name__}: {e}"
                log.exception("engine restart failed (attempt %d)", attempt)
                continue
            if self._closed:
                await new.close()
                return
            self.inner = new
            self._stats.generation += 1
            self._stats.restarts += 1
            self._stats.last_restart_s = time.perf_counter() - t0
            log.warning("engine restarted (generation %d) in %.2f s", self._stats.generation,
                        self._stats.last_restart_s)
            return

    async def _current(self) -> Engine:
        task = self._restart
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), self.restart_wait_s)
            except asyncio.TimeoutError:
                raise EngineError(f"engine restarting after a failure ({self._stats.last_failure}): "
                                  f"{time.monotonic() - self._restart_began:.0f} s so far; try again") from None
        if self._closed:
            raise EngineError("engine is closed")
        return self.inner


def supervised(factory: Callable[[EngineConfig], Engine] | None = None, **limits) -> Callable[[EngineConfig], Engine]:
    """A factory for ``lsp.engine_host.EngineHost``: builds a :class:`SupervisedEngine` around ``factory``."""
    return lambda config: SupervisedEngine(config, factory, **limits)
