"""The embedded PyTorch backend: our Llama/Qwen2 model, speculative decoding, KV-cache reuse, streaming.

``TorchEngine`` loads the models and implements the Engine protocol; its work is split the way vLLM splits an
engine: ``input`` (prompt ids, stop ids, the request's running state), ``scheduling`` (one background task steps
every running request in turn, in the one model thread), ``output`` (token bookkeeping, detokenization, streaming),
with ``caches`` (the documents' KV caches), ``costs`` (what a step costs, whether speculation pays) and ``faults``
(the supervisor's test hook) beside them. ``generate()`` only reads the request's queue. An abort (or closing the
generator) marks the request; the scheduler drops it before its next step, so it costs at most the step already
running, and frees its caches.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import os
import threading
import time
from typing import AsyncIterator

import torch

from ... import healing
from ...models import kernels, resolve_model
from ...models.llama import LlamaForCausalLM, PackedLinear
from ...models.tokenizer import load_tokenizer
from ...prompt import template_for_model
from ...speculative import DraftProposer
from ..base import Chunk, Counters, EngineError, Request, open_model
from ..choice import resolve as resolve_speculation
from ..config import EngineConfig
from .caches import Caches, DocumentCaches
from .costs import StepCosts
from . import heap
from .faults import StepFaults
from .input import InputProcessing, Running
from .output import OutputProcessing
from .scheduling import Scheduling
from .threads import ThreadChooser

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


_MODEL_THREAD = "torch-engine"
_model_thread: concurrent.futures.ThreadPoolExecutor | None = None
_model_thread_lock = threading.Lock()


def model_thread() -> concurrent.futures.ThreadPoolExecutor:
    """The one thread of this process that runs every TorchEngine's model work: loading, packing and steps.

    Why one: torch's CPU kernels (and the engine's own, matvec.cpp) split work with OpenMP, and each thread that
    starts a parallel region gets its own OpenMP thread pool; with a second pool alive in the process (the main
    thread's, made while loading the model, or another engine's worker) a 2-thread decode step took ~4.5 ms instead
    of ~1.1 ms on a 2-core box, so the thread chooser kept 1 thread. Engines of one process share the CPU anyway."""
    global _model_thread
    with _model_thread_lock:                  # engines may be built from several threads at once: still one thread
        if _model_thread is None:
            _model_thread = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=_MODEL_THREAD)
        return _model_thread


def _on_model_thread() -> bool:
    return threading.current_thread().name.startswith(_MODEL_THREAD)


class _ModelExecutor(concurrent.futures.Executor):
    """One engine's handle on ``model_thread()``: shutting it down stops this engine's use of the thread (and
    waits for the work already queued there), not the other engines'."""

    def __init__(self):
        self._shut = False

    def submit(self, fn, /, *args, **kwargs):
        if self._shut:
            raise RuntimeError("cannot schedule new futures after shutdown")
        return model_thread().submit(fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._shut = True
        if wait and not _on_model_thread():
            model_thread().submit(lambda: None).result()


def _in_model_thread(fn, *args):
    if _on_model_thread():
        return fn(*args)
    return model_thread().submit(fn, *args).result()


def pick_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise EngineError(f"device {device!r} requested but CUDA is not available")
    return torch.device(device)


def pick_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if dtype not in DTYPES:
        raise EngineError(f"dtype must be one of auto, {', '.join(DTYPES)}; got {dtype!r}")
    return DTYPES[dtype]


class TorchEngine(InputProcessing, Scheduling, OutputProcessing, StepCosts, StepFaults):
    name = "torch"

    def __init__(self, config: EngineConfig):
        config, self.speculation_choice = resolve_speculation(config)   # "auto": what `completer tune` measured
        self.config = config
        _in_model_thread(self._load, config)      # torch's thread pools belong to the thread that steps (model_thread)
        self.stop_ids = self._stop_ids()
        # token healing's table of the vocabulary, now rather than on the first healed keystroke (SmolLM2's 49k
        # tokens: ~350 ms that the first keystroke of a fresh server waited for; the house vocabulary: a few ms)
        healing.prepare(self.tokenizer)
        self._init_state()
        heap.give_back()                          # what the load freed, not kept resident (completer/engine/torch/heap.py)

    @functools.cached_property
    def prompt_s_per_token(self) -> float:
        """Seconds per token of a cold prompt here (``_measure_prompt``), measured on first use: the server's
        engine host asks at the engine's start (``pipeline.prepare``); the CLI, which keeps the whole budget, never
        does (~0.2 s of SmolLM2's start)."""
        return _in_model_thread(self._measure_prompt)

    def _load(self, config: EngineConfig) -> None:
        """The models, loaded on one intra-op thread: loading is copies and casts of a few MB each, whose parallel
        regions on a busy 2-core machine wait for a second thread that is not scheduled (packing the house model's
        weights took 1-8 s with two threads at load 20, 0.06-0.09 s with one: bench/results/start/)."""
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            self._load_models(config)
        finally:
            torch.set_num_threads(threads)

    def _load_models(self, config: EngineConfig) -> None:
        self.device = pick_device(config.device)
        self.dtype = pick_dtype(config.dtype, self.device)
        self.model_path, self.tokenizer = open_model(config.model)
        blocks = config.quantization in (None, "gguf")       # a GGUF's own blocks where the kernel reads them
        self.target = LlamaForCausalLM.from_pretrained(self.model_path, self.device, self.dtype, blocks=blocks)
        if config.quantization == "gguf" and self.target.packing != "gguf":
            raise EngineError(f"quantization='gguf' needs a GGUF model whose weights are all Q4_0/Q4_1/Q8_0, on a "
                              f"float32 CPU with the engine's kernels ({config.model!r}; kernels: "
                              f"{kernels.reason() or 'built'})")
        vocab = self.tokenizer.get_vocab_size(with_added_tokens=True)
        self.n_vocab = min(vocab, self.target.config.vocab_size)
        self.max_model_len = self.target.config.max_position_embeddings   # the backend's limits, as VLLMEngine's
        self.draft: LlamaForCausalLM | None = None
        if "draft" in config.speculation:
            try:
                draft_path = resolve_model(config.draft)
            except FileNotFoundError as e:
                raise EngineError(f"draft model: {e}") from e
            dtok = load_tokenizer(draft_path) if (draft_path / "tokenizer.json").is_file() else self.tokenizer
            if dtok.get_vocab(with_added_tokens=True) != self.tokenizer.get_vocab(with_added_tokens=True):
                raise EngineError(f"draft model {config.draft!r} has a different vocabulary than target "
                                  f"{config.model!r}; speculative decoding needs a shared tokenizer")
            self.draft = LlamaForCausalLM.from_pretrained(draft_path, self.device, self.dtype, blocks=blocks)
            self.n_vocab = min(self.n_vocab, self.draft.config.vocab_size)
            self.proposer = DraftProposer(self.draft, self.n_vocab)
        self.packing = self._packing(config.quantization)
        for model in (self.target, self.draft):
            if model is not None and self.packing and model.packing is None:
                model.pack_(self.packing)
        self.packing = self.target.packing or self.packing
        self.threads = (ThreadChooser(config.threads or os.cpu_count() or 1, config.adaptive_threads)
                        if self.device.type == "cpu" else None)

    @torch.inference_mode()
    def _measure_prompt(self) -> float:
        """Seconds per token of a cold prompt here: the best of two 64-token forwards on a fresh cache with the most
        threads the engine may use (~0.2 s of SmolLM2's start on 2 cores, ~10 ms of the house model's). What
        ``pipeline.prompt_budget`` sizes the prompt by (setting coldPromptMs): measured once, so the budget, and
        with it the prompt's start that the KV reuse keys on, stays the same for the engine's life."""
        n = max(1, min(64, self.target.config.max_position_embeddings - 1))
        ids = torch.tensor([[i % self.n_vocab for i in range(n)]], dtype=torch.long, device=self.device)
        if self.threads is not None:
            torch.set_num_threads(self.threads.candidates[-1])
        best = float("inf")
        for _ in range(2):
            cache = self.target.new_cache(n + 1)
            t0 = time.perf_counter()
            self.target(ids, cache=cache, last_only=True)
            if self.device.type == "cuda":
                torch.cuda.synchronize()
            best = min(best, time.perf_counter() - t0)
        return best / n

    def _init_state(self) -> None:
        self._spec_costs: tuple[float, float] | None = None     # (c, v), see _speculation_costs
        self._plain_step_s: float | None = None                 # measured time of a plain decode step
        self._plain_measured = False                            # _plain_step_s comes from a real decode step
        self.speculation_switched_off = 0                       # requests whose speculation stopped paying
        self.batched_steps = 0                                  # forwards that stepped several requests at once
        self.batched_verifications = 0                          # speculative verifications done in those
        # special tokens (FIM sentinels, file separators): prompt lookup never matches or proposes across them
        self.sentinels = frozenset(i for i, t in self.tokenizer.get_added_tokens_decoder().items() if t.special)
        # test hook (supervisor.inject_step_fault): every model step after this many raises InjectedFault
        self.fault_after_steps: int | None = None
        self.fault_state = {"steps": 0, "raised": 0}
        self._counters = Counters()
        self._running: dict[str, Running] = {}
        self._caches = DocumentCaches(self._new_caches, self.config.prefix_cache)
        self._pool = _ModelExecutor()
        self._task: asyncio.Task | None = None
        self._wakeup: asyncio.Event | None = None
        self._closed = False

    def _packing(self, quantization: str | None) -> str | None:
        """The PackedLinear kind for decode/verification steps (see EngineConfig.quantization), or None."""
        if quantization == "gguf":
            quantization = None                                # what is not in blocks (a house draft): fp16
        if quantization == "none" or self.device.type != "cpu" or self.dtype != torch.float32:
            if quantization in ("fp16", "int8"):
                raise EngineError(f"quantization={quantization!r} needs device cpu and dtype float32 in the torch "
                                  f"backend (got {self.device.type}, {self.dtype})")
            return None
        kind = quantization or "fp16"
        reason = PackedLinear.available(kind)
        if reason and quantization is None:
            return None                                        # the default falls back to float32 matmuls
        if reason:
            raise EngineError(f"quantization={quantization!r}: {reason}")
        return kind

    def _phase(self, phase: str, units: int = 1):
        """Thread count for this model step, measured (ThreadChooser); nothing to choose off the CPU."""
        return self.threads.run(phase, units) if self.threads is not None else contextlib.nullcontext({})

    def thread_stats(self) -> dict:
        return self.threads.snapshot() if self.threads is not None else {}

    # --- Engine protocol ----------------------------------------------------------------------------------
    async def generate(self, request: Request) -> AsyncIterator[Chunk]:
        if self._closed:
            raise EngineError("engine is closed")
        if request.request_id in self._running:
            raise EngineError(f"request id {request.request_id!r} is already running")
        run = Running(request, asyncio.Queue(), heal_left=request.heal)
        run.prompt = self._prompt_ids(request)
        self._running[request.request_id] = run
        self._counters.requests_started += 1
        self._ensure_scheduler()
        self._wakeup.set()
        try:
            while True:
                chunk = await run.queue.get()
                if isinstance(chunk, BaseException):
                    raise chunk
                if run.aborted and not chunk.finished:   # queued before the abort: not for the consumer
                    continue
                yield chunk
                if chunk.finished:
                    return
        finally:
            if not run.done:                      # consumer went away (GeneratorExit / CancelledError)
                self._mark_aborted(run)

    async def abort(self, request_id: str) -> None:
        run = self._running.get(request_id)
        if run is not None and not run.done:
            self._mark_aborted(run)

    def counters(self) -> dict:
        return self._counters.snapshot()

    @functools.cached_property
    def prompt_template(self) -> str:
        """The target model's FIM template, read off its folder once (ValueError when it shows none)."""
        return template_for_model(self.model_path)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    async def close(self) -> None:
        self._closed = True
        for run in list(self._running.values()):
            self._mark_aborted(run)
        if self._task is not None and not self._task.done():
            self._wakeup.set()
            try:
                await asyncio.wait_for(self._task, timeout=30)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                self._task.cancel()
        self._pool.shutdown(wait=True)
        self._caches.clear()

    # --- caches -------------------------------------------------------------------------------------------
    def _new_caches(self) -> Caches:
        return Caches(self.target.new_cache(), self.draft.new_cache() if self.draft is not None else None)

    def _take_caches(self, key: str | None) -> Caches:
        return self._caches.take(key)

    def _release(self, run: Running) -> None:
        caches, run.caches = run.caches, None
        if not self._closed:
            self._caches.keep(run.request.cache_key, caches)
