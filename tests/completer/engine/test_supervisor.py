"""The engine supervisor over a real embedded TorchEngine (tiny random-weight pair) with an injected step fault."""

from __future__ import annotations

import asyncio

import pytest

from completer.engine import EngineConfig, EngineError, Request
from completer.engine.base import RequestError
from completer.engine.supervisor import SupervisedEngine, inject_step_fault

PROMPT = "def add(a, b):\n    return"


@pytest.fixture
def supervised(tiny_pair):
    def make(**kw) -> SupervisedEngine:
        cfg = EngineConfig(model=str(tiny_pair[0]), draft=str(tiny_pair[1]), device="cpu")
        s = SupervisedEngine(cfg, backoff_s=0.01, **kw)
        return s

    return make  # each test closes its engine inside its own event loop


async def run(engine, rid: str, n: int = 12, prompt=PROMPT) -> tuple[str, str]:
    text, reason = "", None
    async for c in engine.generate(Request(rid, prompt, max_new_tokens=n)):
        text += c.text
        reason = c.finish_reason
    return text, reason


async def test_failure_mid_request_errors_all_inflight_then_restarts(supervised):
    s = supervised()
    reference = await run(s, "ref")
    state = inject_step_fault(s.inner, after_steps=3)     # the engine dies after 3 more steps, for good
    results = await asyncio.gather(*(run(s, f"r{i}", 40) for i in range(3)), return_exceptions=True)
    assert state["raised"] >= 1
    assert all(isinstance(r, EngineError) for r in results), results
    assert all("engine failed" in str(r) and "InjectedFault" in str(r) for r in results)
    after = await run(s, "after")                         # waits for the restart, then succeeds
    assert after == reference                             # the rebuilt engine is the same model, greedy
    sup = s.counters()["supervisor"]
    assert sup["engine_failures"] == 1 and sup["restarts"] == 1 and sup["generation"] == 1
    assert sup["requests_failed"] == 3 and sup["inflight"] == 0
    assert s.counters()["requests_started"] == s.counters()["requests_finished"] == 1   # the new engine's own
    await s.close()


async def test_repeated_failures_back_off_and_recover(supervised):
    s = supervised()
    for _ in range(2):
        inject_step_fault(s.inner, after_steps=0)
        with pytest.raises(EngineError, match="engine failed"):
            await run(s, "x")
        await run(s, "ok")
    sup = s.counters()["supervisor"]
    assert sup["restarts"] == 2 and sup["engine_failures"] == 2 and sup["requests_finished"] == 2
    await s.close()


async def test_restart_failure_is_retried(supervised, tiny_pair):
    s = supervised()
    calls = {"n": 0}
    real = s._factory

    def flaky(cfg):                                       # the first rebuild fails (e.g. device still busy)
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("device busy")
        return real(cfg)

    s._factory = flaky
    inject_step_fault(s.inner, 0)
    with pytest.raises(EngineError):
        await run(s, "x")
    assert (await run(s, "y"))[1] in ("stop", "length")
    sup = s.counters()["supervisor"]
    assert sup["restart_failures"] == 1 and sup["restarts"] == 1
    await s.close()


async def test_limits_are_clear_errors_and_do_not_restart(supervised):
    s = supervised(max_prompt_tokens=20, max_new_tokens=32, max_inflight=2)
    with pytest.raises(EngineError, match="exceeds the limit of 20 prompt tokens"):
        await run(s, "long", prompt="x = 1\n" * 50)
    with pytest.raises(EngineError, match="max_new_tokens=100 exceeds the limit of 32"):
        await run(s, "many", n=100)
    with pytest.raises(EngineError, match="empty prompt"):
        await run(s, "empty", prompt="")
    with pytest.raises(EngineError, match="token ids out of range"):
        await run(s, "ids", prompt=[1, 2, 10**6])
    sup = s.counters()["supervisor"]
    assert sup["requests_refused"] == 4 and sup["engine_failures"] == 0 and sup["restarts"] == 0
    assert (await run(s, "fine"))[1] in ("stop", "length")


async def test_context_limit_and_load_shedding(supervised):
    s = supervised(max_inflight=2)
    ctx, n_vocab = s.max_model_len, s.n_vocab             # the engine's own limits, as vLLM's are read from vLLM
    assert s.counters()["supervisor"]["limits"]["max_model_len"] == ctx > 0
    with pytest.raises(RequestError, match=f"exceeds the model's context of {ctx} positions"):
        await run(s, "ctx", prompt=list(range(1, 50)) * (ctx // 49 + 1))
    with pytest.raises(RequestError, match=f"out of range 0..{n_vocab - 1}"):
        await run(s, "vocab", prompt=[1, n_vocab])
    assert (await run(s, "fits", prompt=[1] * (ctx - 12)))[1] in ("stop", "length")   # at the limit: served
    sup = s.counters()["supervisor"]
    assert sup["engine_failures"] == 0 and sup["restarts"] == 0 and sup["requests_refused"] == 2
    gens = [s.generate(Request(f"g{i}", PROMPT, max_new_tokens=200)) for i in range(2)]
    firsts = [await g.__anext__() for g in gens]          # two requests running
    assert not any(f.finished for f in firsts)           # greedy, deterministic: both still running
    with pytest.raises(EngineError, match="server busy: 2 requests in flight"):
        await run(s, "third")
    for g in gens:
        await g.aclose()                                  # the consumer goes away: aborted in the engine
    await asyncio.sleep(0.2)
    c = s.counters()
    assert c["supervisor"]["requests_shed"] == 1 and c["supervisor"]["inflight"] == 0
    assert c["requests_started"] == c["requests_finished"] + c["requests_aborted"]   # none left running
    assert c["requests_aborted"] == 2
    await s.close()
