"""Request lifecycle: type-through, supersede, debounce, abort reaching the engine, the plain FIM prompt, reuse of
the engine request in flight, early answers with the block finished in the background, the adaptive debounce.

The engine here is a small scripted implementation of the Engine protocol (a fixed text, one character per step),
so the lifecycle's timing can be controlled; the real engine is exercised by tests/e2e.
"""

from __future__ import annotations

import asyncio
import pytest

from completer.engine import Chunk, Counters
from lsp.config import ServerConfig
from lsp.documents import Snapshot
from lsp.engine_host import EngineHost, EngineUnavailable
from lsp.lifecycle import Lifecycle, _Shown, type_through


class ScriptedEngine:
    name = "scripted"

    def __init__(self, text: str, step_s: float = 0.01):
        self.text, self.step_s = text, step_s
        self.c = Counters()
        self.aborted: set[str] = set()
        self.abort_calls: list[str] = []     # every abort the engine saw: abort() and closed streams
        self.prompts: list[str] = []
        self.requests: list = []
        self.warm_s = 0.0                    # how long a request for no tokens (a warm-up) takes

    async def generate(self, request):
        self.c.requests_started += 1
        self.prompts.append(request.prompt)
        self.requests.append(request)
        if request.max_new_tokens == 0:      # a warm-up: the prompt only, then the end
            try:
                await asyncio.sleep(self.warm_s)
            except BaseException:
                self.abort_calls.append(request.request_id)
                raise
            yield Chunk(request.request_id, finished=True, finish_reason="length")
            return
        out = self.text[: request.max_new_tokens]
        finished = False
        try:
            for i, ch in enumerate(out):
                await asyncio.sleep(self.step_s)
                if request.request_id in self.aborted:
                    self.c.requests_aborted += 1
                    finished = True
                    yield Chunk(request.request_id, finished=True, finish_reason="abort")
                    return
                self.c.generated_tokens += 1
                finished = i == len(out) - 1
                yield Chunk(request.request_id, ch, finished=finished, finish_reason="length")
            self.c.requests_finished += 1
        finally:
            if not finished:               # the consumer closed the stream: that is the abort (Engine protocol)
                self.abort_calls.append(request.request_id)
                self.aborted.add(request.request_id)

    async def abort(self, request_id):
        self.abort_calls.append(request_id)
        self.aborted.add(request_id)

    def counters(self):
        return self.c.snapshot()

    def count_tokens(self, text):
        return len(text) // 3 + 1

    async def close(self):
        pass


@pytest.mark.parametrize("before, after, text, doc, offset, expect", [
    ("x = ", "\n", "foo(1)", "x = \n", 4, "foo(1)"),          # same place: the whole completion again
    ("x = ", "\n", "foo(1)", "x = fo\n", 6, "o(1)"),          # typed a prefix of it
    ("x = ", "\n", "foo(1)", "x = fa\n", 6, None),            # typed something else
    ("x = ", "\n", "foo(1)", "x = foo(1)\n", 10, None),       # typed all of it: nothing left to show
    ("x = ", "\n", "foo(1)", "x = fo\n# new\n", 6, None),     # text after the cursor changed
    ("x = ", "\n", "foo(1)", "y = fo\n", 6, None),            # text before the anchor changed
    ("x = ", "\n", "foo(1)", "x = \n", 3, None),              # cursor moved back
])
def test_type_through(before, after, text, doc, offset, expect):
    assert type_through(_Shown(before, after, text), Snapshot("u", doc, 2), offset) == expect


def make(text="hello_world()", step_s=0.01, **options):
    cfg = ServerConfig.from_options({"debounceMs": 0, "maxTokens": 64, "template": "house", **options})
    engine = ScriptedEngine(text, step_s)
    host = EngineHost(lambda c: engine)
    return Lifecycle(host, lambda: cfg), host, engine, cfg


