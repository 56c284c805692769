"""The engine behind the server: built in the background after ``initialize``, rebuilt when its settings change.

Loading model weights takes seconds, so ``initialize`` answers at once and :meth:`EngineHost.get` makes early
completion requests wait for the engine (up to ``engineStartTimeoutS``), or fail with the load error.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from completer.engine import Engine, EngineConfig, create_engine

log = logging.getLogger(__name__)


class EngineUnavailable(RuntimeError):
    """The engine failed to start, or did not start in time; the message says which and why."""


class EngineHost:
    def __init__(self, factory: Callable[[EngineConfig], Engine] = create_engine):
        self._factory = factory
        self._task: asyncio.Task | None = None
        self.config: EngineConfig | None = None
        self.engine: Engine | None = None
        self.error: str | None = None
        self.metrics = None   # lsp.metrics.Metrics with --metrics: per process like this host, so every connection's
                              # lifecycle reports to it

    @property
    def ready(self) -> bool:
        return self.engine is not None

    def start(self, config: EngineConfig) -> None:
        """Start building the engine for ``config`` (the previous one is closed). Same config again: nothing to do
        (every connection of a TCP/websocket server asks for the shared engine in its ``initialize``)."""
        if config == self.config and self._task is not None and self.error is None:
            return
        old_task, old_engine = self._task, self.engine
        self.config, self.engine, self.error = config, None, None
        self._task = asyncio.get_running_loop().create_task(self._build(config, old_task, old_engine))

    async def _build(self, config: EngineConfig, old_task: asyncio.Task | None, old_engine: Engine | None) -> None:
        # an older build still loading finishes on its own and closes its engine (its config is no longer current)
        if old_engine is not None:
            await _close_quietly(old_engine)
        try:
            engine = await asyncio.to_thread(self._factory, config)
        except Exception as e:  # the message goes to the user
            log.exception("engine failed to start")
            if self.config is config:
                self.error = f"engine failed to start ({config.backend}, model {config.model!r}): {e}"
            return
        if self.config is config:
            self.engine = engine
            log.info("engine ready: %s", getattr(engine, "name", type(engine).__name__))
        else:  # settings changed while loading
            await _close_quietly(engine)

    async def get(self, timeout: float) -> Engine:
        if self.engine is not None:
            return self.engine
        if self._task is None:
            raise EngineUnavailable("engine not started: the client has not sent initialize")
        task = self._task
        if not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout)
            except asyncio.TimeoutError:
                raise EngineUnavailable(f"engine still loading after {timeout:g} s (engineStartTimeoutS)") from None
        if self.engine is not None:
            return self.engine
        if self._task is not task:  # restarted meanwhile
            return await self.get(timeout)
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


async def _close_quietly(engine: Engine) -> None:
    try:
        await engine.close()
    except Exception:
        log.exception("closing the engine failed")
