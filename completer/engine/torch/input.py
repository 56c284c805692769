"""Input processing of the torch engine: a request's prompt as token ids (checked against the model's vocabulary and
positions), the ids that end a generation, and the state a request runs with (``Running``)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

from ...prompt import ALL_END_TOKENS
from ...speculative import BreakEven, Sampling
from ..base import Request, check_prompt
from .caches import Caches


@dataclass
class Running:
    """One request as the scheduler runs it: its tokens so far, its caches, sampling and speculation state, and
    what has been streamed."""
    request: Request
    queue: asyncio.Queue
    prompt: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)        # prompt + generated (committed)
    generated: list[int] = field(default_factory=list)
    caches: Caches | None = None
    sampling: Sampling | None = None
    schedule: object = None
    emitted: int = 0                                        # characters of output text already streamed
    pending_ids: list[int] = field(default_factory=list)    # token ids not yet sent (their text is held back)
    payoff: BreakEven | None = None                        # whether speculation still pays (never slower than none)
    draft_c: float = 0.0                                    # cost per draft token of the current step
    aborted: bool = False
    done: bool = False
    heal_left: str = ""                                     # token healing: characters still to re-type
    reused: int = 0                                         # prompt positions the document's cache already held


class InputProcessing:
    """TorchEngine's input side (a mixin: it reads the engine's tokenizer, model and limits)."""

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=True).ids

    def _stop_ids(self) -> set[int]:
        ids = set()
        for t in ALL_END_TOKENS:
            i = self.tokenizer.token_to_id(t)
            if i is not None:
                ids.add(i)
        eos = json.loads((self.model_path / "config.json").read_text()).get("eos_token_id")
        ids.update([eos] if isinstance(eos, int) else (eos or []))
        return ids

    def _prompt_ids(self, request: Request) -> list[int]:
        ids = self.encode(request.prompt) if isinstance(request.prompt, str) else list(request.prompt)
        check_prompt(ids, n_vocab=self.n_vocab, positions=self.target.config.max_position_embeddings)
        return ids