async def test_newer_request_supersedes_and_aborts_engine():
    lc, host, engine, cfg = make(step_s=0.02, reuseInFlight=False)
    host.start(cfg.engine)
    snap = Snapshot("u", "x = ", 1)
    first = asyncio.ensure_future(lc.complete(snap, 4))
    while lc.stats.engine_requests == 0:
        await asyncio.sleep(0.005)
    second = asyncio.ensure_future(lc.complete(Snapshot("u", "x = h", 2), 5))
    with pytest.raises(asyncio.CancelledError):
        await first
    assert (await second).text == "hello_world()"
    assert len(engine.aborted) == 1 and len(engine.abort_calls) == 1    # aborted exactly once
    assert lc.stats.requests_cancelled == 1 and lc.stats.requests_superseded == 1 and lc.stats.engine_aborts == 1
    assert lc.inflight() == 0


async def test_edit_supersedes_but_not_with_cancel_stale_off():
    lc, host, engine, cfg = make(step_s=0.005, cancelStaleRequests=False)
    host.start(cfg.engine)
    t = asyncio.ensure_future(lc.complete(Snapshot("u", "x = ", 1), 4))
    await asyncio.sleep(0.02)
    lc.document_changed("u")                       # naive mode: runs to the end
    assert (await t).text == "hello_world()"
    assert engine.aborted == set()


async def test_debounce_collapses_a_burst_into_one_engine_request():
    lc, host, engine, cfg = make(debounceMs=50)
    host.start(cfg.engine)
    tasks = []
    for i in range(5):
        tasks.append(asyncio.ensure_future(lc.complete(Snapshot("u", "a" * i, i), i)))
        await asyncio.sleep(0.005)
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, asyncio.CancelledError) for r in results[:-1])
    assert results[-1].text == "hello_world()"
    assert lc.stats.engine_requests == 1 and engine.c.requests_started == 1


async def test_type_through_answers_without_engine_and_prefix_prompts_are_stable():
    lc, host, engine, cfg = make()
    host.start(cfg.engine)
    doc = "def f():\n    return 1\n\nx = "
    r = await lc.complete(Snapshot("u", doc + "\n", 1), len(doc))
    assert r.text == "hello_world()" and not r.from_cache
    r2 = await lc.complete(Snapshot("u", doc + "hel\n", 2), len(doc) + 3)
    assert r2.text == "lo_world()" and r2.from_cache
    assert lc.stats.engine_requests == 1 and lc.stats.served_from_cache == 1
    # off: engine again
    lc._config = lambda: ServerConfig.from_options({"debounceMs": 0, "typeThroughCache": False,
                                                    "template": "house"})
    await lc.complete(Snapshot("u", doc + "hel\n", 3), len(doc) + 3)
    assert lc.stats.engine_requests == 2
    # consecutive keystrokes share the prompt up to the cursor (for the engine's prefix cache)
    a, b = engine.prompts
    common = len(next((a[:i] for i in range(min(len(a), len(b)), 0, -1) if a[:i] == b[:i]), ""))
    assert common >= a.index(doc) + len(doc)


async def test_engine_start_failure_is_a_clear_error():
    def broken(cfg):
        raise FileNotFoundError("no such model /nowhere")

    host = EngineHost(broken)
    cfg = ServerConfig()
    host.start(cfg.engine)
    lc = Lifecycle(host, lambda: cfg.updated({"debounceMs": 0, "template": "house"}))
    with pytest.raises(EngineUnavailable, match="no such model /nowhere"):
        await lc.complete(Snapshot("u", "x", 1), 1)
    assert lc.stats.errors == 1


async def wait_for(cond):
    """Yield to the event loop until ``cond()`` holds (the scripted engine paces itself; nothing is timed here)."""
    while not cond():
        await asyncio.sleep(0.001)


