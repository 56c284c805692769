"""One sequence's decoding steps: ``prefill``, ``decode_one`` and ``speculative_step`` (gpt-fast style).

State between steps: ``tokens`` is the committed sequence (prompt + generated); the target cache holds
``tokens[:-1]`` (the last committed token is fed at the next step). Every step returns the new tokens to commit;
after it the target cache again holds all committed tokens but the last, so rejected drafts are rolled back with
``KVCache.truncate``. The draft cache is caught up lazily (``catch_up`` keeps its longest matching prefix).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from ..models.llama import KVCache, LlamaForCausalLM
from .sampling import Sampling
from .verify import verify_greedy, verify_sampling

# a proposer maps (committed tokens, k, sampling) to (draft tokens, q [k,V] or None for one-hot)
Proposer = Callable[[Sequence[int], int, Sampling], "tuple[list[int], torch.Tensor | None]"]


def common_prefix(cache: KVCache, tokens: Sequence[int]) -> int:
    """How many leading positions of ``cache`` equal ``tokens`` (at most ``len(tokens) - 1``: one token is always
    computed). Compares whole slices first (one C-level comparison per step in the common case that the cache
    holds every committed token, instead of a Python loop over the whole context per decode step)."""
    n = min(len(tokens) - 1, cache.length)
    cached = cache.tokens
    if cached[:n] == list(tokens[:n]):
        return n
    lo, hi = 0, n                                       # the first mismatch lies in [lo, hi)
    while hi - lo > 64:
        mid = (lo + hi) // 2
        if cached[lo:mid] == list(tokens[lo:mid]):
            lo = mid
        else:
            hi = mid
    while lo < hi and cached[lo] == tokens[lo]:
        lo += 1
    return lo


@torch.inference_mode()
def catch_up(model: LlamaForCausalLM, cache: KVCache, tokens: Sequence[int], n_vocab: int) -> tuple[torch.Tensor, int]:
    """Make ``cache`` hold ``tokens[:-1]`` plus the last token and return the logits [V] after ``tokens``.

    Keeps the longest prefix of the cache that equals ``tokens`` (at most ``len(tokens) - 1`` positions, so that at
    least one token is computed), drops the rest and runs the model on what is missing. Returns (logits, reused).
    """
    reused = common_prefix(cache, tokens)
    cache.truncate(reused)
    ids = torch.tensor([list(tokens[reused:])], dtype=torch.long, device=cache.device)
    logits = model(ids, cache=cache, last_only=True)[0, -1, :n_vocab]
    return logits, reused


@dataclass
class StepResult:
    tokens: list[int]        # tokens to commit: accepted drafts + one recovered/bonus token
    proposed: int = 0        # draft tokens proposed in this step
    accepted: int = 0        # of which accepted


def only(logits: torch.Tensor, allowed: Sequence[int] | None) -> torch.Tensor:
    """``logits`` with every token outside ``allowed`` at -inf (token healing's constrained steps); unchanged
    when ``allowed`` is None or empty."""
    if not allowed:
        return logits
    idx = torch.as_tensor(allowed, dtype=torch.long, device=logits.device)
    out = torch.full_like(logits, float("-inf"))
    out[..., idx] = logits[..., idx]
    return out


@torch.inference_mode()
def prefill(target: LlamaForCausalLM, cache: KVCache, prompt: Sequence[int], sampling: Sampling,
            n_vocab: int, allowed: Sequence[int] | None = None) -> tuple[int, int]:
    """Run the prompt (reusing the cache's longest common prefix); returns (first token, reused positions). With
    ``allowed`` the first token is one of those ids."""
    logits, reused = catch_up(target, cache, prompt, n_vocab)
    return sampling.sample(only(logits, allowed)), reused


@torch.inference_mode()
def decode_one(target: LlamaForCausalLM, cache: KVCache, tokens: Sequence[int], sampling: Sampling,
               n_vocab: int, allowed: Sequence[int] | None = None) -> StepResult:
    """Plain autoregressive step: feed the last committed token, sample the next (one of ``allowed`` if given)."""
    logits, _ = catch_up(target, cache, tokens, n_vocab)
    return StepResult([sampling.sample(only(logits, allowed))])


@torch.inference_mode()
def speculative_step(target: LlamaForCausalLM, cache: KVCache, tokens: Sequence[int], propose: Proposer,
                     k: int, sampling: Sampling, n_vocab: int) -> StepResult:
    """Propose up to k drafts, score them with ONE target forward, accept/reject, add the recovered/bonus token."""
    k = min(k, target.config.max_position_embeddings - len(tokens))
    drafts, q = propose(tokens, k, sampling) if k > 0 else ([], None)
    if not drafts:
        return decode_one(target, cache, tokens, sampling, n_vocab)
    base = len(tokens) - 1                                   # target positions kept before this step
    cache.truncate(base)
    assert cache.length == base, "target cache must hold the committed tokens but the last"
    ids = torch.tensor([[tokens[-1], *drafts]], dtype=torch.long, device=cache.device)
    logits = target(ids, cache=cache)[0, :, :n_vocab]        # [k+1, V]: position i scores drafts[i]
    if sampling.greedy:
        accepted, extra = verify_greedy(drafts, logits)
    else:
        accepted, extra = verify_sampling(drafts, sampling.probs(logits), q, sampling.generator)
    cache.truncate(base + 1 + accepted)                      # roll back the rejected drafts
    return StepResult([*drafts[:accepted], extra], proposed=len(drafts), accepted=accepted)
