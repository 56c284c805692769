"""The per-document request policy shared by inline completion and ``textDocument/completion``.

The completion itself is ``completer.pipeline`` (plan -> engine request -> post-process); this module decides
*when* to run one and what to answer from. With ``cancelStaleRequests`` (the default), per document:

- a newer completion request, or an edit, *supersedes* the LSP request waiting for an answer: its asyncio task is
  cancelled and pygls answers it with -32800 RequestCancelled; ``$/cancelRequest`` cancels it the same way;
- the engine request runs in a :class:`lsp.flight.Flight` of its own, at most one per document. With
  ``reuseInFlight`` a keystroke whose text before the cursor is the flight's anchor plus a prefix of what the model
  is writing (text after the cursor unchanged) is answered from that flight, with no debounce and no new engine
  request; a flight is aborted only when the document diverges from it (checked on every edit and request), when
  the document closes, or when the engine changes. Without ``reuseInFlight`` an edit aborts it, as before;
- with ``earlyAnswer`` the request is answered as soon as the ghost text has its first line; the flight finishes the
  block in the background into the type-through cache;
- for a client that asks again at once on a partial answer (client capability ``experimental.partialGhost``), a
  request not answered ``partialAnswerMs`` after it came is answered with what the model has written so far, marked
  partial; the flight goes on, and the client's next request for the same text (nothing typed since) waits for the
  whole answer. The ghost text so grows as the model writes instead of coming after the next key;
- before a new engine request, a debounce lets a burst of keystrokes collapse into one: ``debounceMs``, or with
  ``adaptiveDebounce`` a wait learned from this client's typing rhythm (:mod:`lsp.rhythm`); none on a cache hit or
  a reuse;
- warm-up (``warmOnCursor``): where the editor reports the cursor (``completer/didMoveCursor``, :mod:`lsp.warm`) and
  nothing runs for the document, the prompt the next keystroke there would get is prefilled into the engine's cache
  for the document in the background (an engine request for no tokens); the document's next engine request
  cancels it and reuses what it filled;
- typing through ghost text: when the text before the cursor is the text the last finished completion was made
  after plus a prefix of it, and the text after the cursor is unchanged, the rest is answered at once;
- with ``answerBoundMs`` (default 1000), a request whose answer cannot come within that bound is refused with -32803
  "server busy" rather than queued: at once when a new engine request is predicted to take longer (every
  connection's engine requests share one engine: :class:`lsp.flight.Load`), and at the bound when the answer has
  not come by then (the engine request is then left to the next keystroke for a short grace, as a cancelled one),
  unless it is the only completion running and no other has been asked for since it came: then there is no load to
  shed and its answer is waited for (a first completion on a slow machine gets its ghost text late rather than never;
  "busy" after all if others start or are asked for); and at once, without planning a prompt, while the event loop
  is behind (:meth:`lsp.flight.Load.behind`) and others run.

With ``cancelStaleRequests: false`` every request runs its own engine request to the end (as naive servers do), for
benchmarks.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
import weakref
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

from completer import pipeline
from completer.context import Snippet, SourceFile
from completer.context.syntax import Trees
from completer.engine.base import Request, RequestError

from .config import ServerConfig
from .documents import Snapshot
from .engine_host import EngineHost, EngineUnavailable
from .flight import ANSWER, DIVERGED, PARTIAL, Flight, Load
from .inbox import ARRIVED
from .rhythm import Rhythm

log = logging.getLogger(__name__)

# engine request ids are unique in the process: TCP/websocket connections share one engine
_REQUEST_IDS = itertools.count(1)
# a flight whose waiting request was cancelled ($/cancelRequest, or superseded) is kept this long for the next
# keystroke's request to reuse; aborted then if none did (editors send the cancel before the edit that follows)
ORPHAN_GRACE_S = 0.25
# the engine requests in flight per engine host (one per process; every connection's Lifecycle shares it)
_LOADS: "weakref.WeakKeyDictionary[EngineHost, Load]" = weakref.WeakKeyDictionary()


class Busy(EngineUnavailable):
    """The answer cannot come within ``answerBoundMs``: refused ("server busy", -32803) instead of queued."""


@dataclass
class ServerStats:
    requests_received: int = 0       # completion requests (inline + completion)
    requests_cancelled: int = 0      # ended by supersede, edit or $/cancelRequest
    requests_superseded: int = 0     # of those, by a newer request or an edit of the document
    served_from_cache: int = 0       # answered by typing through the last completion, no engine request
    engine_requests: int = 0         # engine.generate calls
    engine_aborts: int = 0           # engine.abort calls for requests that had not finished
    completions_served: int = 0      # answered with non-empty ghost text
    empty_completions: int = 0       # answered with nothing to show
    errors: int = 0
    last_latency_ms: float | None = None   # request received -> answer, of the last answered request
    last_engine_ms: float | None = None    # engine time of the last engine request
    last_ttft_ms: float | None = None      # engine request sent -> its first generated text, of the last one
    last_tpot_ms: float | None = None      # time per generated token after the first, of the last engine request
    reuses: int = 0                  # answered from an engine request started for an earlier keystroke
    early_answers: int = 0           # answered at the end of the first line, before the engine request finished
    partial_answers: int = 0         # answered at partialAnswerMs with what the model had written (partialGhost)
    background_finished: int = 0     # engine requests that finished after their answer (into the type-through cache)
    flights_diverged: int = 0        # engine requests aborted because the document no longer matched them
    warmups: int = 0                 # prompts prefilled where the editor reported the cursor (warmOnCursor)
    warmups_cancelled: int = 0       # of those, cancelled before their end (a keystroke's request took over)
    refused_busy: int = 0            # refused at once: a new engine request was predicted over answerBoundMs
    refused_behind: int = 0          # refused at once: the event loop was behind (Load.behind), nothing started
    busy_at_bound: int = 0           # answered "busy" at answerBoundMs: the answer had not come by then
    bound_alone: int = 0             # past answerBoundMs with no other completion running or asked for: waited on
    predicted_ms: float | None = None         # predicted time of the last new engine request (lsp.flight.Load)
    debounce_ms: float | None = None          # the wait before the last new engine request
    typing_interval_ms: float | None = None   # median interval between this client's recent edits


@dataclass(frozen=True)
class Completion:
    text: str             # ghost text to insert at the cursor
    offset: int           # cursor offset in the snapshot
    from_cache: bool = False
    reused: bool = False  # answered from an engine request started for an earlier keystroke
    early: bool = False   # answered before its engine request finished (first line)
    partial: bool = False # what the model had written at partialAnswerMs; the client asks again for the rest


@dataclass(frozen=True)
class _Shown:
    before: str           # document text before the cursor when the completion was made
    after: str            # document text after the cursor then
    text: str             # the completion


def source(snap: Snapshot) -> SourceFile:
    """The pipeline's view of a document snapshot."""
    return SourceFile(uri=snap.uri, language_id=snap.language_id, text=snap.text)


