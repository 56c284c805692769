"""The client's typing rhythm, learned from the times of its ``didChange`` notifications, and the debounce it asks for.

A debounce saves an engine request only when the next keystroke comes within it, and every other keystroke pays it
in full before its ghost text. So the wait is a fraction (``FRACTION``) of the interval that only this typist's
fastest keystrokes beat (the ``PERCENTILE``-th percentile of the recent intervals), clamped to the configured bounds:
a fast burst collapses into one engine request, a pause costs little. (A wait of the whole percentile, tried first,
made most answers arrive after the next key in bench.replay: the engine's own ~100 ms come on top.) Intervals longer
than ``PAUSE_MS`` are pauses, not rhythm, and are left out.
Until ``MIN_SAMPLES`` intervals are known the configured ``debounceMs`` applies. (Tabby learns its debounce from
keystroke intervals the same way.)
"""

from __future__ import annotations

import time
from collections import deque

from completer.stats import percentile

PERCENTILE = 10          # the fastest tenth of the typist's keystroke intervals ...
FRACTION = 0.5           # ... of which the wait is this part
PAUSE_MS = 1000.0        # a longer gap between two edits is a pause, not part of the rhythm
WINDOW = 64              # intervals remembered (the most recent ones)
MIN_SAMPLES = 8


class Rhythm:
    """Recent inter-keystroke intervals of one client, in milliseconds."""

    def __init__(self, clock=time.perf_counter):
        self._clock = clock
        self._last: float | None = None
        self.intervals: deque[float] = deque(maxlen=WINDOW)

    def keystroke(self) -> None:
        now = self._clock()
        if self._last is not None:
            gap = (now - self._last) * 1000
            if gap <= PAUSE_MS:
                self.intervals.append(gap)
        self._last = now

    def debounce_ms(self, fallback: float, lo: float, hi: float) -> float:
        """The wait before a new engine request: learned from the rhythm once known, else ``fallback``; within
        ``lo..hi``."""
        learned = (FRACTION * percentile(self.intervals, PERCENTILE) if len(self.intervals) >= MIN_SAMPLES
                   else None)
        return min(hi, max(lo, fallback if learned is None else learned))

    def median_ms(self) -> float | None:
        return percentile(self.intervals, 50)
