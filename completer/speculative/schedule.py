"""How many tokens to draft per step: fixed, or adaptive (follows the observed acceptance).

Adaptive k grows by one after a draft that the target accepted completely and shrinks after a rejection (to one
more than the accepted prefix, and at least by one), always within ``1..max_k``. A fully accepted draft means the
proposer is on a predictable stretch (repeated code, boilerplate), so longer drafts pay; a rejection early in the
draft means extra draft tokens are wasted work.
"""

from __future__ import annotations


class FixedK:
    def __init__(self, k: int):
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        self.k = k

    def update(self, proposed: int, accepted: int) -> None:
        pass


class AdaptiveK:
    def __init__(self, max_k: int = 8, start: int = 4):
        if max_k < 1:
            raise ValueError(f"max_k must be >= 1, got {max_k}")
        self.max_k = max_k
        self.k = max(1, min(start, max_k))

    def update(self, proposed: int, accepted: int) -> None:
        """Record one verification: ``accepted`` of ``proposed`` draft tokens kept (proposed 0 = no draft)."""
        if proposed <= 0:
            return
        if accepted >= proposed:
            self.k = min(self.max_k, self.k + 1)
        else:
            self.k = max(1, min(self.k - 1, accepted + 1))


def make_schedule(num_speculative_tokens: int | str, max_speculative_tokens: int = 8) -> FixedK | AdaptiveK:
    if num_speculative_tokens == "adaptive":
        return AdaptiveK(max_speculative_tokens, start=min(4, max_speculative_tokens))
    return FixedK(int(num_speculative_tokens))


class BreakEven:
    """Whether speculation still pays for one request, from what it has delivered so far ("never slower than none").

    A speculative step costs ``k * c + v`` plain decode steps, where ``c`` is the proposer's cost per draft token
    relative to a target step (a draft model's forward over the target's; about 0 for n-gram lookup) and ``v``
    the target's (k+1)-token verification relative to its one-token step; it yields the accepted drafts plus one
    token. When the engine times its steps, the measured cost replaces the estimate: a step's seconds over the
    seconds of a plain decode step (``plain_step_s``), which also counts what the model costs leave out (the
    draft's own cache catch-up, Python per draft token). Over the last ``window`` speculative steps, when the
    tokens per step fall to or below the cost per step, plain decoding would have been at least as fast, so
    ``pays()`` turns False and the engine decodes the rest of the request without speculation. Nothing is decided
    before ``min_steps`` steps (one unlucky step is not a trend).
    """

    def __init__(self, c: float, v: float = 1.0, window: int = 8, min_steps: int = 4,
                 plain_step_s: float | None = None):
        if c < 0 or v <= 0:
            raise ValueError(f"need c >= 0 and v > 0, got c={c}, v={v}")
        self.c, self.v, self.window, self.min_steps = c, v, window, min_steps
        self.plain_step_s = plain_step_s
        self._steps: list[tuple[int, float]] = []         # (tokens, cost in plain steps) of recent speculative steps
        self.off = False

    def update(self, proposed: int, accepted: int, c: float | None = None, seconds: float | None = None) -> None:
        """Record one verification; ``c`` overrides the cost per draft token for this step (draft+n-gram mixes
        a free proposer with a model); ``seconds``, the step's measured time, replaces the estimate when the
        plain step's time is known."""
        if proposed <= 0 or self.off:
            return
        if seconds is not None and self.plain_step_s:
            # never below one plain step: the verification is a plain step with the drafts beside it, so a
            # measured ratio under 1 is noise in the plain step's estimate (a slow first step it still carries),
            # and a proposer that is never accepted (1 token per step) must not look as if it paid
            cost = max(1.0, seconds / self.plain_step_s)
        else:
            cost = proposed * (self.c if c is None else c) + self.v
        self._steps.append((accepted + 1, cost))
        del self._steps[:-self.window]
        if len(self._steps) >= self.min_steps and sum(t for t, _ in self._steps) <= sum(k for _, k in self._steps):
            self.off = True

    def pays(self) -> bool:
        return not self.off
