"""Order statistics shared by the server (the adaptive debounce learns from keystroke intervals) and the benchmarks
(latency percentiles), so that both read "p50" the same way."""

from __future__ import annotations

import math
from typing import Iterable


def percentile(values: Iterable[float], q: float) -> float | None:
    """Linear-interpolation percentile (numpy's default) of ``values`` at ``q`` (0..100); None for no values."""
    v = sorted(values)
    if not v:
        return None
    pos = (len(v) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def nearest_rank(values: Iterable[float], q: float) -> float | None:
    """The sample nearest to rank ``q`` (0..100) of ``values`` (no interpolation: a value that was measured);
    None for no values. The benchmarks' p95 of latencies and the tune table use it."""
    v = sorted(values)
    if not v:
        return None
    return v[min(len(v) - 1, max(0, round(q / 100 * (len(v) - 1))))]
