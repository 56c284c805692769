"""The engine behind the server: built in the background after ``initialize``, rebuilt when its settings change.

Loading model weights takes seconds (the embedded engine: 0.2-2 s; vLLM's cold start: 50-120 s), so ``initialize``
answers at once and :meth:`EngineHost.get` makes an early completion request wait for the engine at most
``loading_wait_s`` (``completer-lsp --engine-loading-wait S``, default 10 s: the embedded engine is usually there by
then, so a first keystroke still gets its answer). Past that the request gets an honest "engine loading" error
(:class:`EngineLoading`: backend, model, seconds so far) instead of a wait as long as the start. A start still running
after ``engineStartTimeoutS`` (default 300 s, above a vLLM cold start) is reported as failed to start; should it
finish later, the engine is used all the same. A start that fails gives its error to every request.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Callable

from completer import pipeline
from completer.engine import Engine, EngineConfig, create_engine

log = logging.getLogger(__name__)


LOADING_WAIT_S = 10.0


class EngineUnavailable(RuntimeError):
    """The engine failed to start, or did not start in time; the message says which and why."""


class EngineLoading(EngineUnavailable):
    """The engine is still starting: try again (the message says for how long it has been loading)."""


class EngineHost:
    def __init__(self, factory: Callable[[EngineConfig], Engine] = create_engine,
                 loading_wait_s: float = LOADING_WAIT_S):
        self._factory = factory
        self.loading_wait_s = loading_wait_s    # how long a request waits for an engine that is starting
        self._task: asyncio.Task | None = None
        self._started_at = 0.0                  # time.monotonic() when the current build began
        self.config: EngineConfig | None = None
        self.engine: Engine | None = None
        self.error: str | None = None
        self.metrics = None   # lsp.metrics.Metrics with --metrics: per process like this host, so every connection's
                              # lifecycle reports to it

    @property
    def ready(self) -> bool:
        return self.engine is not None

    @property
    def loading_s(self) -> float | None:
        """Seconds the current engine start has been running, or None when no start is running."""
        if self._task is None or self._task.done() or self.engine is not None:
            return None
        return time.monotonic() - self._started_at

    def start(self, config: EngineConfig) -> None:
        """Start building the engine for ``config`` (the previous one is closed). Same config again: nothing to do
        (every connection of a TCP/websocket server asks for the shared engine in its ``initialize``)."""
        if config == self.config and self._task is not None and (self.error is None or not self._task.done()):
            return                        # (a start past engineStartTimeoutS keeps running: not a second one)
        old_task, old_engine = self._task, self.engine
        self.config, self.engine, self.error = config, None, None
        self._started_at = time.monotonic()
        self._task = asyncio.get_running_loop().create_task(self._build(config, old_task, old_engine))

    async def _build(self, config: EngineConfig, old_task: asyncio.Task | None, old_engine: Engine | None) -> None:
        # an older build still loading finishes on its own and closes its engine (its config is no longer current)
        if old_engine is not None:
            await _close_quietly(old_engine)
        try:
            engine = await _in_daemon_thread(_build_prepared, self._factory, config)
        except Exception as e:  # the message goes to the user
            log.exception("engine failed to start")
            if self.config is config:
                self.error = f"engine failed to start ({config.backend}, model {config.model!r}): {e}"
            return
        if self.config is config:
            self.engine, self.error = engine, None   # a start reported late (engineStartTimeoutS) is used all the same
            log.info("engine ready: %s (%.1f s)", getattr(engine, "name", type(engine).__name__),
                     time.monotonic() - self._started_at)
        else:  # settings changed while loading
            await _close_quietly(engine)

    async def get(self, start_timeout: float) -> Engine:
        """The engine; while it starts, wait at most ``loading_wait_s`` and then raise :class:`EngineLoading`;
        a start running longer than ``start_timeout`` (engineStartTimeoutS) or one that failed: EngineUnavailable."""
        if self.engine is not None:
            return self.engine
        if self._task is None:
            raise EngineUnavailable("engine not started: the client has not sent initialize")
        task = self._task
        if not task.done():
            left = start_timeout - (time.monotonic() - self._started_at)
            if left > 0:
                try:
                    await asyncio.wait_for(asyncio.shield(task), min(self.loading_wait_s, left))
                except asyncio.TimeoutError:
                    pass
            if not task.done():
                elapsed = time.monotonic() - self._started_at
                what = f"{self.config.backend}, model {self.config.model!r}" if self.config else "engine"
                if elapsed < start_timeout:
                    raise EngineLoading(f"engine loading ({what}): {elapsed:.0f} s so far; completions start when "
                                        f"it is ready") from None
                self.error = (f"engine did not start within {start_timeout:g} s (engineStartTimeoutS; {what}, "
                              f"still loading after {elapsed:.0f} s)")
                log.error("%s", self.error)
                raise EngineUnavailable(self.error)
        if self.engine is not None:
            return self.engine
        if self._task is not task:  # restarted meanwhile
            return await self.get(start_timeout)
        raise EngineUnavailable(self.error or "engine failed to start")

    async def close(self) -> None:
        task, engine = self._task, self.engine
        self._task, self.engine = None, None
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except BaseException:
                pass
        if engine is not None:
            await _close_quietly(engine)


async def _in_daemon_thread(fn, *args):
    """``fn(*args)`` in a thread of its own that does not hold the process up: with ``asyncio.to_thread`` a SIGTERM
    during a model load waited in asyncio's shutdown for the loader thread to finish (``kill PID`` took 3-17 s)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future = loop.create_future()

    def settle(result, error) -> None:
        if not done.cancelled():
            done.set_exception(error) if error is not None else done.set_result(result)

    def run() -> None:
        try:
            result, error = fn(*args), None
        except BaseException as e:      # given to the awaiting task
            result, error = None, e
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:            # the loop has closed: the server is ending
            pass

    threading.Thread(target=run, name="engine-start", daemon=True).start()
    return await done


def _build_prepared(factory: Callable[[EngineConfig], Engine], config: EngineConfig) -> Engine:
    """The engine, with what the first keystroke's plan would compute once computed now (``pipeline.prepare``)."""
    return pipeline.prepare(factory(config))


async def _close_quietly(engine: Engine) -> None:
    try:
        await engine.close()
    except Exception:
        log.exception("closing the engine failed")
