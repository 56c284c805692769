"""Turning logits into the next token: greedy, or temperature + top-p with a per-request generator."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Sampling:
    temperature: float = 0.0                 # 0 = greedy (argmax)
    top_p: float = 1.0
    generator: torch.Generator | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """logits [..., V] -> probabilities [..., V] after temperature and top-p (float32)."""
        x = logits.float() / max(self.temperature, 1e-6)
        if self.top_p < 1.0:
            sorted_x, idx = torch.sort(x, dim=-1, descending=True)
            cum = torch.softmax(sorted_x, dim=-1).cumsum(dim=-1)
            drop = cum - torch.softmax(sorted_x, dim=-1) >= self.top_p   # keep the smallest set reaching top_p
            sorted_x = sorted_x.masked_fill(drop, float("-inf"))
            x = torch.full_like(x, float("-inf")).scatter(-1, idx, sorted_x)
        return torch.softmax(x, dim=-1)

    def sample(self, logits: torch.Tensor) -> int:
        """logits [V] -> one token id."""
        if self.greedy:
            return int(logits.argmax())
        return int(torch.multinomial(self.probs(logits), 1, generator=self.generator))
