"""Prompt-lookup (n-gram) drafting: code repeats its own identifiers, so the tokens that followed the last
occurrence of the current suffix are a free guess at what comes next (no model needed).

Pure function over token ids, as vLLM's ``ngram_proposer.py``: find the longest suffix n-gram
(``ngram_min <= n <= ngram_max``) that occurred earlier in the sequence and propose up to ``k`` tokens that
followed its most recent earlier occurrence.
"""

from __future__ import annotations

from typing import Sequence


def propose_ngram(tokens: Sequence[int], k: int, ngram_min: int = 2, ngram_max: int = 4) -> list[int]:
    """Up to ``k`` draft tokens, or ``[]`` when no suffix n-gram occurred earlier."""
    if k < 1:
        return []
    if not 1 <= ngram_min <= ngram_max:
        raise ValueError("need 1 <= ngram_min <= ngram_max")
    toks = list(tokens)
    L = len(toks)
    for n in range(min(ngram_max, L - 1), ngram_min - 1, -1):
        suffix = toks[L - n:]
        first = suffix[0]
        # an earlier occurrence must start at i <= L-n-1 so that at least one token follows it
        for i in range(L - n - 1, -1, -1):
            if toks[i] == first and toks[i:i + n] == suffix:
                return toks[i + n:i + n + k]
    return []
