"""Freed memory the C allocator still holds, given back to the system.

glibc's malloc keeps what a process frees in its heaps (the main one and one arena per thread that allocates) for
reuse, and returns it to the system only from a heap's top; what loading a model frees below live data stays
resident for the life of the process: 26 MB of SmolLM2's start with two threads here, none with one
(``bench/results/peer/smollm2-memory-trim/``). ``malloc_trim(0)`` returns those pages of every arena (``madvise``,
the addresses stay reserved); a later allocation there faults them in again, so it runs once the load is done, not
per request.
"""

from __future__ import annotations

import ctypes
import functools


@functools.cache
def _malloc_trim():
    try:
        fn = ctypes.CDLL(None).malloc_trim           # glibc; musl and macOS have none
    except (AttributeError, OSError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return fn


def give_back() -> bool:
    """Return the heap's free pages to the system; False where the C library cannot (then nothing happens)."""
    fn = _malloc_trim()
    if fn is None:
        return False
    fn(0)
    return True
