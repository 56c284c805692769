"""How many CPU threads each kind of model step gets, chosen by measuring them while serving.

Why measured and per phase: a prompt of hundreds of tokens is a large matrix product that two cores finish
faster than one, while a one-token decode step of a small model is a few hundred tiny kernels whose cost is
memory and dispatch; splitting them over threads adds a fork/join per kernel, and when another process holds the
second core (an editor, a build, other users of a shared box) each join waits for the scheduler, which made the
2-thread decode 2-10x *slower* than 1 thread here. Which wins depends on the machine and on its load at the time,
so the engine measures: each phase ("prompt": forwards over many new tokens, per token; "step": a one-token
decode step; "spec": a speculative step, per forward position it runs) tries every candidate thread count, then
uses the fastest by the median of its recent samples and re-tries the others now and then, less often each time
they lose (but at least every ``max_gap`` steps), so a change of load is noticed without paying for it on every step.
The prompt phase tries the most threads first: its first samples are a document's cold prompt, hundreds of tokens
of matrix products, which one thread took 1.0-1.4 s of SmolLM2 where two took 0.56 s (issue 29: the first keystrokes
of every document waited for it); the one-token phases try one thread first.
A median, not an average: on a shared machine a few steps that waited for the scheduler (another process took the
core) would otherwise make a count look slow for hundreds of steps (an exponential average kept SmolLM2's decode on
one thread for ~600 steps, at 1.5x the time of two: issue 29). More cores can then never make a phase slower than
one core does.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

PHASES = ("prompt", "step", "spec")


WINDOW = 9                     # recent samples per thread count whose median is its estimate


@dataclass
class _Arm:
    samples: deque = field(default_factory=lambda: deque(maxlen=WINDOW))   # seconds per unit, latest last
    count: int = 0

    @property
    def mean(self) -> float:
        """The estimate: the median of the recent samples (robust to a few slow ones)."""
        return statistics.median(self.samples) if self.samples else 0.0


class ThreadChooser:
    """Per phase, the thread count with the lowest measured time per unit of work among ``candidates``."""

    def __init__(self, max_threads: int, adaptive: bool = True, first_gap: int = 8, max_gap: int = 64):
        if max_threads < 1:
            raise ValueError(f"threads must be >= 1, got {max_threads}")
        self.candidates = sorted({1, max_threads}) if adaptive else [max_threads]
        self.first_gap, self.max_gap = first_gap, max_gap
        self._arms = {p: {n: _Arm() for n in self.candidates} for p in PHASES}
        self._gap = {p: first_gap for p in PHASES}          # steps between re-tries of a losing count
        self._since = {p: 0 for p in PHASES}

    def best(self, phase: str) -> int:
        arms = self._arms[phase]
        return min(self.candidates, key=lambda n: (arms[n].mean if arms[n].count else float("inf"), n))

    def pick(self, phase: str) -> int:
        n, retry = self._next(phase)
        if n is None:
            best = self.best(phase)
            self._since[phase] += 1
            if retry:
                self._since[phase] = 0
                arms = self._arms[phase]
                return min((c for c in self.candidates if c != best), key=lambda c: arms[c].count)
            return best
        return n

    def _next(self, phase: str) -> tuple[int | None, bool]:
        """(a candidate still measured for the first times, or None; whether the next pick re-tries a loser)."""
        arms = self._arms[phase]
        for n in self._order(phase):                        # every candidate measured twice before choosing
            if arms[n].count < 2:
                return n, False
        return None, len(self.candidates) > 1 and self._since[phase] + 1 >= self._gap[phase]

    def _order(self, phase: str) -> list[int]:
        """The order in which ``phase`` measures the candidates first: the most threads first for a prompt."""
        return list(reversed(self.candidates)) if phase == "prompt" else self.candidates

    def trial(self, phase: str) -> bool:
        """Whether the next pick of ``phase`` measures a count that is not the one it would use now: a later
        candidate's first samples, or a re-try of a loser. The prompt phase runs such a step on a short chunk
        (``scheduling._prefill_step``): one thread's first samples had cost a cold SmolLM2 prompt two full chunks
        at ~1.6x the time (issue 29)."""
        n, retry = self._next(phase)
        if n is None:
            return retry
        return n != self._order(phase)[0]

    def record(self, phase: str, threads: int, seconds: float, units: int = 1) -> None:
        arm = self._arms[phase][threads]
        per = seconds / max(1, units)
        was_best = self.best(phase)
        arm.samples.append(per)
        arm.count += 1
        if threads != was_best and arm.count > 2:           # a re-try: back off if it still loses
            if self.best(phase) != was_best:
                self._gap[phase] = self.first_gap
            elif per < self._arms[phase][was_best].mean:    # this sample beat the best: measure it again soon
                self._gap[phase] = 1
            else:
                self._gap[phase] = min(self.max_gap, self._gap[phase] * 2)

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