async def test_keystroke_that_types_what_the_model_writes_reuses_the_engine_request():
    lc, host, engine, cfg = make(step_s=0.02)
    host.start(cfg.engine)
    first = asyncio.ensure_future(lc.complete(Snapshot("u", "x = ", 1), 4))
    await wait_for(lambda: lc.stats.engine_requests == 1 and lc._flights["u"].gen.raw)    # the model wrote "h"
    lc.document_changed("u", Snapshot("u", "x = h", 2))          # the user types the model's first character
    with pytest.raises(asyncio.CancelledError):
        await first                                              # the LSP request is superseded ...
    second = await lc.complete(Snapshot("u", "x = h", 2), 5)     # ... its engine request is not
    assert second.text == "ello_world()" and second.reused
    assert engine.c.requests_started == 1 and engine.abort_calls == []
    assert lc.stats.reuses == 1 and lc.stats.engine_aborts == 0 and lc.stats.engine_requests == 1


async def test_typing_ahead_of_the_model_starts_over_but_typing_behind_it_reuses():
    lc, host, engine, cfg = make(step_s=0.02)
    host.start(cfg.engine)
    asyncio.ensure_future(lc.complete(Snapshot("u", "x = ", 1), 4))
    await wait_for(lambda: "u" in lc._flights and len(lc._flights["u"].gen.raw) >= 3)   # it wrote "hel"
    r = await lc.complete(Snapshot("u", "x = he", 2), 6)           # behind the model: answered from it
    assert r.reused and r.text == "llo_world()" and engine.c.requests_started == 1
    lc2, host2, engine2, cfg2 = make(step_s=0.02)
    host2.start(cfg2.engine)
    asyncio.ensure_future(lc2.complete(Snapshot("u", "x = ", 1), 4))
    await wait_for(lambda: lc2.stats.engine_requests == 1)
    r2 = await lc2.complete(Snapshot("u", "x = hello", 2), 9)      # ahead of what the model has written
    assert not r2.reused and engine2.c.requests_started == 2 and len(engine2.abort_calls) <= 1


async def test_divergent_keystroke_aborts_the_flight_once_and_starts_over():
    lc, host, engine, cfg = make(step_s=0.02)
    host.start(cfg.engine)
    asyncio.ensure_future(lc.complete(Snapshot("u", "x = ", 1), 4))
    await wait_for(lambda: lc.stats.engine_requests == 1 and lc._flights["u"].gen.raw)    # the model wrote "h"
    lc.document_changed("u", Snapshot("u", "x = z", 2))          # not what the model writes: aborted at the edit
    assert lc.stats.flights_diverged == 1 and lc.stats.engine_aborts == 1
    r = await lc.complete(Snapshot("u", "x = z", 2), 5)
    assert r.text == "hello_world()" and not r.reused
    assert engine.c.requests_started == 2 and len(engine.abort_calls) == 1 and lc.stats.reuses == 0


async def test_edit_elsewhere_in_the_document_aborts_the_flight():
    lc, host, engine, cfg = make(step_s=0.02)
    host.start(cfg.engine)
    asyncio.ensure_future(lc.complete(Snapshot("u", "x = \ny = 2\n", 1), 4))
    await wait_for(lambda: lc.stats.engine_requests == 1)
    flight = lc._flights["u"]
    lc.document_changed("u", Snapshot("u", "x = \ny = 3\n", 2))   # the text after the cursor changed
    assert lc.stats.engine_aborts == 1 and "u" not in lc._flights
    await asyncio.gather(flight.task, return_exceptions=True)
    assert flight.gen.aborted or flight.task.cancelled()
    assert engine.c.requests_finished == 0 and len(engine.abort_calls) == engine.c.requests_started


BLOCK_DOC = "def f(a):\n    "                                   # block mode: the body of f
PY = "file:///work/f.py"


