"""Freed heap memory is given back to the system (completer/engine/torch/heap.py)."""

import ctypes

import pytest

from completer.engine.torch import heap


def _rss_mb() -> float:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_freed_heap_pages_below_live_data_are_given_back():
    if heap._malloc_trim() is None:
        pytest.skip("this C library has no malloc_trim (not glibc)")
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    # 60 MB in 64 KB blocks (under glibc's mmap threshold: from the heap), touched, then one block above them kept
    # live: freeing the rest leaves free pages below live data, which glibc does not return by itself
    blocks = [libc.malloc(64 * 1024) for _ in range(960)]
    for b in blocks:
        ctypes.memset(b, 1, 64 * 1024)
    top = libc.malloc(64 * 1024)
    for b in blocks:
        libc.free(b)
    before = _rss_mb()
    assert heap.give_back() is True
    after = _rss_mb()
    libc.free(top)
    assert before - after > 40, (before, after)
