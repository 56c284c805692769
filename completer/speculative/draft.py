"""The draft-model proposer: a small model with its own KV cache guesses the next k tokens."""

from __future__ import annotations

from typing import Sequence

import torch

from ..models.llama import KVCache, LlamaForCausalLM
from .decode import catch_up, common_prefix
from .sampling import Sampling


class DraftProposer:
    """Proposes k tokens with ``model`` (greedily or by sampling) and returns the draft probabilities q."""

    def __init__(self, model: LlamaForCausalLM, n_vocab: int):
        self.model, self.n_vocab = model, n_vocab

    @staticmethod
    def _draw(logits: torch.Tensor, sampling: Sampling, qs: list[torch.Tensor]) -> int:
        """One draft token from ``logits``: the argmax when greedy, else a draw from q (appended to ``qs``)."""
        if sampling.greedy:
            return int(logits.argmax())
        q = sampling.probs(logits)
        qs.append(q)
        return int(torch.multinomial(q, 1, generator=sampling.generator))

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
            drafts.append(self._draw(logits, sampling, qs))
            if i + 1 < k:                                    # the last draft token need not be run through
                ids = torch.tensor([[drafts[-1]]], dtype=torch.long, device=cache.device)
                logits = self.model(ids, cache=cache, last_only=True)[0, -1, :self.n_vocab]
        return drafts, (torch.stack(qs) if qs else None)

    @torch.inference_mode()
    def propose_batch(self, caches: list[KVCache], seqs: list[Sequence[int]], ks: list[int],
                      samplings: list[Sampling]) -> list[tuple[list[int], torch.Tensor | None]]:
        """``propose`` for several requests at once, each with its own cache, k and sampling: the catch-ups of a
        few tokens (what the last verification committed) run in one forward, then each draft position of every
        request still drafting in one forward (``LlamaForCausalLM.forward_packed``), so a step of n requests reads
        the draft's weights k times instead of n*k. A catch-up too long for a small step (a new request's prompt)
        runs alone, as ``propose`` runs it. Each request gets the drafts (and q) ``propose`` gives it alone."""
        n, maxpos = len(seqs), self.model.config.max_position_embeddings
        ks = [max(0, min(k, maxpos - len(t))) for k, t in zip(ks, seqs)]
        logits: list[torch.Tensor | None] = [None] * n
        short = []
        for i in range(n):
            if ks[i] <= 0:
                continue
            reused = common_prefix(caches[i], seqs[i])
            if len(seqs[i]) - reused > self.model.packed_max_tokens:
                logits[i], _ = catch_up(self.model, caches[i], seqs[i], self.n_vocab)
            else:
                caches[i].truncate(reused)
                short.append((i, list(seqs[i][reused:])))
        if short:
            out = self.model.forward_packed([s for _, s in short], [caches[i] for i, _ in short], last_only=True)
            for (i, _), lg in zip(short, out):
                logits[i] = lg[-1, :self.n_vocab]
        drafts: list[list[int]] = [[] for _ in range(n)]
        qs: list[list[torch.Tensor]] = [[] for _ in range(n)]
        for j in range(max(ks, default=0)):
            for i in range(n):
                if j < ks[i]:
                    drafts[i].append(self._draw(logits[i], samplings[i], qs[i]))
            rows = [i for i in range(n) if j + 1 < ks[i]]     # the last draft token need not be run through
            if rows:
                out = self.model.forward_packed([[drafts[i][-1]] for i in rows], [caches[i] for i in rows],
                                                last_only=True)
                for i, lg in zip(rows, out):
                    logits[i] = lg[-1, :self.n_vocab]
        return [(d, torch.stack(q) if q else None) for d, q in zip(drafts, qs)]