async def test_early_answer_shows_the_first_line_and_finishes_the_block_in_the_background():
    lc, host, engine, cfg = make("b = a + 1\n    return b\n", step_s=0.01, earlyAnswer=True)
    host.start(cfg.engine)
    r = await lc.complete(Snapshot(PY, BLOCK_DOC, 1, "python"), len(BLOCK_DOC))
    assert r.text == "b = a + 1" and r.early and lc.stats.early_answers == 1
    flight = lc._flights[PY]
    assert not flight.gen.finished                               # the block is still being written
    await flight.task                                            # ... in the background, to its end
    assert lc.stats.background_finished == 1 and engine.abort_calls == []
    # accepting the line (Tab) and going on: the rest of the block from the type-through cache, no engine request
    doc = BLOCK_DOC + "b = a + 1\n    "
    r2 = await lc.complete(Snapshot(PY, doc, 2, "python"), len(doc))
    assert r2.from_cache and r2.text == "return b"
    assert engine.c.requests_started == 1


async def test_without_early_answer_the_whole_block_is_answered():
    lc, host, engine, cfg = make("b = a + 1\n    return b\n", step_s=0.005)
    host.start(cfg.engine)
    r = await lc.complete(Snapshot(PY, BLOCK_DOC, 1, "python"), len(BLOCK_DOC))
    assert r.text == "b = a + 1\n    return b" and not r.early and lc.stats.early_answers == 0


async def test_partial_answer_then_the_rest_for_a_client_that_asks_again():
    """partialAnswerMs for a client with partialGhost: what the model has written by then, marked partial; the flight
    goes on, and the same request again (nothing typed since) gets the whole ghost text from it, not a second
    partial one. A keystroke that types what was shown is answered from the same flight, partially again."""
    lc, host, engine, cfg = make(step_s=0.02, partialAnswerMs=50)
    host.start(cfg.engine)
    r = await lc.complete(Snapshot("u", "x = ", 1), 4, partial_ok=True)
    assert r.partial and r.text and "hello_world()".startswith(r.text) and r.text != "hello_world()"
    assert lc.stats.partial_answers == 1 and "u" in lc._flights        # still writing, not aborted
    again = await lc.complete(Snapshot("u", "x = ", 1), 4, partial_ok=True)
    assert again.text == "hello_world()" and not again.partial and engine.c.requests_started == 1
    assert engine.abort_calls == []


async def test_partial_answer_typed_through_and_only_for_clients_that_ask_again():
    lc, host, engine, cfg = make(step_s=0.02, partialAnswerMs=50)
    host.start(cfg.engine)
    r = await lc.complete(Snapshot("u", "x = ", 1), 4, partial_ok=True)
    assert r.partial and r.text.startswith("h")
    lc.document_changed("u", Snapshot("u", "x = h", 2))                # the user types what it shows
    r2 = await lc.complete(Snapshot("u", "x = h", 2), 5, partial_ok=True)
    assert r2.reused and "ello_world()".startswith(r2.text) and engine.c.requests_started == 1
    # a client without the capability waits for the whole answer, as before
    lc2, host2, engine2, cfg2 = make(step_s=0.02, partialAnswerMs=50)
    host2.start(cfg2.engine)
    full = await lc2.complete(Snapshot("u", "x = ", 1), 4)
    assert full.text == "hello_world()" and not full.partial and lc2.stats.partial_answers == 0


def test_rhythm_learns_the_debounce_from_keystroke_intervals():
    from lsp.rhythm import MIN_SAMPLES, PAUSE_MS, Rhythm

    now = [0.0]
    r = Rhythm(clock=lambda: now[0])
    assert r.debounce_ms(30, 0, 150) == 30                       # nothing learned yet: the configured debounce
    for gap_ms in [100, 60, 80, 200, 90, 70, 110, 2 * PAUSE_MS, 120, 50][: MIN_SAMPLES + 2]:
        now[0] += gap_ms / 1000
        r.keystroke()
    assert len(r.intervals) == MIN_SAMPLES                       # the first edit has no interval; the pause is left out
    learned = r.debounce_ms(30, 0, 150)
    assert 25 < learned < 40                        # half the fastest tenth of 50..200 ms gaps (about 60 ms)
    assert r.debounce_ms(30, 0, 20) == 20 and r.debounce_ms(30, 90, 150) == 90     # clamped to the bounds


