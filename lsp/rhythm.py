"""The client's typing rhythm, learned from the times of its ``didChange`` notifications, and the debounce it asks for.

A debounce saves an engine request only when the next keystroke comes within it, and every other keystroke pays it
in full before its ghost text. So the wait is a fraction (``FRACTION``) of the interval that only this typist's
fastest keystrokes beat (the ``PERCENTILE``-th percentile of the recent intervals), clamped to the configured bounds:
a fast burst collapses into one engine request, a pause costs little. (A wait of the whole percentile, tried first,
made most answers arrive after the next key in bench.replay: the engine's own ~100 ms come on top.) Intervals longer
than ``PAUSE_MS`` are pauses, not rhythm, and are left out.
Until ``MIN_SAMPLES`` intervals are known the configured ``debounceMs`` applies. (Tabby learns its debounce from
keystroke intervals the same way.)

When the engine's answer time is known (``engine_ms``: what a new engine request is predicted to take now, see
:class:`lsp.flight.Load`), the wait is instead the shortest one after which an engine request started would be
superseded by the next keystroke before it answers in at most ``RISK`` of the cases, judged on this typist's recent
gaps (pauses included): on a quiet machine that answers in ~35 ms this is no wait at all, since a debounce then only
delays every answer; when answers take longer than the typist's bursts, the wait skips the keystrokes that would be
superseded anyway (their engine tokens would be wasted).
"""

from __future__ import annotations

import bisect
import time
from collections import deque

from completer.stats import percentile

PERCENTILE = 10          # the fastest tenth of the typist's keystroke intervals ...
FRACTION = 0.5           # ... of which the wait is this part
PAUSE_MS = 1000.0        # a longer gap between two edits is a pause, not part of the rhythm
WINDOW = 64              # intervals remembered (the most recent ones)
MIN_SAMPLES = 8
RISK = 0.25              # with engine_ms: accepted share of engine requests superseded before their answer


class Rhythm:
    """Recent inter-keystroke intervals of one client, in milliseconds."""

    def __init__(self, clock=time.perf_counter):
        self._clock = clock
        self._last: float | None = None
        self.intervals: deque[float] = deque(maxlen=WINDOW)
        self.gaps: deque[float] = deque(maxlen=WINDOW)       # the same with pauses (as PAUSE_MS + 1)

    def keystroke(self) -> None:
        now = self._clock()
        if self._last is not None:
            gap = (now - self._last) * 1000
            if gap <= PAUSE_MS:
                self.intervals.append(gap)
            self.gaps.append(min(gap, PAUSE_MS + 1))
        self._last = now

    def debounce_ms(self, fallback: float, lo: float, hi: float, engine_ms: float | None = None) -> float:
        """The wait before a new engine request: learned from the rhythm once known, else ``fallback``; within
        ``lo..hi`` (the fallback as it is). With ``engine_ms``, the shortest wait whose engine request is superseded before it answers in at
        most ``RISK`` of the recent gaps (``hi`` when none is)."""
        if engine_ms is not None and len(self.gaps) >= MIN_SAMPLES:
            return min(hi, max(lo, superseded_wait(self.gaps, engine_ms, hi)))
        if len(self.intervals) < MIN_SAMPLES:
            return fallback                # nothing learned yet: the configured debounceMs, as it is
        return min(hi, max(lo, FRACTION * percentile(self.intervals, PERCENTILE)))

    def median_ms(self) -> float | None:
        return percentile(self.intervals, 50)


def superseded_wait(gaps, engine_ms: float, hi: float) -> float:
    """The shortest wait ``w`` (0, or one of ``gaps`` below ``hi``) such that of the gaps longer than ``w`` (the
    keystrokes a request started after ``w`` is made for) at most ``RISK`` end before ``w + engine_ms`` (the
    request's answer); ``hi`` if there is none. Counted by bisection in the sorted gaps (once per completion
    request: the quadratic count was a tenth of the event loop at 50 clients)."""
    g = sorted(gaps)
    n = len(g)
    for w in [0.0] + [x for x in g if x < hi]:
        after = bisect.bisect_right(g, w)             # g[after:] are the gaps longer than w
        longer = n - after
        if not longer:
            return w
        if max(0, bisect.bisect_left(g, w + engine_ms) - after) <= RISK * longer:
            return w
    return hi
