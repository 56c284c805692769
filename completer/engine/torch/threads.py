"""How many CPU threads each kind of model step gets, chosen by measuring them while serving.

Why measured and per phase: a prompt of hundreds of tokens is a large matrix product that two cores finish
faster than one, while a one-token decode step of a small model is a few hundred tiny kernels whose cost is
memory and dispatch; splitting them over threads adds a fork/join per kernel, and when another process holds the
second core (an editor, a build, other users of a shared box) each join waits for the scheduler, which made the
2-thread decode 2-10x *slower* than 1 thread here. Which wins depends on the machine and on its load at the time,
so the engine measures: each phase ("prompt": forwards over many new tokens, per token; "step": a one-token
decode step; "spec": a speculative step, per forward position it runs) tries every candidate thread count, then
uses the fastest by a running average and re-tries the others now and then, less often each time they lose, so a
change of load is noticed without paying for it on every step. More cores can then never make a phase slower than
one core does.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass

import torch

PHASES = ("prompt", "step", "spec")


@dataclass
class _Arm:
    mean: float = 0.0          # seconds per unit (exponential moving average)
    count: int = 0


class ThreadChooser:
    """Per phase, the thread count with the lowest measured time per unit of work among ``candidates``."""

    def __init__(self, max_threads: int, adaptive: bool = True, alpha: float = 0.2, first_gap: int = 8,
                 max_gap: int = 512):
        if max_threads < 1:
            raise ValueError(f"threads must be >= 1, got {max_threads}")
        self.candidates = sorted({1, max_threads}) if adaptive else [max_threads]
        self.alpha, self.first_gap, self.max_gap = alpha, first_gap, max_gap
        self._arms = {p: {n: _Arm() for n in self.candidates} for p in PHASES}
        self._gap = {p: first_gap for p in PHASES}          # steps between re-tries of a losing count
        self._since = {p: 0 for p in PHASES}

    def best(self, phase: str) -> int:
        arms = self._arms[phase]
        return min(self.candidates, key=lambda n: (arms[n].mean if arms[n].count else float("inf"), n))

    def pick(self, phase: str) -> int:
        arms = self._arms[phase]
        for n in self.candidates:                           # every candidate measured twice before choosing
            if arms[n].count < 2:
                return n
        best = self.best(phase)
        self._since[phase] += 1
        if len(self.candidates) > 1 and self._since[phase] >= self._gap[phase]:
            self._since[phase] = 0
            others = [n for n in self.candidates if n != best]
            return min(others, key=lambda n: arms[n].count)   # re-try the least measured loser
        return best

    def record(self, phase: str, threads: int, seconds: float, units: int = 1) -> None:
        arm = self._arms[phase][threads]
        per = seconds / max(1, units)
        was_best = self.best(phase)
        arm.mean = per if arm.count == 0 else (1 - self.alpha) * arm.mean + self.alpha * per
        arm.count += 1
        if threads != was_best and arm.count > 2:           # a re-try: back off if it still loses
            if self.best(phase) == was_best:
                self._gap[phase] = min(self.max_gap, self._gap[phase] * 2)
            else:
                self._gap[phase] = self.first_gap

    @contextmanager
    def run(self, phase: str, units: int = 1):
        """Run a model step of ``phase`` with the chosen thread count and record its time; yields a dict whose
        "units" the caller may correct after the step (a prompt learns how many tokens it reused)."""
        n = self.pick(phase)
        if torch.get_num_threads() != n:
            torch.set_num_threads(n)
        box = {"units": units, "threads": n}
        t0 = time.perf_counter()
        yield box
        self.record(phase, n, time.perf_counter() - t0, box["units"])

    def snapshot(self) -> dict:
        return {p: {"chosen": self.best(p), **{f"{n}_threads_ms": round(a.mean * 1e3, 3) if a.count else None
                                              for n, a in arms.items()}}
                for p, arms in self._arms.items()}
