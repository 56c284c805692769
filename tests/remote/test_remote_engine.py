"""The remote backend against a real ``vllm serve`` (house v2 on vLLM's CPU build): the shared engine contract,
the prompt as the project's token ids, the server aborting a request whose stream the client closed (read from
the server's own metrics and log), and a server that goes away and comes back under the same engine."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from completer.engine import EngineConfig, Request, create_engine
from completer.engine.remote.engine import ServerUnavailable
from tests.helpers import engine_contract as contract
from tests.remote.conftest import SERVED, free_port, serve_house


@pytest.fixture
def make_remote(house_server):
    def make(speculation="none", **overrides):
        assert speculation in ("none", "auto"), "speculation is the server's with the remote backend"
        return create_engine(EngineConfig(backend="remote", url=house_server.url, model="house:v2/target",
                                          **overrides))
    return make


async def poll_metrics(server, until, seconds: float, every: float = 0.05, unless=lambda: False) -> dict:
    """The server's metrics, read every ``every`` s until ``until(metrics)`` holds, ``unless()`` is true or ``seconds``
    have passed; the last read."""
    deadline = time.monotonic() + seconds
    while True:
        m = server.metrics()
        if until(m) or unless() or time.monotonic() >= deadline:
            return m
        await asyncio.sleep(every)


async def test_abort_within_one_step(make_remote):
    await contract.check_abort_within_one_step(make_remote, max_step_tokens=16)


async def test_concurrent_requests(make_remote):
    await contract.check_concurrent_requests(make_remote, n=8)


async def test_token_healing(make_remote):
    await contract.check_token_healing(make_remote, speculations=("none",))


async def test_raced_healing_answers_as_the_healing_requests_do(make_remote):
    """Healing raced against the answer (the default) and healing by one-token constrained requests first: the same
    tokens and text for every healed prompt; at least one answered by the answer's own first tokens."""
    from completer import healing

    engine = make_remote()
    try:
        got = {}
        for race in (False, True):
            engine.heal_race = race
            for i, p in enumerate(contract.HEAL_PROMPTS):
                heal = healing.heal_point(p, engine.tokenizer)
                req = Request(f"race{race}-{i}", p[: len(p) - len(heal)], max_new_tokens=12, heal=heal)
                got.setdefault(i, []).append(await contract.collect(engine, req))
        raced = engine.counters()["heal_raced"]
    finally:
        await engine.close()
    for i, (plain, fast) in got.items():
        assert plain[:2] == fast[:2], f"prompt {i}: {plain} vs raced {fast}"
    assert raced >= 1


