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
