"""An engine request in flight for a document, and whether a later keystroke can be answered from it.

A :class:`Flight` runs its ``pipeline.Generation`` in a task of its own, so it outlives the LSP request that started
it: that request may be answered early (at the end of the ghost text's first line) while the block finishes in the
background, and a later keystroke that only types what the model is writing is answered from the same engine request
instead of aborting it and starting over. :meth:`Flight.follow` decides, from the text typed since the flight's
anchor and the ghost text so far, whether to answer now, wait for more output (the model is ahead of the user), or
give up (the user diverged, or typed past what the model has written so far).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from completer.pipeline import Generation

ANSWER, PARTIAL, WAIT, DIVERGED = "answer", "partial", "wait", "diverged"


def first_line(rest: str, raw: str) -> str | None:
    """``rest`` through its first non-blank line, once the model has ended that line (None before): the point
    worth showing early. Leading line breaks (a block that starts on the next line) belong to it."""
    body = len(rest) - len(rest.lstrip(" \t\r\n"))
    nl = rest.find("\n", body)
    if nl >= 0:
        return rest[:nl].rstrip("\r")
    if rest.strip() and raw.rstrip(" \t").endswith("\n"):
        return rest
    return None


@dataclass
class Flight:
    gen: Generation
    before: str                      # document text before the cursor when it was planned (its anchor)
    after: str                       # document text after the cursor then
    task: asyncio.Task | None = None
    answered: int = 0                # LSP requests answered from it
    waiters: int = 0                 # LSP requests waiting on it now
    answered_early: bool = False     # one of them before it finished
    concurrency: int = 0             # flights running in the process when it started, itself included (Load)

    def typed(self, text: str, offset: int | None = None) -> str | None:
        """What the user typed at the anchor, if ``text`` is ``before + typed + after`` (with the cursor at
        ``offset`` right after the typed text, when given); None when the document left the anchor."""
        end = len(text) - len(self.after)
        if end < len(self.before) or not text.startswith(self.before) or not text.endswith(self.after):
            return None
        if offset is not None and offset != end:
            return None
        return text[len(self.before):end]

    def follow(self, typed: str, early: bool, partial: bool = False) -> tuple[str, str | None]:
        """(ANSWER, ghost text to show after ``typed``) | (WAIT, None): the model has not written enough yet |
        (DIVERGED, None): the typed text is not what the model has written (or ran ahead of it: waiting for a model
        that may still diverge costs more than the new request, measured with bench.replay), or nothing is left.
        With ``partial`` (the answer is due now), (PARTIAL, what the model has written so far) instead of WAIT when
        that is not blank."""
        gen = self.gen
        if gen.error is not None or gen.aborted:
            return DIVERGED, None
        ghost = gen.ghost()
        if ghost.startswith(typed):
            rest = ghost[len(typed):]
            if gen.finished:
                return (ANSWER, rest) if rest.strip() or not typed else (DIVERGED, None)
            if early:
                line = first_line(rest, gen.raw)
                if line is not None:
                    return ANSWER, line
            if partial and rest.strip():
                return PARTIAL, rest
            return WAIT, None
        return DIVERGED, None

    def diverged(self, text: str) -> bool:
        """An edit made the document ``text``: True when this flight can no longer serve it."""
        typed = self.typed(text)
        return typed is None or self.follow(typed, early=False)[0] == DIVERGED


class Load:
    """The engine requests in flight in this process (every connection's, they share one engine) and what a new one
    is likely to cost, for admission: a request whose answer cannot come within the bound is refused ("busy") at
    once instead of queueing behind the others (issue 13: answered, refused or superseded within 1 s).

    The engine steps its requests in turn (or together, batched), so a request's time grows with how many run beside
    it. ``slot_s`` is an exponential average of a finished request's time divided by how many were running when it
    started (itself included): the predicted time of a new request is ``slot_s * (running + 1)``. Measured on the
    serving path itself, so batching, speculation and the machine's load are in it."""

    ALPHA = 0.2                      # weight of the newest measurement in slot_s
    # the "busy" answer at the bound: due at BUSY_AT of answerBoundMs after the request's arrival on a quick event
    # loop, earlier by LAG_FACTOR times the loop's recent lateness when it lags (that loop read the request late,
    # fires the timer late and writes the answer late: 50 clients on 2 cores, busy answers at 1.00-1.06 s with a
    # fixed 80% of a 1 s bound), never before MIN_AT of the bound
    BUSY_AT, MIN_AT, LAG_FACTOR = 0.8, 0.5, 3.0
    LAG_TICK_S = 0.05                # the lateness probe: a sleep of this long, timed, while flights run
    LAG_HALF_LIFE_S = 2.0            # the lateness estimate is a decaying maximum with this half-life
    MAX_LAG_AT = 0.1                 # no new engine request while the loop's lateness is over this share of the bound

    def __init__(self, clock=time.perf_counter) -> None:
        self.running = 0
        self.asked = 0                   # completion requests that came to the process (every connection's), a count
        self.slot_s: float | None = None
        self._clock = clock
        self._lag = (0.0, clock())      # (largest recent lateness, when it was seen)
        self._probe: asyncio.Task | None = None

    def started(self) -> int:
        """A flight starts; returns how many are running with it (the concurrency it starts at). Starts the event
        loop lateness probe while flights run (called on the event loop)."""
        self.running += 1
        if self._probe is None or self._probe.done():
            try:
                self._probe = asyncio.get_running_loop().create_task(self._watch_lag(), name="completer-loop-lag")
            except RuntimeError:         # no running loop (a unit test driving Load by hand): no probe
                self._probe = None
        return self.running

    async def _watch_lag(self) -> None:
        while self.running > 0:
            t = self._clock()
            await asyncio.sleep(self.LAG_TICK_S)
            self.note_lag(self._clock() - t - self.LAG_TICK_S)

    def note_lag(self, seconds: float) -> None:
        """The event loop ran a timer ``seconds`` late."""
        now = self._clock()
        if seconds >= self.lag_s(now):
            self._lag = (max(0.0, seconds), now)

    def lag_s(self, now: float | None = None) -> float:
        """The loop's recent lateness: the largest seen, halved every LAG_HALF_LIFE_S since."""
        top, seen = self._lag
        return top * 0.5 ** (((self._clock() if now is None else now) - seen) / self.LAG_HALF_LIFE_S)

    def behind(self, bound_s: float) -> bool:
        """Whether the event loop runs its timers later than ``MAX_LAG_AT`` of the bound: then it is behind on its
        messages (it reads them, fires their deadlines and writes their answers that late) and a new engine request
        (its prompt planned on this loop, its tokens streamed through it) would only put it further behind. At 50
        clients typing without pauses on 2 cores, planning engine requests that the next keystroke superseded
        anyway took most of the loop (25 of 30 s, 6,652 engine requests, none finished) and its timers ran up to
        0.3-0.5 s late: messages answered after 1 s (issue 13)."""
        return self.lag_s() > self.MAX_LAG_AT * bound_s

    def answer_by(self, bound_s: float) -> float:
        """Seconds after a request's arrival by which its answer must be decided (the "busy" answer at the bound
        sent, or a new engine request predicted to finish), so that it reaches the client within ``bound_s``."""
        return max(self.MIN_AT * bound_s, min(self.BUSY_AT * bound_s, bound_s - self.LAG_FACTOR * self.lag_s()))

    def ended(self, seconds: float | None, concurrency: int) -> None:
        """A flight ends; ``seconds`` is its time to finish (None: aborted or failed, no measurement)."""
        self.running = max(0, self.running - 1)
        if seconds is not None and concurrency > 0:
            self._measured(seconds / concurrency)

    def too_slow(self, seconds: float, concurrency: int) -> None:
        """A flight had not answered after ``seconds`` (the bound, or its abort when the next keystroke superseded
        it first): its time is at least that. Raises the estimate when it is below (a lower bound only raises it);
        without this, an engine so overloaded that nothing ever finishes would never measure anything and keep
        admitting everything (and the adaptive debounce, which waits out keystrokes that would supersede the
        engine request, would never learn that they do)."""
        if concurrency > 0 and (self.slot_s is None or seconds / concurrency > self.slot_s):
            self._measured(seconds / concurrency)

    def _measured(self, per: float) -> None:
        """One request's time per concurrent request into the running average ``slot_s``."""
        self.slot_s = per if self.slot_s is None else (1 - self.ALPHA) * self.slot_s + self.ALPHA * per

    def predicted_s(self) -> float | None:
        """Time a flight started now would take (None before any measurement)."""
        return None if self.slot_s is None else self.slot_s * (self.running + 1)

    def admits(self, bound_s: float) -> bool:
        """Whether a new flight's answer is predicted within ``bound_s`` (always when nothing else is running, or
        nothing is measured yet: the first request of a process is how it learns)."""
        p = self.predicted_s()
        return self.running == 0 or p is None or p <= bound_s