async def test_adaptive_debounce_is_reported_and_skipped_on_reuse():
    lc, host, engine, cfg = make(step_s=0.01, adaptiveDebounce=True, debounceMs=5, debounceMaxMs=20)
    host.start(cfg.engine)
    await lc.complete(Snapshot("u", "x = ", 1), 4)
    assert lc.stats.debounce_ms == 5                             # no rhythm yet: debounceMs
    stats = lc.snapshot_stats()
    assert {"reuses", "early_answers", "debounce_ms", "typing_interval_ms"} <= set(stats)


def test_rhythm_with_the_engine_time_waits_only_when_requests_would_be_superseded():
    from lsp.rhythm import RISK, superseded_wait

    burst = [100.0] * 12 + [1001.0] * 4          # a typist: 100 ms between keys, a pause after every 12th
    assert superseded_wait(burst, engine_ms=35, hi=80) == 0        # answers before the next key: no wait
    # answers take 150 ms: a request started at once is superseded on every burst key (12 of 16 > RISK) and so is
    # one started after any wait below the burst's 100 ms; waiting through the burst gap leaves the pauses
    assert RISK < 12 / 16
    assert superseded_wait(burst, engine_ms=150, hi=80) == 80      # no wait below the bound helps: the bound
    assert superseded_wait(burst, engine_ms=150, hi=500) == 100
    assert superseded_wait([1001.0] * 8, engine_ms=500, hi=80) == 0   # only pauses: never superseded


def test_load_predicts_from_measured_time_per_concurrent_request():
    from lsp.flight import Load

    load = Load()
    assert load.admits(1.0) and load.predicted_s() is None         # nothing measured: learns from the first
    c = load.started()
    load.ended(0.2, c)                                             # alone: 200 ms
    assert load.running == 0 and load.predicted_s() == pytest.approx(0.2)
    for _ in range(3):
        load.started()
    assert load.predicted_s() == pytest.approx(0.8)                # three running + the new one
    assert load.admits(1.0) and not load.admits(0.5)
    load.ended(None, 3)                                            # aborted: no measurement, one fewer running
    assert load.running == 2 and load.slot_s == pytest.approx(0.2)


async def test_no_answer_within_the_bound_is_busy_and_the_flight_is_left_for_the_next_key():
    from lsp.lifecycle import Busy

    lc, host, engine, cfg = make(step_s=0.2, answerBoundMs=20)    # the answer needs 13 steps of 200 ms
    host.start(cfg.engine)
    other = asyncio.ensure_future(lc.complete(Snapshot("v", "y = ", 1), 4))   # load: another completion running
    await wait_for(lambda: lc.load.running == 1)
    with pytest.raises(Busy, match="answerBoundMs 20"):
        await lc.complete(Snapshot("u", "x = ", 1), 4)
    assert "u" in lc._flights                                      # kept for a grace
    with pytest.raises(Busy):                                      # the other one was past the bound too
        await other
    assert lc.stats.busy_at_bound == 2 and lc.stats.bound_alone == 0
    await wait_for(lambda: "u" not in lc._flights and "v" not in lc._flights)   # nobody took them up: aborted
    await wait_for(lambda: lc.load.running == 0)
    assert lc.stats.engine_aborts == 2


async def test_past_the_bound_alone_the_answer_is_waited_for():
    """No other completion running: nothing to shed, so the slow answer (a first completion on a slow machine)
    comes late rather than being refused."""
    lc, host, engine, cfg = make(step_s=0.01, answerBoundMs=20)   # 13 steps of 10 ms, bound at 16 ms
    host.start(cfg.engine)
    assert (await lc.complete(Snapshot("u", "x = ", 1), 4)).text == "hello_world()"
    assert lc.stats.bound_alone == 1 and lc.stats.busy_at_bound == 0


