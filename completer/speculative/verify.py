"""Accepting draft tokens: greedy matching and rejection sampling (arXiv 2211.17192 / 2302.01318).

Inputs are the k draft tokens, the target's distributions ``p`` at the k+1 positions (position i scores draft
token i; position k is the bonus position after the last draft token) and, for sampling, the draft's
distributions ``q`` at the k positions (``None`` for a deterministic proposer such as n-gram: q is one-hot).
Both return ``(accepted, token)``: the number of draft tokens kept and the one token the target adds after them
(the *recovered* token on a rejection, the *bonus* token when all were accepted). With sampling, the output
follows exactly the target's distribution ``p``, whatever ``q`` is.
"""

from __future__ import annotations

from typing import Sequence

import torch


def verify_greedy(draft: Sequence[int], target_logits: torch.Tensor) -> tuple[int, int]:
    """target_logits [k+1, V]: keep the longest draft prefix equal to the target's argmax, then its next argmax."""
    best = target_logits.argmax(dim=-1).tolist()
    a = 0
    while a < len(draft) and draft[a] == best[a]:
        a += 1
    return a, best[a]


def verify_sampling(draft: Sequence[int], p: torch.Tensor, q: torch.Tensor | None,
                    generator: torch.Generator | None = None) -> tuple[int, int]:
    """p [k+1, V] target probabilities, q [k, V] draft probabilities (None = one-hot on the draft tokens)."""
    k = len(draft)
    p = p.float()
    u = torch.rand(k, generator=generator, device=p.device).tolist() if k else []
    for i, x in enumerate(draft):
        px = float(p[i, x])
        qx = float(q[i, x]) if q is not None else 1.0
        if qx > 0 and u[i] < min(1.0, px / qx):
            continue                                             # accepted with probability min(1, p/q)
        if q is not None:
            residual = torch.clamp(p[i] - q[i].float(), min=0.0)
        else:
            residual = p[i].clone()
            residual[x] = 0.0                                    # max(0, p - onehot(x))
        total = float(residual.sum())
        if total <= 0.0:                                         # p == q numerically: any rejection is p itself
            residual, total = p[i], float(p[i].sum())
        token = int(torch.multinomial(residual / total, 1, generator=generator))
        return i, token
    return k, int(torch.multinomial(p[k], 1, generator=generator))
