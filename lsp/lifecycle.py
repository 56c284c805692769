"""The per-document request lifecycle shared by inline completion and ``textDocument/completion``.

For each document at most one completion is in flight (with ``cancelStaleRequests``, the default):
- a newer completion request, or an edit of the document, *supersedes* it: its asyncio task is cancelled, which
  aborts its engine request (``Engine.abort``, so the engine's ``requests_aborted`` rises) and makes pygls answer
  the stale LSP request with -32800 RequestCancelled; ``$/cancelRequest`` cancels the task the same way;
- before calling the engine, a short debounce (``debounceMs``) lets a burst of keystrokes collapse into one engine
  request; a request superseded during the debounce never reaches the engine;
- typing through ghost text: when the text before the cursor is the text the last completion was shown after plus
  a prefix of that completion, and the text after the cursor is unchanged, the rest of the completion is answered
  at once, with no debounce and no engine request.

With ``cancelStaleRequests: false`` every request runs to the end (as naive servers do), for benchmarks.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

from completer import pipeline
from completer.context import SourceFile
from completer.context.syntax import Trees

from .config import ServerConfig
from .documents import Snapshot
from .engine_host import EngineHost, EngineUnavailable

log = logging.getLogger(__name__)

# engine request ids are unique in the process: TCP/websocket connections share one engine
_REQUEST_IDS = itertools.count(1)


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


@dataclass(frozen=True)
class Completion:
    text: str             # ghost text to insert at the cursor
    offset: int           # cursor offset in the snapshot
    from_cache: bool = False


@dataclass(frozen=True)
class _Shown:
    before: str           # document text before the cursor when the completion was made
    after: str            # document text after the cursor then
    text: str             # the completion


def source(snap: Snapshot) -> SourceFile:
    """The pipeline's view of a document snapshot."""
    return SourceFile(uri=snap.uri, language_id=snap.language_id, text=snap.text)


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
    def __init__(self, host: EngineHost, config: Callable[[], ServerConfig], metrics=None):
        self.host = host
        self._config = config
        # lsp.metrics.Metrics when the operator asked for --metrics (one per process, like the engine host)
        self.metrics = metrics if metrics is not None else getattr(host, "metrics", None)
        self.stats = ServerStats()
        self._inflight: dict[str, set[asyncio.Task]] = {}
        self._shown: dict[str, _Shown] = {}

    # --- called by document sync and lifecycle events ---------------------------------------------------
    def supersede(self, uri: str, keep: asyncio.Task | None = None) -> int:
        """Cancel the completions in flight for ``uri`` (all but ``keep``); returns how many."""
        n = 0
        for task in list(self._inflight.get(uri, ())):
            if task is not keep and not task.done():
                task.cancel()
                n += 1
        self.stats.requests_superseded += n
        return n

    def document_changed(self, uri: str) -> None:
        if self._config().cancel_stale_requests:
            self.supersede(uri)

    def document_closed(self, uri: str) -> None:
        self.supersede(uri)
        self._shown.pop(uri, None)

    def cancel_all(self) -> None:
        for uri in list(self._inflight):
            self.supersede(uri)

    def inflight(self) -> int:
        return sum(1 for ts in self._inflight.values() for t in ts if not t.done())

    # --- the request --------------------------------------------------------------------------------------
    async def complete(self, snap: Snapshot, offset: int, others: Sequence[Snapshot] = (),
                       trees: Trees | None = None) -> Completion:
        """The completion at ``offset`` of ``snap``; raises CancelledError when superseded or cancelled.
        ``trees``: the connection's parse trees (``DocumentStore.trees``)."""
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
            else:
                if cfg.debounce_ms > 0:
                    await asyncio.sleep(cfg.debounce_ms / 1000)
                text = await self._generate(snap, offset, others, cfg, trees)
                result = Completion(text, offset)
                if text:
                    self._shown[snap.uri] = _Shown(snap.text[:offset], snap.text[offset:], text)
            if result.text:
                self.stats.completions_served += 1
            else:
                self.stats.empty_completions += 1
            self.stats.last_latency_ms = (time.perf_counter() - t0) * 1000
            self._observe("cache" if result.from_cache else "served" if result.text else "empty", t0)
            return result
        except asyncio.CancelledError:
            self.stats.requests_cancelled += 1
            self._observe("cancelled", t0)
            raise
        except Exception as e:
            self.stats.errors += 1
            self._observe("refused" if isinstance(e, EngineUnavailable) else "error", t0)
            raise
        finally:
            tasks = self._inflight.get(snap.uri)
            if tasks is not None:
                tasks.discard(task)
                if not tasks:
                    del self._inflight[snap.uri]

    async def _generate(self, snap: Snapshot, offset: int, others: Sequence[Snapshot], cfg: ServerConfig,
                        trees: Trees | None) -> str:
        engine = await self.host.get(cfg.engine_start_timeout_s)
        settings = cfg.settings()
        plan = pipeline.plan(source(snap), offset, engine, settings, [source(o) for o in others], trees)
        gen = pipeline.Generation(engine, plan, f"{snap.uri}@{snap.version}#{next(_REQUEST_IDS)}", settings,
                                  cache_key=snap.uri)
        self.stats.engine_requests += 1
        try:
            return await gen.run()
        finally:
            if gen.aborted:
                self.stats.engine_aborts += 1
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
        return d
