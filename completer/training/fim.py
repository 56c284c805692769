"""Fill-in-the-middle training samples (Bavarian et al. 2022, arXiv 2207.14255) and sequence packing.

A document chunk is cut into (prefix, middle, suffix) at character level and written in one of three orders:
- PSM: ``<|fim_prefix|>P<|fim_suffix|>S<|fim_middle|>M<|endoftext|>``
- SPM: ``<|fim_suffix|>S<|fim_prefix|>P<|fim_middle|>M<|endoftext|>`` (what the house prompt template uses: the
  suffix and the start of the prefix stay put while the user types, so consecutive prompts share a long prefix)
- plain left-to-right: ``text<|endoftext|>``
Middles mimic completions: half the time whole lines (a block after the cursor), else a span inside a line region
(finishing a line). Each piece is tokenized on its own, so no token straddles a cut.
"""

from __future__ import annotations

import random
from typing import Iterable, Iterator

import numpy as np
from tokenizers import Tokenizer

from ..models.tokenizer import EOS, FIM_MIDDLE, FIM_PREFIX, FIM_SUFFIX

MODES = (("psm", 0.5), ("spm", 0.4), ("plain", 0.1))
CHUNK_CHARS = 3000


def chunks(text: str, size: int = CHUNK_CHARS) -> Iterator[str]:
    """Split a file at line boundaries into pieces of about ``size`` characters."""
    start = 0
    while start < len(text):
        end = text.find("\n", start + size)
        end = len(text) if end < 0 else end + 1
        yield text[start:end]
        start = end


def split_fim(text: str, rng: random.Random) -> tuple[str, str, str]:
    """A random (prefix, middle, suffix) with prefix + middle + suffix == text."""
    n = len(text)
    if n < 2:
        return text, "", ""
    if rng.random() < 0.5:  # whole lines: a block completion
        starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n" and i + 1 < n]
        a = rng.randrange(len(starts))
        b = min(len(starts), a + 1 + int(rng.expovariate(1 / 3)))
        lo = starts[a]
        hi = starts[b] if b < len(starts) else n
    else:  # a span starting anywhere, usually short: finishing a line
        lo = rng.randrange(n)
        hi = min(n, lo + 1 + int(rng.expovariate(1 / 40)))
    return text[:lo], text[lo:hi], text[hi:]


def fim_pieces(text: str, rng: random.Random) -> list[str]:
    mode = rng.choices([m for m, _ in MODES], [w for _, w in MODES])[0]
    if mode == "plain":
        return [text, EOS]
    p, m, s = split_fim(text, rng)
    if mode == "psm":
        return [FIM_PREFIX, p, FIM_SUFFIX, s, FIM_MIDDLE, m, EOS]
    return [FIM_SUFFIX, s, FIM_PREFIX, p, FIM_MIDDLE, m, EOS]


def fim_ids(tok: Tokenizer, prefix_ids: list[int], suffix_ids: list[int], order: str = "spm") -> list[int]:
    """A FIM prompt as token ids from pieces each encoded on its own (no token straddles a cut), in the house order
    (``spm``: suffix, prefix, middle; ``completer.prompt``'s ``house`` template) or in Qwen's (``psm``)."""
    pre, suf, mid = (tok.token_to_id(t) for t in (FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE))
    if order == "psm":
        return [pre, *prefix_ids, suf, *suffix_ids, mid]
    if order != "spm":
        raise ValueError(f"order must be spm or psm, got {order!r}")
    return [suf, *suffix_ids, pre, *prefix_ids, mid]


def encode_samples(texts: Iterable[str], tok: Tokenizer, seed: int, batch: int = 2048,
                   names: dict[str, str] | None = None) -> np.ndarray:
    """One token stream (uint16) of FIM samples from every chunk of every text, EOS-separated.

    ``names`` maps the house FIM token names (``<|fim_prefix|>``...) to another tokenizer's tokens that play their
    part (e.g. SmolLM2's, which has no FIM tokens of its own: ``completer.prompt.FIM_TOKENS``)."""
    rng = random.Random(seed)
    names = names or {}
    special = {t: tok.token_to_id(names.get(t, t)) for t in (EOS, FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX)}
    missing = [names.get(t, t) for t, i in special.items() if i is None]
    if missing:
        raise ValueError(f"the tokenizer has no token {missing[0]!r}")
    out: list[np.ndarray] = []
    pending: list[list[str]] = []

    def flush() -> None:
        plain = [p for sample in pending for p in sample if p not in special]
        encoded = iter(tok.encode_batch(plain, add_special_tokens=False))
        ids: list[int] = []
        for sample in pending:
            for piece in sample:
                ids.extend([special[piece]] if piece in special else next(encoded).ids)
        out.append(np.asarray(ids, dtype=np.uint16))
        pending.clear()

    for text in texts:
        for chunk in chunks(text):
            pending.append(fim_pieces(chunk, rng))
            if len(pending) >= batch:
                flush()
    if pending:
        flush()
    return np.concatenate(out) if out else np.zeros(0, dtype=np.uint16)


def pack(stream: np.ndarray, seq_len: int) -> np.ndarray:
    """[N, seq_len + 1] windows (inputs are [:, :-1], targets [:, 1:])."""
    n = len(stream) // (seq_len + 1)
    return stream[: n * (seq_len + 1)].reshape(n, seq_len + 1)


PAD = -100          # a window's unused end after whole samples: no input token (read as the end token), no loss


def pack_samples(ids: np.ndarray, starts: np.ndarray, seq_len: int) -> np.ndarray:
    """[N, seq_len + 1] windows that each hold whole samples (``ids[starts[i]:starts[i + 1]]``), first fit in the
    samples' order, the rest of a window ``PAD`` (``inputs_targets`` reads it as no loss, and as the end token where
    it is an input); a sample longer than a window keeps its last ``seq_len + 1`` tokens."""
    bounds = list(starts) + [len(ids)]
    rows: list[np.ndarray] = []
    cur: list[np.ndarray] = []
    used = 0
    width = seq_len + 1
    for a, b in zip(bounds[:-1], bounds[1:]):
        s = ids[max(a, b - width):b].astype(np.int64)
        if used + len(s) > width and cur:
            rows.append(np.concatenate(cur + [np.full(width - used, PAD, dtype=np.int64)]))
            cur, used = [], 0
        cur.append(s)
        used += len(s)
    if cur:
        rows.append(np.concatenate(cur + [np.full(width - used, PAD, dtype=np.int64)]))
    return np.stack(rows) if rows else np.zeros((0, width), dtype=np.int64)


def inputs_targets(windows, pad_id: int):
    """(inputs, targets) of [N, seq_len + 1] windows: targets keep ``PAD`` (cross-entropy's ignore_index), inputs
    read it as ``pad_id``."""
    x, y = windows[:, :-1], windows[:, 1:]
    return x.masked_fill(x == PAD, pad_id), y
