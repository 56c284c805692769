"""Two ``vllm serve`` replicas behind ``vllm-router`` (consistent hashing on the session header the remote backend
sends): one user's keystrokes stay on one replica (its prefix cache), users spread over both, and when a replica
dies the user's next keystrokes are served by the other one, through the same engine."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest

from completer.engine import EngineConfig, Request, create_engine
from completer.engine.remote.engine import ServerUnavailable
from completer.engine.remote.serve import VLLMServer
from tests.helpers import engine_contract as contract
from tests.remote.conftest import free_port, serve_house

TEXT = "def mean(values):\n    total = 0\n    for v in values:\n        total += v\n    return total / len(values)\n"


@pytest.fixture(scope="module")
def replicas_and_router(vllm_bin, tmp_path_factory):
    logs = tmp_path_factory.mktemp("router")
    reps = [serve_house(vllm_bin, free_port(), logs / f"replica{i}.log").start() for i in range(2)]
    router_bin = str(Path(vllm_bin).with_name("vllm-router"))
    port = free_port()
    router = VLLMServer([router_bin, "--host", "127.0.0.1", "--port", str(port), "--policy", "consistent_hash",
                         "--worker-urls", *(r.url for r in reps), "--health-check-interval-secs", "1",
                         "--health-failure-threshold", "1", "--worker-startup-timeout-secs", "900",
                         "--prometheus-port", str(free_port())],   # its metrics exporter: 29000 unless given
                        f"http://127.0.0.1:{port}", logs / "router.log")
    try:
        for r in reps:
            r.wait_ready(900)
        router.start().wait_ready(120, path="/v1/models")
        yield reps, router
    finally:
        router.stop()
        for r in reps:
            r.stop()


def served(reps) -> list[float]:
    return [r.metrics()["vllm:request_success_total"] for r in reps]


async def type_in(engine, user: str, n: int, start: int = 0) -> None:
    """``n`` keystrokes: the document's text one character longer each time, a short completion at the end."""
    for i in range(start, start + n):
        await contract.collect(engine, Request(f"{user}-{i}", TEXT[: 40 + i], max_new_tokens=4,
                                               cache_key="file:///mean.py"))


async def test_one_users_keystrokes_stay_on_one_replica_and_survive_its_death(replicas_and_router):
    reps, router = replicas_and_router
    engines = {u: create_engine(EngineConfig(backend="remote", url=router.url, model="house:v2/target",
                                             client_id=f"{u}@ci", timeout_s=30)) for u in
               ("alice", "bob", "carol", "dave", "erin", "frank")}
    try:
        per_user = {}
        for user, engine in engines.items():
            before = served(reps)
            await type_in(engine, user, 5)
            after = served(reps)
            per_user[user] = [a - b for a, b in zip(after, before)]
        for user, got in per_user.items():
            assert sorted(got) == [0, 5], f"{user}'s 5 keystrokes went to replicas {got}"
        homes = {user: got.index(5) for user, got in per_user.items()}
        assert set(homes.values()) == {0, 1}, f"every user on one replica: {homes}"

        alice, home = engines["alice"], homes["alice"]
        reps[home].stop(signal.SIGKILL)                          # alice's replica dies
        other = reps[1 - home]
        before = other.metrics()["vllm:request_success_total"]
        deadline, errors, done = time.monotonic() + 60, [], 0
        while done < 5 and time.monotonic() < deadline:          # the router notices within its health checks
            try:
                await type_in(alice, "alice-after", 1, start=done)
                done += 1
            except ServerUnavailable as e:                       # at most a moment of errors naming the router
                assert router.url in str(e)
                errors.append(str(e))
                await asyncio.sleep(0.5)
        assert done == 5, f"alice was not served after her replica died: {errors[-3:]}"
        assert other.metrics()["vllm:request_success_total"] - before >= 5
    finally:
        for engine in engines.values():
            await engine.close()
