"""A real ``vllm serve`` (vLLM's CPU build from the environment ``tests/vllm/setup-cpu.sh`` makes, ``.venv-vllm``)
serving the shipped house v2 target, which vLLM loads as a Llama checkpoint (``completer.models.resolve_model``
dequantises it once into the cache), for the remote backend's tests.

Without that environment these tests skip with the reason; in CI (``CI=true``) they fail instead: CI installs it.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from completer.engine.remote.serve import VLLMServer, cpu_environment, find_vllm

SERVED = "house-v2"


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def vllm_or_skip() -> str:
    vllm = find_vllm()
    if vllm is None:
        why = "no vLLM environment (bash tests/vllm/setup-cpu.sh makes .venv-vllm; or set COMPLETER_VLLM)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI must run the remote backend against real vLLM: {why}")
        pytest.skip(why)
    return vllm


def serve_house(vllm: str, port: int, log: Path, *extra: str) -> VLLMServer:
    """``vllm serve`` of house v2 (fp32, eager: starts in tens of seconds on a CPU) on ``port``, not yet started."""
    from completer.models import resolve_model

    folder = resolve_model("house:v2/target")
    cmd = [vllm, "serve", str(folder), "--served-model-name", SERVED, "--host", "127.0.0.1", "--port", str(port),
           "--dtype", "float32", "--enforce-eager", "--enable-log-requests", "--max-num-seqs", "64", *extra]
    return VLLMServer(cmd, f"http://127.0.0.1:{port}", log, env=cpu_environment())


@pytest.fixture(scope="session")
def vllm_bin() -> str:
    return vllm_or_skip()


@pytest.fixture(scope="session")
def house_server(vllm_bin, tmp_path_factory):
    """One ``vllm serve`` for the session (the tests that stop a server start their own)."""
    server = serve_house(vllm_bin, free_port(), tmp_path_factory.mktemp("vllm") / "serve.log").start()
    try:
        server.wait_ready(900)
        yield server
    finally:
        server.stop()
