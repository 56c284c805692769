"""Fixtures for the vLLM backend: ``make_engine`` on the shipped house pair, on a CUDA GPU with vLLM installed.

Here and in CI (no vLLM, no GPU) the GPU tests skip with the reason; the CPU unit tests always run."""

from __future__ import annotations

import importlib.util

import pytest

from completer.engine import EngineConfig
from tests.helpers.tiny_models import house_missing


def vllm_installed() -> bool:
    """A real vLLM, not a namespace package of the same name (a folder ``vllm`` on sys.path)."""
    spec = importlib.util.find_spec("vllm")
    return spec is not None and spec.origin is not None


def gpu_skip_reason() -> str | None:
    if not vllm_installed():
        return "vLLM is not installed (optional extra 'vllm'; needs a CUDA GPU)"
    import torch

    if not torch.cuda.is_available():
        return "no CUDA GPU"
    missing = house_missing()
    if missing:
        return f"house pair incomplete: {missing}"
    return None


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