async def test_a_request_predicted_over_the_bound_is_refused_at_once_without_an_engine_request():
    from lsp.lifecycle import Busy

    lc, host, engine, cfg = make(step_s=0.05, answerBoundMs=1000)
    host.start(cfg.engine)
    other = asyncio.ensure_future(lc.complete(Snapshot("a", "x = ", 1), 4))
    await wait_for(lambda: lc.load.running == 1)
    lc.load.slot_s = 0.6                         # measured: 600 ms per concurrent request -> 1.2 s with two
    with pytest.raises(Busy, match="server busy: 1 completions are running"):
        await lc.complete(Snapshot("b", "y = ", 1), 4)
    assert lc.stats.refused_busy == 1 and lc.stats.engine_requests == 1
    other.cancel()
    await wait_for(lambda: lc.load.running == 0)  # the aborted flight is counted off too


async def test_load_is_shared_by_the_connections_of_one_engine_host_and_counts_flights_cancelled_early():
    lc, host, engine, cfg = make(step_s=0.05)
    lc2 = Lifecycle(host, lambda: cfg)
    assert lc2.load is lc.load
    host.start(cfg.engine)
    t = asyncio.ensure_future(lc.complete(Snapshot("a", "x = ", 1), 4))
    await wait_for(lambda: lc.load.running == 1)
    lc.document_closed("a")                      # the flight's task is cancelled (at once, maybe before it ran)
    with pytest.raises(asyncio.CancelledError):
        await t
    await wait_for(lambda: lc.load.running == 0)
    assert lc.snapshot_stats()["flights_in_process"] == 0


def test_a_flight_over_the_bound_raises_the_estimate_even_when_nothing_ever_finishes():
    from lsp.flight import Load

    load = Load()
    load.too_slow(1.0, 4)                        # 4 running, none answered within 1 s: at least 250 ms each
    assert load.slot_s == pytest.approx(0.25)
    load.too_slow(0.4, 4)                        # a lower bound below the estimate says nothing new
    assert load.slot_s == pytest.approx(0.25)
    load.running = 3
    assert load.admits(1.0) and not load.admits(0.99)      # 4 x 250 ms = 1 s: just within a 1 s bound
    load.running = 4
    assert not load.admits(1.0)


async def test_a_request_the_engine_refuses_is_counted_refused_not_error():
    """A bad request (here a prompt over the model's context: base.check_prompt's RequestError) is the engine's
    clear refusal, not a server fault: the metrics count it ``refused`` (an engine failure stays ``error``)."""
    from prometheus_client import CollectorRegistry

    from completer.engine import EngineError
    from completer.engine.base import RequestError, check_prompt
    from lsp.metrics import Metrics

    class Refusing(ScriptedEngine):
        def __init__(self, error):
            super().__init__("x")
            self.error = error

        async def generate(self, request):
            if isinstance(self.error, RequestError):
                check_prompt([1] * 50, n_vocab=10, positions=40)    # the engine's own check raises it
            raise self.error
            yield                                                   # an async generator, as engines are

    for error, outcome in ((RequestError("unused"), "refused"), (EngineError("model step failed"), "error")):
        engine = Refusing(error)
        cfg = ServerConfig.from_options({"debounceMs": 0, "template": "house", "reuseInFlight": False})
        host = EngineHost(lambda c: engine)
        host.start(cfg.engine)
        metrics = Metrics(registry=CollectorRegistry())
        lc = Lifecycle(host, lambda: cfg, metrics=metrics)
        with pytest.raises(type(error)):
            await lc.complete(Snapshot("u", "def f(x):\n    ", 1), 14)
        sample = metrics.registry.get_sample_value
        assert sample("completer_requests_total", {"outcome": outcome}) == 1
        assert sample("completer_requests_total", {"outcome": "refused" if outcome == "error" else "error"}) == 0