def _plan(engine, snap: Snapshot, offset: int, others: Sequence[Snapshot], settings: pipeline.Settings,
          trees: Trees | None, snippets: Sequence[Snippet]) -> pipeline.PromptPlan:
    """The prompt plan at ``offset`` of ``snap``: one function for a completion's engine request and the warm-up,
    whose prompt must be the keystroke's for the engine to reuse what it filled."""
    return pipeline.plan(source(snap), offset, engine, settings, [source(o) for o in others], trees, snippets)


def type_through(shown: _Shown | None, snap: Snapshot, offset: int) -> str | None:
    """The rest of ``shown`` if the document is its anchor text plus a typed prefix of it, else None."""
    if shown is None:
        return None
    o = len(shown.before)
    if offset < o or not snap.text.startswith(shown.before) or snap.text[offset:] != shown.after:
        return None
    typed = snap.text[o:offset]
    if len(typed) >= len(shown.text) or not shown.text.startswith(typed):
        return None
    return shown.text[len(typed):]


class Lifecycle:
    ALONE_CHECK_S = 0.1              # past the bound with no other completion running: how often to look again

    def __init__(self, host: EngineHost, config: Callable[[], ServerConfig], metrics=None):
        self.host = host
        self._config = config
        # lsp.metrics.Metrics when the operator asked for --metrics (one per process, like the engine host)
        self.metrics = metrics if metrics is not None else getattr(host, "metrics", None)
        self.stats = ServerStats()
        self._inflight: dict[str, set[asyncio.Task]] = {}
        self._shown: dict[str, _Shown] = {}
        self._flights: dict[str, Flight] = {}
        self._partial: dict[str, tuple[str, str]] = {}   # per document, the text around the cursor of a partial answer
        self._warming: dict[str, asyncio.Task] = {}      # per document, its warm-up (warmOnCursor)
        self._rhythm = Rhythm()                 # one client per Lifecycle: its typing rhythm over all documents
        self.load = _LOADS.setdefault(host, Load())

    # --- called by document sync and lifecycle events ---------------------------------------------------
    def supersede(self, uri: str, keep: asyncio.Task | None = None) -> int:
        """Cancel the LSP requests waiting for ``uri`` (all but ``keep``); returns how many."""
        n = 0
        for task in list(self._inflight.get(uri, ())):
            if task is not keep and not task.done():
                task.cancel()
                n += 1
        self.stats.requests_superseded += n
        return n

    def document_changed(self, uri: str, snap: Snapshot | None = None) -> None:
        """An edit (``snap``: the document after it; None: replaced by didOpen). Supersedes the waiting request;
        the engine request in flight survives only if the edit types what it is writing (``reuseInFlight``)."""
        cfg = self._config()
        self._rhythm.keystroke()
        if not cfg.cancel_stale_requests:
            return
        self.supersede(uri)
        flight = self._flights.get(uri)
        if flight is not None and (not cfg.reuse_in_flight or snap is None or flight.diverged(snap.text)):
            self.stats.flights_diverged += cfg.reuse_in_flight
            self._abort_flight(uri)

    def document_closed(self, uri: str) -> None:
        self.supersede(uri)
        self._abort_flight(uri)
        self._cancel_warm(uri)
        self._shown.pop(uri, None)
        self._partial.pop(uri, None)

    def cancel_all(self) -> None:
        for uri in list(self._inflight):
            self.supersede(uri)
        for uri in list(self._flights):
            self._abort_flight(uri)
        for uri in list(self._warming):
            self._cancel_warm(uri)

    # --- warm-up ------------------------------------------------------------------------------------------
    def warm(self, snap: Snapshot, offset: int, others: Sequence[Snapshot] = (), trees: Trees | None = None,
             snippets: Sequence[Snippet] = ()) -> bool:
        """Prefill, in the background, the prompt a keystroke at ``offset`` of ``snap`` would get, into the engine's
        cache for the document, so that the keystroke's own request has only its new tokens to run (a cold prompt:
        SmolLM2 on 2 cores 0.5-1.4 s for 350 tokens). False when nothing was started: ``warmOnCursor`` off, the
        engine not loaded, or a completion already in flight for the document (its request fills the cache)."""
        cfg = self._config()
        engine = self.host.engine
        uri = snap.uri
        if (not cfg.warm_on_cursor or engine is None or not cfg.cancel_stale_requests or uri in self._flights
                or any(not t.done() for t in self._inflight.get(uri, ()))):
            return False
        self._cancel_warm(uri)
        task = asyncio.get_running_loop().create_task(self._warm(engine, snap, offset, others, cfg, trees, snippets),
                                                      name=f"warm {uri}")
        self._warming[uri] = task
        self.stats.warmups += 1

        def ended(t: asyncio.Task) -> None:
            if self._warming.get(uri) is t:
                del self._warming[uri]

        task.add_done_callback(ended)
        return True

    async def _warm(self, engine, snap: Snapshot, offset: int, others: Sequence[Snapshot], cfg: ServerConfig,
                    trees: Trees | None, snippets: Sequence[Snippet]) -> None:
        plan = _plan(engine, snap, offset, others, cfg.settings(), trees, snippets)
        request = Request(f"{snap.uri}@{snap.version}#warm{next(_REQUEST_IDS)}", plan.prompt, max_new_tokens=0,
                          cache_key=snap.uri, heal=plan.heal)
        try:
            async with contextlib.aclosing(engine.generate(request)) as stream:
                async for _ in stream:
                    pass
        except asyncio.CancelledError:
            raise
        except Exception:                  # a warm-up that fails changes nothing; the keystroke's request reports
            log.debug("warm-up %s failed", request.request_id, exc_info=True)

    def _cancel_warm(self, uri: str) -> None:
        task = self._warming.pop(uri, None)
        if task is not None and not task.done():
            self.stats.warmups_cancelled += 1
            task.cancel()              # closes the engine stream: the engine keeps what it filled for the document

    def inflight(self) -> int:
        return sum(1 for ts in self._inflight.values() for t in ts if not t.done())

    # --- the request --------------------------------------------------------------------------------------
    async def complete(self, snap: Snapshot, offset: int, others: Sequence[Snapshot] = (),
                       trees: Trees | None = None, snippets: Sequence[Snippet] = (),
                       partial_ok: bool = False) -> Completion:
        """The completion at ``offset`` of ``snap``; raises CancelledError when superseded or cancelled.
        ``trees``: the connection's parse trees (``DocumentStore.trees``); ``snippets``: context from beyond the
        open file, as the context sources' cache holds it (``lsp/context_sources.py``); ``partial_ok``: the client
        asks again when an answer is partial (``partialAnswerMs``)."""
        cfg = self._config()
        t0 = time.perf_counter()
        self.stats.requests_received += 1
        task = asyncio.current_task()
        if cfg.cancel_stale_requests:
            self.supersede(snap.uri, keep=task)
        self._inflight.setdefault(snap.uri, set()).add(task)
        try:
            rest = type_through(self._shown.get(snap.uri), snap, offset) if cfg.type_through_cache else None
            if rest is not None:
                self.stats.served_from_cache += 1
                result = Completion(rest, offset, from_cache=True)
            elif not cfg.cancel_stale_requests:
                result = Completion(await self._run_to_end(snap, offset, others, cfg, trees, snippets), offset)
            else:                          # the bound counts from the message's arrival (waiting in the inbox too)
                arrived = ARRIVED.get()
                result = await self._from_flight(snap, offset, others, cfg, trees,
                                                 t0 if arrived is None else min(t0, arrived), snippets, partial_ok)
            if result.text:
                self.stats.completions_served += 1
            else:
                self.stats.empty_completions += 1
            self.stats.last_latency_ms = (time.perf_counter() - t0) * 1000
            self._observe("cache" if result.from_cache else "reused" if result.reused else
                          "served" if result.text else "empty", t0)
            return result
        except asyncio.CancelledError:
            self.stats.requests_cancelled += 1
            self._observe("cancelled", t0)
            raise
        except Exception as e:
            self.stats.errors += 1
            # refused: no engine, busy, or a request the engine refuses (e.g. a prompt over the model's context)
            self._observe("refused" if isinstance(e, (EngineUnavailable, RequestError)) else "error", t0)
            raise
        finally:
            tasks = self._inflight.get(snap.uri)
            if tasks is not None:
                tasks.discard(task)
                if not tasks:
                    del self._inflight[snap.uri]

    async def _from_flight(self, snap: Snapshot, offset: int, others: Sequence[Snapshot], cfg: ServerConfig,
                           trees: Trees | None, t0: float, snippets: Sequence[Snippet] = (),
                           partial_ok: bool = False) -> Completion:
        """Answer from the document's flight when the user typed what it writes; else debounce, start a new one.
        ``t0``: when the request came (``answerBoundMs`` and ``partialAnswerMs`` count from it)."""
        self.load.asked += 1
        # the text around the cursor, only for a client that gets partial answers (two copies of the document, on
        # every keystroke's path); partial once per text: the client's next request for the same text (it asks
        # again) waits for the rest
        around = (snap.text[:offset], snap.text[offset:]) if partial_ok else None
        partial_at = (t0 + cfg.partial_answer_ms / 1000
                      if around is not None and cfg.partial_answer_ms > 0 and self._partial.get(snap.uri) != around
                      else None)
        asked = self.load.asked            # alone past the bound only while no other completion has been asked for
        bound_s = cfg.answer_bound_ms / 1000 if cfg.answer_bound_ms else None
        # the "busy" answer's time: 80% of the bound, earlier when the event loop lags (Load.answer_by)
        deadline = None if bound_s is None else t0 + self.load.answer_by(bound_s)
        flight = self._flights.get(snap.uri)
        if flight is not None and cfg.reuse_in_flight:
            typed = flight.typed(snap.text, offset)
            if typed is not None:
                got = await self._wait(flight, typed, cfg, deadline, asked, partial_at)
                if got is not None:
                    self.stats.reuses += 1
                    return self._answer(snap.uri, around, got, offset, flight, reused=True)
        if flight is not None and self._flights.get(snap.uri) is flight:
            self.stats.flights_diverged += cfg.reuse_in_flight
            self._abort_flight(snap.uri)
        predicted = self.load.predicted_s()
        wait_ms = (self._rhythm.debounce_ms(cfg.debounce_ms, cfg.debounce_min_ms, cfg.debounce_max_ms,
                                            None if predicted is None else predicted * 1000)
                   if cfg.adaptive_debounce else cfg.debounce_ms)
        self.stats.debounce_ms = wait_ms
        self.stats.typing_interval_ms = self._rhythm.median_ms()
        if wait_ms > 0:
            await asyncio.sleep(wait_ms / 1000)
        predicted = self.load.predicted_s()
        self.stats.predicted_ms = None if predicted is None else predicted * 1000
        if bound_s is not None and self.load.running >= 2 and self.load.behind(bound_s):   # load to shed
            self.stats.refused_behind += 1
            raise Busy(f"server busy: it is {self.load.lag_s() * 1000:.0f} ms behind on its messages (over "
                       f"{Load.MAX_LAG_AT * cfg.answer_bound_ms:.0f} ms); the completion was not started (ask again)")
        if bound_s is not None and not self.load.admits(deadline - time.perf_counter()):
            self.stats.refused_busy += 1
            raise Busy(f"server busy: {self.load.running} completions are running and a new one would take about "
                       f"{predicted * 1000:.0f} ms, over answerBoundMs {cfg.answer_bound_ms:g}; not started "
                       f"(ask again)")
        flight, waited = await self._start(snap, offset, others, cfg, trees, snippets)
        got = await self._wait(flight, "", cfg, None if deadline is None else deadline + waited, asked,
                               None if partial_at is None else partial_at + waited)
        if got is None:                    # the engine aborted it (restart, close) or it failed
            if flight.gen.error is not None:
                raise flight.gen.error
            raise asyncio.CancelledError(f"engine aborted {flight.gen.request.request_id}")
        return self._answer(snap.uri, around, got, offset, flight)

    def _answer(self, uri: str, around: tuple[str, str] | None, got: tuple[str, bool], offset: int, flight: Flight,
                reused: bool = False) -> Completion:
        text, partial = got
        if partial:
            self._partial[uri] = around
        elif around is not None and self._partial.get(uri) == around:
            del self._partial[uri]
        return Completion(text, offset, reused=reused, early=not flight.gen.finished, partial=partial)

    async def _wait(self, flight: Flight, typed: str, cfg: ServerConfig, deadline: float | None = None,
                    asked: int | None = None, partial_at: float | None = None) -> tuple[str, bool] | None:
        """The ghost text ``flight`` has for the user's ``typed`` text and whether it is partial (what the model had
        written at ``partial_at``), waiting for more output as needed; None when it diverged, failed or was aborted.
        Cancelled while waiting, or past ``deadline`` (then :class:`Busy`): the flight is left to the next keystroke
        for a short grace (``reuseInFlight``), or aborted at once. Past the
        deadline the answer is waited for only while this flight is the only one running and no completion request
        has come to the process since ``asked`` (``Load.asked`` when this one came): then there is no load to shed.
        (Running flights alone were not enough: at 50 clients on a loaded machine, with new engine requests refused,
        one flight could run alone while the others' requests came and were refused, and its answer came after 2-9 s.)"""
        flight.waiters += 1
        alone = False
        try:
            while True:
                try:
                    # asyncio.timeout, not wait_for: Python 3.11's wait_for can swallow a cancellation that arrives
                    # as the awaited chunk does (the superseded request would then answer)
                    async with asyncio.timeout(None if deadline is None else max(0.0, deadline - time.perf_counter())):
                        return await self._follow(flight, typed, cfg, partial_at)
                except TimeoutError:
                    if self.load.running <= 1 and (asked is None or self.load.asked == asked):   # no load to shed
                        self.stats.bound_alone += not alone
                        alone = True
                        deadline = time.perf_counter() + self.ALONE_CHECK_S   # busy after all if others start
                        continue
                    raise
        except TimeoutError:
            self.stats.busy_at_bound += 1
            self.load.too_slow(time.perf_counter() - flight.gen.started, flight.concurrency)
            self._orphaned(flight, cfg)
            raise Busy(f"server busy: no answer within answerBoundMs {cfg.answer_bound_ms:g} "
                       f"({self.load.running} completions running; ask again)") from None
        except asyncio.CancelledError:
            self._orphaned(flight, cfg)
            raise
        finally:
            flight.waiters -= 1

    async def _follow(self, flight: Flight, typed: str, cfg: ServerConfig,
                      partial_at: float | None = None) -> tuple[str, bool] | None:
        """Wait on ``flight`` until it has the ghost text for the user's ``typed`` text, or until ``partial_at`` when
        it has some (then partial); None: it diverged."""
        while True:
            due = partial_at is not None and time.perf_counter() >= partial_at
            verdict, text = flight.follow(typed, cfg.early_answer, partial=due)
            if verdict in (ANSWER, PARTIAL):
                flight.answered += 1
                if not flight.gen.finished:
                    # the rest is written in the background, into the type-through cache (the flight is not
                    # aborted when this request ends: _orphaned)
                    flight.answered_early = True
                    if verdict == PARTIAL:
                        self.stats.partial_answers += 1
                    else:
                        self.stats.early_answers += 1
                return text, verdict == PARTIAL
            if verdict == DIVERGED:
                return None
            if partial_at is None or due:
                await flight.gen.changed()
                continue
            try:
                async with asyncio.timeout(max(0.0, partial_at - time.perf_counter())):
                    await flight.gen.changed()
            except TimeoutError:
                pass

    def _orphaned(self, flight: Flight, cfg: ServerConfig) -> None:
        uri = next((u for u, f in self._flights.items() if f is flight), None)
        if uri is None or flight.answered_early:
            return                          # already gone, or finishing a shown block in the background
        if not cfg.reuse_in_flight:
            self._abort_flight(uri)
            return
        answered = flight.answered

        def check() -> None:
            if self._flights.get(uri) is flight and flight.waiters == 0 and flight.answered == answered:
                self._abort_flight(uri)

        asyncio.get_running_loop().call_later(ORPHAN_GRACE_S, check)

    async def _start(self, snap: Snapshot, offset: int, others: Sequence[Snapshot], cfg: ServerConfig,
                     trees: Trees | None, snippets: Sequence[Snippet] = ()) -> tuple[Flight, float]:
        """A new flight, and the seconds spent waiting for the engine to load (not the engine's answer time)."""
        self._cancel_warm(snap.uri)        # before this request's engine request takes the document's cache
        t = time.perf_counter()
        engine = await self.host.get(cfg.engine_start_timeout_s)
        waited = time.perf_counter() - t
        settings = cfg.settings()
        plan = _plan(engine, snap, offset, others, settings, trees, snippets)
        gen = pipeline.Generation(engine, plan, f"{snap.uri}@{snap.version}#{next(_REQUEST_IDS)}", settings,
                                  cache_key=snap.uri)
        flight = Flight(gen, snap.text[:offset], snap.text[offset:])
        self._abort_flight(snap.uri)       # one flight per document: the bound on background work
        self._flights[snap.uri] = flight
        self.stats.engine_requests += 1
        concurrency = flight.concurrency = self.load.started()
        flight.task = asyncio.get_running_loop().create_task(self._fly(snap.uri, flight),
                                                             name=f"flight {gen.request.request_id}")

        def landed(_task: asyncio.Task) -> None:   # however it ended, even cancelled before it ever ran
            if gen.finished and gen.ended is not None:
                self.load.ended(gen.ended - gen.started, concurrency)
            else:                              # aborted (superseded, diverged) or failed before its end: its time
                self.load.ended(None, concurrency)     # is at least how long it ran
                self.load.too_slow(time.perf_counter() - gen.started, concurrency)

        flight.task.add_done_callback(landed)
        return flight, waited

    async def _fly(self, uri: str, flight: Flight) -> None:
        """Run the flight's engine request to its end; its full ghost text then feeds the type-through cache."""
        try:
            text = await self._timed(flight.gen)
        except asyncio.CancelledError:
            return
        except Exception:                  # reported to the requests waiting on it (gen.error)
            log.debug("engine request %s failed", flight.gen.request.request_id, exc_info=True)
            return
        finally:
            if self._flights.get(uri) is flight:
                del self._flights[uri]
        if flight.answered_early:
            self.stats.background_finished += 1
        if text and self._config().type_through_cache:
            self._shown[uri] = _Shown(flight.before, flight.after, text)

    def _abort_flight(self, uri: str) -> None:
        flight = self._flights.pop(uri, None)
        if flight is not None and flight.task is not None and not flight.task.done():
            self.stats.engine_aborts += 1
            flight.task.cancel()           # closes the engine stream: the one abort the engine sees

    async def _run_to_end(self, snap: Snapshot, offset: int, others: Sequence[Snapshot], cfg: ServerConfig,
                          trees: Trees | None, snippets: Sequence[Snippet] = ()) -> str:
        """``cancelStaleRequests: false``: this request's own engine request, to its end (naive server)."""
        self._cancel_warm(snap.uri)
        if cfg.debounce_ms > 0:
            await asyncio.sleep(cfg.debounce_ms / 1000)
        engine = await self.host.get(cfg.engine_start_timeout_s)
        settings = cfg.settings()
        plan = _plan(engine, snap, offset, others, settings, trees, snippets)
        gen = pipeline.Generation(engine, plan, f"{snap.uri}@{snap.version}#{next(_REQUEST_IDS)}", settings,
                                  cache_key=snap.uri)
        self.stats.engine_requests += 1
        try:
            return await self._timed(gen)
        finally:
            if gen.aborted:
                self.stats.engine_aborts += 1

    async def _timed(self, gen: pipeline.Generation) -> str:
        try:
            return await gen.run()
        finally:
            self.stats.last_engine_ms = ((gen.ended or time.perf_counter()) - gen.started) * 1000
            ttft, tpot = gen.ttft_s, gen.tpot_s
            if ttft is not None:
                self.stats.last_ttft_ms = ttft * 1000
            if tpot is not None:
                self.stats.last_tpot_ms = tpot * 1000
            if self.metrics is not None:
                self.metrics.generation(ttft, tpot)

    def _observe(self, outcome: str, t0: float) -> None:
        if self.metrics is not None:
            self.metrics.request(outcome, time.perf_counter() - t0)

    def snapshot_stats(self) -> dict:
        d = asdict(self.stats)
        d["inflight"] = self.inflight()
        d["flights"] = len(self._flights)
        d["flights_in_process"] = self.load.running     # every connection's (they share the engine)
        return d
