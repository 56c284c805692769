"""Prompt-lookup (n-gram) drafting: code repeats its own identifiers, so the tokens that followed the last
occurrence of the current suffix are a free guess at what comes next (no model needed).

Pure function over token ids, as vLLM's ``ngram_proposer.py``: find the longest suffix n-gram
(``ngram_min <= n <= ngram_max``) that occurred earlier in the sequence and propose up to ``k`` tokens that
followed its most recent earlier occurrence.

Fill-in-the-middle: the sequence searched is the whole prompt plus what was generated, so the context block, the
prefix and the code after the cursor (the suffix, which sits before ``<|fim_middle|>`` in PSM order and before the
prefix in SPM order) are all looked up, the most recent occurrence first: in PSM the suffix is nearer than the
prefix, which suits completion (the code after the cursor often holds what is typed next). What FIM adds is the
sentinels (``sentinels``: the template's special tokens such as ``<|fim_suffix|>``, ``<|fim_middle|>``,
``<|file_sep|>``): a match is never read across one, an occurrence followed by one is skipped for an older one
(the end of the suffix region is followed by ``<|fim_middle|>``, which the target never writes in the middle of
code), and a proposal stops before one.
"""

from __future__ import annotations

from typing import Collection, Sequence


def propose_ngram(tokens: Sequence[int], k: int, ngram_min: int = 2, ngram_max: int = 4,
                  sentinels: Collection[int] = ()) -> list[int]:
    """Up to ``k`` draft tokens, or ``[]`` when no suffix n-gram occurred earlier."""
    if k < 1:
        return []
    if not 1 <= ngram_min <= ngram_max:
        raise ValueError("need 1 <= ngram_min <= ngram_max")
    toks = list(tokens)
    L = len(toks)
    stop = set(sentinels)
    for n in range(min(ngram_max, L - 1), ngram_min - 1, -1):
        suffix = toks[L - n:]
        if stop and any(t in stop for t in suffix):
            continue                                     # a sentinel is not code: nothing to match across it
        first = suffix[0]
        # an earlier occurrence must start at i <= L-n-1 so that at least one token follows it
        for i in range(L - n - 1, -1, -1):
            if toks[i] == first and toks[i:i + n] == suffix:
                follow = toks[i + n:i + n + k]
                if stop:
                    cut = next((j for j, t in enumerate(follow) if t in stop), len(follow))
                    follow = follow[:cut]
                    if not follow:
                        continue                         # followed by a sentinel: try an older occurrence
                return follow
    return []