def test_busy_answer_comes_earlier_when_the_event_loop_lags():
    """The "busy" answer at the bound is due at 80% of answerBoundMs on a quick loop; a loop running timers late
    (it also reads the request and writes the answer late) moves it earlier by 3x the recent lateness, never before
    half the bound, and the lateness is forgotten with a 2 s half-life."""
    from lsp.flight import Load

    now = [100.0]
    load = Load(clock=lambda: now[0])
    assert load.answer_by(1.0) == pytest.approx(0.8)
    load.note_lag(0.1)
    assert load.answer_by(1.0) == pytest.approx(0.7)
    load.note_lag(0.05)                                    # a smaller lateness does not lower the recent maximum
    assert load.answer_by(1.0) == pytest.approx(0.7)
    load.note_lag(0.3)
    assert load.answer_by(1.0) == pytest.approx(0.5)       # floor: half the bound
    now[0] += 2 * Load.LAG_HALF_LIFE_S                     # two half-lives later: 0.075 s
    assert load.lag_s() == pytest.approx(0.075)
    assert load.answer_by(1.0) == pytest.approx(0.775)
    assert load.answer_by(10.0) == pytest.approx(8.0)      # a long bound keeps its 80%


async def test_loop_lateness_is_probed_while_flights_run():
    """While a flight runs, a blocked event loop is noticed (the probe's timer fires late by at least the block)."""
    import time as _time

    from lsp.flight import Load

    load = Load()
    load.started()
    await asyncio.sleep(0)                                 # the probe starts its first sleep
    _time.sleep(0.3)                                       # the loop is blocked: the probe's timer is late
    await asyncio.sleep(Load.LAG_TICK_S * 3)
    assert load.lag_s() >= 0.2
    assert load.answer_by(1.0) == pytest.approx(max(0.5, 1.0 - 3 * load.lag_s()), abs=0.05)
    load.ended(None, 1)
    await asyncio.sleep(Load.LAG_TICK_S * 3)
    assert load._probe.done()                              # no flights: the probe stops


async def test_a_new_engine_request_is_refused_busy_while_the_event_loop_is_behind_but_the_cache_still_answers():
    """Issue 13: with completions running and the event loop running its timers late (over 10% of answerBoundMs), a
    request that needs a new engine request is answered "busy" at once, without planning a prompt or starting one;
    typing through the last ghost text is still answered (no engine work)."""
    from lsp.lifecycle import Busy

    lc, host, engine, cfg = make(step_s=0.05, answerBoundMs=1000)
    host.start(cfg.engine)
    others = [asyncio.ensure_future(lc.complete(Snapshot(u, "y = ", 1), 4)) for u in ("a", "b")]
    await wait_for(lambda: lc.load.running == 2)
    lc.load.note_lag(0.3)                                   # a timer ran 300 ms late
    with pytest.raises(Busy, match="behind on its messages"):
        await lc.complete(Snapshot("u", "x = ", 1), 4)
    assert lc.stats.refused_behind == 1 and lc.stats.engine_requests == 2 and len(engine.prompts) <= 2
    lc._shown["v"] = _Shown("z = ", "", "foo()")
    assert (await lc.complete(Snapshot("v", "z = f", 2), 5)).text == "oo()"
    for t in others:
        t.cancel()
    await wait_for(lambda: lc.load.running == 0)


async def test_an_engine_request_aborted_before_its_end_raises_the_estimate_to_its_running_time():
    """Continuous typing supersedes every engine request before it ends; without a measurement from them the
    estimate stayed empty and every keystroke planned and started a new one (all aborted). An abort after t seconds
    says the request takes at least t."""
    lc, host, engine, cfg = make(step_s=0.05)
    host.start(cfg.engine)
    t = asyncio.ensure_future(lc.complete(Snapshot("a", "x = ", 1), 4))
    await wait_for(lambda: lc.load.running == 1)
    await asyncio.sleep(0.1)
    lc.document_closed("a")
    with pytest.raises(asyncio.CancelledError):
        await t
    await wait_for(lambda: lc.load.running == 0)
    assert lc.load.slot_s is not None and lc.load.slot_s >= 0.1


