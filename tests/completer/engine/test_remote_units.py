"""The remote backend's parts that need no inference server: settings, the request body, affinity, and a server
that is not there (a real refused connection: the editor gets an error naming the URL, and the same engine serves
once a server answers, tests/remote)."""

import socket

import pytest

from completer.engine import EngineConfig, EngineError, Request, create_engine
from completer.engine.remote import affinity
from completer.engine.remote.engine import ServerUnavailable, base_url, completion_body


def test_remote_needs_an_http_url():
    with pytest.raises(ValueError, match="needs url"):
        EngineConfig(backend="remote")
    with pytest.raises(ValueError, match="needs url"):
        EngineConfig(backend="remote", url="gpu-box:8000")
    assert EngineConfig(backend="remote", url="http://gpu-box:8000").url == "http://gpu-box:8000"


def test_remote_settings_are_refused_by_name_elsewhere():
    with pytest.raises(ValueError, match="url=.*remote backend"):
        EngineConfig(backend="torch", url="http://x:1")
    with pytest.raises(ValueError, match="replicas=2 is a setting of the remote backend"):
        EngineConfig(backend="torch", replicas=2)


def test_speculation_and_quantization_are_the_servers():
    with pytest.raises(ValueError, match="completer serve --speculation eagle3"):
        EngineConfig(backend="remote", url="http://x:1", speculation="eagle3")
    with pytest.raises(ValueError, match="quantization is the server's"):
        EngineConfig(backend="remote", url="http://x:1", quantization="fp8")
    with pytest.raises(ValueError, match="replicas must be an integer"):
        EngineConfig(backend="remote", url="http://x:1", replicas=-1)


def test_base_url_drops_v1_and_slashes():
    assert base_url("http://h:8000/v1/") == base_url("http://h:8000/") == "http://h:8000"


def test_completion_body_greedy_stream_with_stops():
    body = completion_body(Request("r", [1, 2, 3], max_new_tokens=7, stop=("\n\n",), top_p=0.5), "m", [1, 2, 3])
    assert body["prompt"] == [1, 2, 3] and body["model"] == "m" and body["max_tokens"] == 7
    assert body["temperature"] == 0 and body["top_p"] == 1.0          # greedy: top_p is meaningless
    assert body["stop"] == ["\n\n"] and body["stream"] is True and body["return_token_ids"] is True
    assert "seed" not in body and "allowed_token_ids" not in body


def test_completion_body_sampling_and_healing_step():
    req = Request("r", [1], max_new_tokens=9, stop=("x",), temperature=0.7, top_p=0.9, seed=3)
    body = completion_body(req, "m", [1, 5], stream=False, allowed=[5, 6], max_tokens=1)
    assert (body["temperature"], body["top_p"], body["seed"]) == (0.7, 0.9, 3)
    assert body["allowed_token_ids"] == [5, 6] and body["max_tokens"] == 1
    assert "stop" not in body and "stream_options" not in body        # a healing step is one token, no stops


def test_affinity_is_stable_and_spreads():
    a = affinity.headers_for("alice@h", "file:///a.py", 4)
    assert a == affinity.headers_for("alice@h", "file:///a.py", 4)       # same user + document: same replica
    assert a[affinity.SESSION_HEADER] == affinity.session_key("alice@h", "file:///a.py")
    assert affinity.RANK_HEADER not in affinity.headers_for("alice@h", "file:///a.py", 0)
    ranks = {affinity.rank_for(f"user{i}@h", "file:///a.py", 4) for i in range(64)}
    assert ranks == {0, 1, 2, 3}                                         # many users use every replica
    with pytest.raises(ValueError):
        affinity.rank_for("a", "b", 0)


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


async def test_server_down_is_an_error_naming_the_url():
    url = f"http://127.0.0.1:{_free_port()}"
    engine = create_engine(EngineConfig(backend="remote", url=url, timeout_s=5))
    try:
        for attempt in range(2):                  # every request answers at once, none hangs or kills the engine
            with pytest.raises(ServerUnavailable, match=f"inference server {url} unreachable"):
                async for _ in engine.generate(Request(f"r{attempt}", "def f(", max_new_tokens=4)):
                    pass
        assert isinstance(ServerUnavailable("x"), EngineError)
        assert engine.counters()["requests_started"] == 0
    finally:
        await engine.close()
