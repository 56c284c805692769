"""Cost measurement of the torch engine, which decides whether speculation pays (``speculative.BreakEven``): the time
of a plain decode step (a running estimate from the steps themselves) and, measured once on this machine, the cost
of a draft forward and of a verification relative to a one-token target forward."""

from __future__ import annotations

import time

import torch


class StepCosts:
    """A mixin: ``_plain_step_s`` (None until known), ``_plain_measured`` (it comes from a real decode step) and
    ``_spec_costs`` ((c, v), None until measured) are set in ``TorchEngine._init_state``."""

    _spec_costs: tuple[float, float] | None = None
    _plain_step_s: float | None = None
    _plain_measured: bool = False

    def _note_plain_step(self, seconds: float) -> None:
        """Running median-like estimate of a plain decode step's time (BreakEven's unit of cost): an exponential
        average that a single slow step (another process took the core) moves only a little."""
        s = self._plain_step_s if self._plain_measured else None
        self._plain_step_s = seconds if s is None else 0.9 * s + 0.1 * min(seconds, 3 * s)
        self._plain_measured = True

    @torch.inference_mode()
    def _speculation_costs(self) -> tuple[float, float]:
        """(c, v) for BreakEven, measured once on this machine: a draft forward over a target forward (one token
        at a few hundred cached positions), and a 5-token target forward (verification at k=4) over a 1-token one."""
        if self._spec_costs is None:
            import statistics

            def timed(model, cache, n, ids):
                ts = []
                for _ in range(7):
                    cache.truncate(len(ids))
                    t0 = time.perf_counter()
                    model(torch.tensor([[ids[-1]] * n], device=self.device), cache=cache, last_only=True)
                    ts.append(time.perf_counter() - t0)
                return statistics.median(ts)

            n = max(8, min(256, self.target.config.max_position_embeddings - 16))
            ids = [i % self.n_vocab for i in range(n)]
            cache = self.target.new_cache(len(ids) + 8)
            self.target(torch.tensor([ids], device=self.device), cache=cache, last_only=True)
            t1, t5 = timed(self.target, cache, 1, ids), timed(self.target, cache, 5, ids)
            c = 0.0
            if self.draft is not None:
                dcache = self.draft.new_cache(len(ids) + 8)
                self.draft(torch.tensor([ids], device=self.device), cache=dcache, last_only=True)
                c = timed(self.draft, dcache, 1, ids) / t1
            self._spec_costs = (c, max(1.0, t5 / t1))
            if self._plain_step_s is None:
                self._plain_step_s = t1                        # until plain steps are measured: the forward alone
        return self._spec_costs