async def test_past_the_bound_a_flight_running_alone_is_busy_once_another_completion_is_asked_for():
    """Alone past the bound means no load to shed only while nobody else asks: another request coming (here one
    refused at once because the loop is behind, so that no second flight runs) makes the waiting one busy."""
    from lsp.lifecycle import Busy

    lc, host, engine, cfg = make(step_s=0.05, answerBoundMs=20)   # 13 steps of 50 ms, bound at 16 ms
    host.start(cfg.engine)
    waiting = asyncio.ensure_future(lc.complete(Snapshot("u", "x = ", 1), 4))
    await wait_for(lambda: lc.stats.bound_alone == 1)
    lc2 = Lifecycle(host, lambda: cfg)                             # another connection of the same engine
    lc2._shown["v"] = _Shown("z = ", "", "foo()")
    assert (await lc2.complete(Snapshot("v", "z = f", 2), 5)).text == "oo()"   # a cache hit asks the engine nothing
    assert not waiting.done()
    lc.load.slot_s = 10.0                                          # a new engine request is refused at once ...
    with pytest.raises(Busy, match="would take about"):
        await lc2.complete(Snapshot("w", "y = ", 1), 4)
    with pytest.raises(Busy, match="answerBoundMs 20"):            # ... and asking was enough to end the wait
        await waiting
    assert lc.stats.busy_at_bound == 1
    await wait_for(lambda: lc.load.running == 0)


async def test_warm_up_prefills_the_keystrokes_prompt_and_the_keystroke_takes_over():
    """completer/didMoveCursor (lsp/warm.py): the prompt a keystroke at the cursor gets, as an engine request for no
    tokens, in the background; the document's next completion cancels it (the embedded engine keeps what it
    filled: tests/completer/engine/torch) and sends the same prompt."""
    lc, host, engine, cfg = make()
    host.start(cfg.engine)
    await host.get(5)
    engine.warm_s = 1.0
    snap = Snapshot("u", "def f(x):\n    return \n", 1)
    assert lc.warm(snap, 21) is True
    await wait_for(lambda: engine.requests)
    warm = engine.requests[0]
    assert warm.max_new_tokens == 0 and warm.cache_key == "u" and lc.stats.warmups == 1
    assert (await lc.complete(snap, 21)).text == "hello_world()"
    assert engine.requests[1].prompt == warm.prompt and engine.requests[1].max_new_tokens > 0
    assert warm.request_id in engine.abort_calls and lc.stats.warmups_cancelled == 1
    engine.warm_s = 0.0                                    # one that ends by itself is not cancelled
    assert lc.warm(Snapshot("u", "def f(x):\n    return \n", 2), 10) is True
    await wait_for(lambda: len(engine.requests) == 3 and not lc._warming)
    assert lc.stats.warmups == 2 and lc.stats.warmups_cancelled == 1


async def test_no_warm_up_while_a_completion_runs_when_off_or_before_the_engine():
    lc, host, engine, cfg = make(step_s=0.05)
    snap = Snapshot("u", "x = ", 1)
    assert lc.warm(snap, 4) is False                       # engine not loaded: nothing to fill
    host.start(cfg.engine)
    await host.get(5)
    t = asyncio.ensure_future(lc.complete(snap, 4))
    await wait_for(lambda: lc.stats.engine_requests == 1)
    assert lc.warm(snap, 4) is False                       # the completion's own request fills the cache
    t.cancel()
    off, host2, engine2, cfg2 = make(warmOnCursor=False)
    host2.start(cfg2.engine)
    await host2.get(5)
    assert off.warm(snap, 4) is False and engine2.requests == []
