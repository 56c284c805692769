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
