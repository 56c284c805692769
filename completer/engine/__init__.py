"""Inference backends behind one interface (see ``base.Engine``)."""

from __future__ import annotations

from .base import Chunk, Counters, Engine, EngineError, Request
from .config import EngineConfig

__all__ = ["Chunk", "Counters", "Engine", "EngineConfig", "EngineError", "Request", "create_engine"]


def create_engine(config: EngineConfig) -> Engine:
    """Build the backend ``config.backend`` names (imports are lazy: vLLM is an optional extra). Each backend
    resolves ``speculation="auto"`` to the setting measured for these models here (``choice.resolve``)."""
    if config.backend == "torch":
        from .torch.engine import TorchEngine

        return TorchEngine(config)
    if config.backend == "vllm":
        from .vllm.engine import VLLMEngine

        return VLLMEngine(config)
    if config.backend == "remote":
        from .remote.engine import RemoteEngine

        return RemoteEngine(config)
    raise ValueError(f"unknown backend {config.backend!r}")