async def test_prompt_goes_as_the_projects_token_ids_and_stops_cut_the_text(make_remote, house_server):
    engine = make_remote()
    try:
        ids = engine.encode(contract.PROMPTS[0])
        text, out_ids, reason = await contract.collect(engine, Request("ids", ids, max_new_tokens=24))
        assert reason in ("stop", "length") and out_ids
        assert text == engine.tokenizer.decode(out_ids, skip_special_tokens=True)
        # the same request as text: the engine tokenizes it exactly so (the server never sees text)
        assert await contract.collect(engine, Request("text", contract.PROMPTS[0], max_new_tokens=24)) == \
            (text, out_ids, reason)
        stop = text[len(text) // 2: len(text) // 2 + 2]
        if stop.strip():
            cut, _, why = await contract.collect(engine, Request("stop", ids, max_new_tokens=24, stop=(stop,)))
            assert why == "stop" and cut == text[: text.index(stop)], (cut, stop, text)
        c = engine.counters()
        assert c["prompt_tokens"] >= 2 * len(ids) and c["requests_finished"] >= 2
    finally:
        await engine.close()
    assert house_server.metrics()["vllm:prompt_tokens_total"] > 0


async def test_closing_the_stream_aborts_the_request_on_the_server(make_remote, house_server):
    """A newer keystroke closes the stream: the server stops generating (vllm:num_requests_running back to 0 and
    its generated-token counter still) and logs the abort."""
    engine = make_remote()
    try:
        before = house_server.metrics()["vllm:generation_tokens_total"]    # the server is shared with other tests
        gen = engine.generate(Request("kill-me", contract.PROMPTS[2], max_new_tokens=1500))
        async for chunk in gen:
            if chunk.text:
                break
        # vLLM's frontend hands the chunk on before it records the step's gauges (it yields in between), so the
        # gauge can lag the first chunk: poll it (the request has 1500 tokens to go, seconds on this machine)
        await poll_metrics(house_server, lambda m: m["vllm:num_requests_running"] >= 1, 5, every=0.02)
        assert house_server.metrics()["vllm:num_requests_running"] >= 1, "the request is not running on the server"
        await gen.aclose()
        m = await poll_metrics(house_server, lambda m: m["vllm:num_requests_running"] == 0, 20)
        assert m["vllm:num_requests_running"] == 0, "the server still runs the closed request"
        await asyncio.sleep(1.0)
        assert house_server.metrics()["vllm:generation_tokens_total"] == m["vllm:generation_tokens_total"]
        assert m["vllm:generation_tokens_total"] - before < 1500
        for _ in range(40):                                  # the log line is written as the abort happens
            if "Aborted request" in house_server.log.read_text(errors="replace") and "kill-me" in \
                    house_server.log.read_text(errors="replace"):
                break
            await asyncio.sleep(0.25)
        log = house_server.log.read_text(errors="replace")
        assert any("Aborted request" in line for line in log.splitlines()), house_server.tail()
        assert engine.counters()["requests_aborted"] == 1
    finally:
        await engine.close()


async def test_server_down_then_up_is_served_by_the_same_engine(vllm_bin, tmp_path):
    """No server at the URL: each request fails at once with an error naming the URL; once a server starts there,
    the same engine (no restart of the language server) completes; a server killed mid-stream fails that request
    with an error naming the URL, and the next request after its restart completes."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    engine = create_engine(EngineConfig(backend="remote", url=url, model="house:v2/target", timeout_s=30))
    server = serve_house(vllm_bin, port, tmp_path / "serve.log")
    try:
        with pytest.raises(ServerUnavailable, match=f"{url} unreachable"):
            await contract.collect(engine, Request("down", contract.PROMPTS[0], max_new_tokens=4))
        server.start().wait_ready(900)
        text, ids, reason = await contract.collect(engine, Request("up", contract.PROMPTS[0], max_new_tokens=8))
        assert reason in ("stop", "length") and ids
        chunks = []

        async def consume():
            async for chunk in engine.generate(Request("mid", contract.PROMPTS[2], max_new_tokens=1500)):
                chunks.append(chunk)

        streaming = asyncio.get_running_loop().create_task(consume())
        # the server dies while it generates: killed once its gauge shows the request running (1500 tokens are
        # seconds of work here), not on the first chunk the client reads, which a busy server may send late
        await poll_metrics(server, lambda m: m["vllm:num_requests_running"] >= 1, 60, unless=streaming.done)
        assert not streaming.done(), f"the request ended before the server was killed: {chunks[-1:]}"
        assert server.proc.poll() is None, f"the server at {url} had exited:\n{server.tail()}"
        server.stop(signal.SIGKILL)
        try:
            await asyncio.wait_for(streaming, 60)
        except ServerUnavailable as e:
            assert url in str(e)
        else:
            pytest.fail(f"the stream went on after the server at {url} was killed: {len(chunks)} chunks, the "
                        f"last {chunks[-1] if chunks else None}; its log:\n{server.tail()}")
        server.start().wait_ready(900)
        again = await contract.collect(engine, Request("back", contract.PROMPTS[0], max_new_tokens=8))
        assert again == (text, ids, reason)
    finally:
        await engine.close()
        server.stop()
