"""vLLM's own data parallelism behind one endpoint (``vllm serve --data-parallel-size 2``, two engines): with
``replicas=2`` the remote backend's ``X-data-parallel-rank`` (a stable hash of client and document) puts all of a
user's keystrokes on one engine, and users on both."""

from __future__ import annotations

import re
import urllib.request

import pytest

from completer.engine import EngineConfig, Request, create_engine
from completer.engine.remote import affinity
from tests.helpers import engine_contract as contract
from tests.remote.conftest import free_port, serve_house

DOC = "file:///dp.py"
TEXT = "def area(width, height):\n    result = width * height\n    return result\n"


@pytest.fixture(scope="module")
def dp_server(vllm_bin, tmp_path_factory):
    server = serve_house(vllm_bin, free_port(), tmp_path_factory.mktemp("dp") / "serve.log",
                         "--data-parallel-size", "2").start()
    try:
        server.wait_ready(900)
        yield server
    finally:
        server.stop()


def per_engine(server) -> dict[str, float]:
    """Finished requests per engine index (vLLM labels its metrics with engine="i")."""
    text = urllib.request.urlopen(server.url + "/metrics", timeout=10).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("vllm:request_success_total{"):
            engine = re.search(r'engine="(\d+)"', line).group(1)
            out[engine] = out.get(engine, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


async def test_the_rank_header_keeps_each_user_on_one_engine(dp_server):
    users = [f"user{i}@ci" for i in range(4)]
    ranks = {u: affinity.rank_for(u, DOC, 2) for u in users}
    assert set(ranks.values()) == {0, 1}, ranks            # these four users hash to both engines
    for user in users:
        engine = create_engine(EngineConfig(backend="remote", url=dp_server.url, model="house:v2/target",
                                            client_id=user, replicas=2))
        try:
            before = per_engine(dp_server)
            for i in range(3):                                 # three keystrokes in the same document
                await contract.collect(engine, Request(f"{user}-{i}", TEXT[: 30 + i], max_new_tokens=4,
                                                       cache_key=DOC))
            after = per_engine(dp_server)
        finally:
            await engine.close()
        delta = {e: after.get(e, 0) - before.get(e, 0) for e in set(after) | set(before)}
        assert delta.get(str(ranks[user])) == 3 and sum(delta.values()) == 3, (user, ranks[user], delta)
