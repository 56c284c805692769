"""The torch engine's KV caches: a request's pair (target, draft), and the documents' caches kept between requests.

A request takes its document's caches (by ``Request.cache_key``) when it starts and gives them back when it ends, so
the next request on the same document prefills only what changed (``speculative.prefill`` reuses the common
prefix). ``CACHE_KEYS`` documents are kept, the least recently used dropped first.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

from ...models.llama import KVCache

CACHE_KEYS = 8          # documents whose KV caches are kept for reuse (LRU)


@dataclass
class Caches:
    target: KVCache
    draft: KVCache | None


class DocumentCaches:
    """Caches by document key, least recently used first out; ``new`` makes a fresh pair (a request without a key,
    a document not kept, or prefix caching off)."""

    def __init__(self, new: Callable[[], Caches], enabled: bool = True):
        self._new, self.enabled = new, enabled
        self._lru: OrderedDict[str, Caches] = OrderedDict()

    def take(self, key: str | None) -> Caches:
        if key is not None and self.enabled and key in self._lru:
            return self._lru.pop(key)
        return self._new()

    def keep(self, key: str | None, caches: Caches | None) -> None:
        if caches is None or key is None or not self.enabled:
            return
        self._lru[key] = caches
        self._lru.move_to_end(key)
        while len(self._lru) > CACHE_KEYS:
            self._lru.popitem(last=False)

    def clear(self) -> None:
        self._lru.clear()

    def __len__(self) -> int:
        return len(self._lru)

    def __contains__(self, key: str) -> bool:
        return key in self._lru
