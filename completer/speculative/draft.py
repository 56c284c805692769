"""The draft-model proposer: a small model with its own KV cache guesses the next k tokens."""

from __future__ import annotations

from typing import Sequence

import torch

from ..models.llama import KVCache, LlamaForCausalLM
from .decode import catch_up
from .sampling import Sampling


class DraftProposer:
    """Proposes k tokens with ``model`` (greedily or by sampling) and returns the draft probabilities q."""

    def __init__(self, model: LlamaForCausalLM, n_vocab: int):
        self.model, self.n_vocab = model, n_vocab

    @torch.inference_mode()
    def propose(self, cache: KVCache, tokens: Sequence[int], k: int,
                sampling: Sampling) -> tuple[list[int], torch.Tensor | None]:
        """Draft k tokens after ``tokens``; q is [k, V] (None when greedy: q is one-hot on the drafts)."""
        if len(tokens) + k > self.model.config.max_position_embeddings:
            k = self.model.config.max_position_embeddings - len(tokens)
        if k <= 0:
            return [], None
        logits, _ = catch_up(self.model, cache, tokens, self.n_vocab)
        drafts: list[int] = []
        qs: list[torch.Tensor] = []
        for i in range(k):
            if sampling.greedy:
                drafts.append(int(logits.argmax()))
            else:
                q = sampling.probs(logits)
                qs.append(q)
                drafts.append(int(torch.multinomial(q, 1, generator=sampling.generator)))
            if i + 1 < k:                                    # the last draft token need not be run through
                ids = torch.tensor([[drafts[-1]]], dtype=torch.long, device=cache.device)
                logits = self.model(ids, cache=cache, last_only=True)[0, -1, :self.n_vocab]
        return drafts, (torch.stack(qs) if qs else None)
