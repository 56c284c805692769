"""The embedded PyTorch backend: our Llama/Qwen2 model, speculative decoding, KV-cache reuse, streaming.

One background scheduler task (vLLM ``async_llm.py`` style) owns every running request and steps them in turn,
one decode/speculation step each, so requests interleave step by step. Model steps run in a single worker thread
(off the event loop, so a language server on the same loop stays responsive). ``generate()`` only reads the
request's queue. An abort (or closing the generator) marks the request; the scheduler drops it before its next
step, so it costs at most the step already running, and frees its caches.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import json
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import AsyncIterator

import torch

from ... import healing
from ...models import resolve_model
from ...models.llama import SMALL_STEP, KVCache, LlamaForCausalLM, PackedLinear
from ...models.tokenizer import load_tokenizer
from ...prompt import ALL_END_TOKENS, template_for_model
from ...speculative import (BreakEven, DraftProposer, Sampling, common_prefix, decode_one, make_schedule, prefill,
                           propose_ngram, speculative_step, verify_greedy, verify_sampling)
from ..base import (Chunk, Counters, EngineError, InjectedFault, Request, apply_stop, check_prompt, held_back,
                   open_model)
from ..choice import resolve as resolve_speculation
from ..config import EngineConfig
from .threads import ThreadChooser

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
BURST_S = 0.025         # longest run of model steps for one request between visits to the event loop
STOP_TAIL_TOKENS = 8    # a burst looks for the request's stop strings in the text of this many last tokens
CACHE_KEYS = 8          # documents whose KV caches are kept for reuse (LRU)
DETOK_CONTEXT = 4       # prompt tokens decoded with the output so that leading spaces/merges come out right


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


@dataclass
class _Caches:
    target: KVCache
    draft: KVCache | None


@dataclass
class _Running:
    request: Request
    queue: asyncio.Queue
    prompt: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)        # prompt + generated (committed)
    generated: list[int] = field(default_factory=list)
    caches: _Caches | None = None
    sampling: Sampling | None = None
    schedule: object = None
    emitted: int = 0                                        # characters of output text already streamed
    pending_ids: list[int] = field(default_factory=list)    # token ids not yet sent (their text is held back)
    payoff: BreakEven | None = None                        # whether speculation still pays (never slower than none)
    draft_c: float = 0.0                                    # cost per draft token of the current step
    aborted: bool = False
    done: bool = False
    heal_left: str = ""                                     # token healing: characters still to re-type


class TorchEngine:
    name = "torch"

    def __init__(self, config: EngineConfig):
        config, self.speculation_choice = resolve_speculation(config)   # "auto": what `completer tune` measured
        self.config = config
        _in_model_thread(self._load, config)      # torch's thread pools belong to the thread that steps (model_thread)
        self.stop_ids = self._stop_ids()
        self._init_state()

    def _load(self, config: EngineConfig) -> None:
        self.device = pick_device(config.device)
        self.dtype = pick_dtype(config.dtype, self.device)
        self.model_path, self.tokenizer = open_model(config.model)
        self.target = LlamaForCausalLM.from_pretrained(self.model_path, self.device, self.dtype)
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
            self.draft = LlamaForCausalLM.from_pretrained(draft_path, self.device, self.dtype)
            self.n_vocab = min(self.n_vocab, self.draft.config.vocab_size)
            self.proposer = DraftProposer(self.draft, self.n_vocab)
        self.packing = self._packing(config.quantization)
        for model in (self.target, self.draft):
            if model is not None and self.packing:
                model.pack_(self.packing)
        self.threads = (ThreadChooser(config.threads or os.cpu_count() or 1, config.adaptive_threads)
                        if self.device.type == "cpu" else None)

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
        self._running: dict[str, _Running] = {}
        self._cache_lru: OrderedDict[str, _Caches] = OrderedDict()
        self._pool = _ModelExecutor()
        self._task: asyncio.Task | None = None
        self._wakeup: asyncio.Event | None = None
        self._closed = False

    def _packing(self, quantization: str | None) -> str | None:
        """The PackedLinear kind for decode/verification steps (see EngineConfig.quantization), or None."""
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
        run = _Running(request, asyncio.Queue(), heal_left=request.heal)
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
        self._cache_lru.clear()

    # --- helpers ------------------------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=True).ids

    def _stop_ids(self) -> set[int]:
        ids = set()
        for t in ALL_END_TOKENS:
            i = self.tokenizer.token_to_id(t)
            if i is not None:
                ids.add(i)
        eos = json.loads((self.model_path / "config.json").read_text()).get("eos_token_id")
        ids.update([eos] if isinstance(eos, int) else (eos or []))
        return ids

    def _prompt_ids(self, request: Request) -> list[int]:
        ids = self.encode(request.prompt) if isinstance(request.prompt, str) else list(request.prompt)
        check_prompt(ids, n_vocab=self.n_vocab, positions=self.target.config.max_position_embeddings)
        return ids

    def _mark_aborted(self, run: _Running) -> None:
        if run.aborted or run.done:
            return
        run.aborted = True
        if self._wakeup is not None:
            self._wakeup.set()

    def _ensure_scheduler(self) -> None:
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._wakeup = asyncio.Event()
            self._task = loop.create_task(self._scheduler(), name="torch-engine-scheduler")

    # --- the scheduler ------------------------------------------------------------------------------------
    async def _scheduler(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            for run in list(self._running.values()):
                if run.aborted:
                    self._finish_aborted(run)
            if not self._running:
                if self._closed:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            batch = [r for r in self._running.values() if self._batchable(r)] if self.config.batch_decode else []
            if len(batch) > 1:                                 # plain decode steps of several requests: one forward
                try:
                    results = await loop.run_in_executor(self._pool, self._batch_step, batch)
                except Exception as e:  # a failing step fails the requests in it, not the engine
                    for run in batch:
                        if not run.done:
                            self._fail(run, e)
                    continue
                for run, (new, reason) in zip(batch, results):
                    self._after_step(run, new, reason)
            stepped = {id(r) for r in batch} if len(batch) > 1 else set()
            for run in list(self._running.values()):          # one step (or burst) each, round robin
                if run.done or id(run) in stepped:
                    continue
                if run.aborted:                                # release its caches before a successor takes them
                    self._finish_aborted(run)
                    continue
                try:
                    new, reason = await loop.run_in_executor(self._pool, self._burst, run)
                except Exception as e:  # a failing request must not take the engine down
                    self._fail(run, e)
                    continue
                self._after_step(run, new, reason)

    def _after_step(self, run: _Running, new: list[int], reason: str | None) -> None:
        if run.aborted:                                        # aborted during its steps: drop the output
            self._finish_aborted(run)
            return
        try:
            self._emit(run, new, reason)
        except Exception as e:  # e.g. detokenization: fail this request, keep the scheduler alive
            if not run.done:
                self._fail(run, e)

    def _batchable(self, run: _Running) -> bool:
        """A request whose next step can share forwards with others' (``_batch_step``): prefilled, no healing
        constraint (each healing step constrains the next), its cache holding every committed token but the last
        (as every step leaves it), and, when speculation is judged by measured time (greedy requests), a plain
        step already timed (until then a request steps alone, timed, as ``_decode_step`` does)."""
        return (not run.done and not run.aborted and run.caches is not None and not run.heal_left
                and len(run.tokens) < self.target.config.max_position_embeddings
                and run.caches.target.length == len(run.tokens) - 1
                and run.caches.target.tokens[-1:] == run.tokens[-2:-1]
                and (self.config.speculation == "none" or not run.sampling.greedy or self._plain_measured))

    # runs in the worker thread
    @torch.inference_mode()
    def _batch_step(self, runs: list[_Running]) -> list[tuple[list[int], str | None]]:
        """One step for each of ``runs`` with shared forwards (issue 13, several clients on one CPU): the drafts
        of every request using the draft model in one draft forward per position (``DraftProposer.propose_batch``),
        n-gram lookups per request, then ONE target forward over every request's rows, packed
        (``LlamaForCausalLM.forward_packed``): [last token] for a plain step, [last token, *drafts] for a
        verification, each on its own cache. Each request is then accepted, rolled back and scheduled (adaptive k,
        break-even) as its own ``speculative_step`` / ``decode_one`` would, with the same tokens: every row is
        computed as it is alone. A shared step has no time of its own, so break-even judges it by the measured
        model costs (c, v) rather than by its seconds, and it is not a plain step's timing."""
        self._check_fault()
        ks = [self._spec_k(r) for r in runs]
        with self._phase("spec" if self.config.speculation != "none" else "step") as box:
            proposals = self._propose_batch(runs, ks)
            seqs = [[r.tokens[-1], *d] for r, (d, _) in zip(runs, proposals)]
            logits = self.target.forward_packed(seqs, [r.caches.target for r in runs])
            box["units"] = sum(len(s) for s in seqs)
        self.batched_steps += 1
        out = []
        for r, (drafts, q), lg in zip(runs, proposals, logits):
            lg = lg[:, :self.n_vocab]
            if not drafts:
                new = [r.sampling.sample(lg[0])]
            else:
                base = len(r.tokens) - 1
                if r.sampling.greedy:
                    accepted, extra = verify_greedy(drafts, lg)
                else:
                    accepted, extra = verify_sampling(drafts, r.sampling.probs(lg), q, r.sampling.generator)
                r.caches.target.truncate(base + 1 + accepted)          # roll back the rejected drafts
                new = [*drafts[:accepted], extra]
                self.batched_verifications += 1
                self._counters.record_draft(len(drafts), accepted)
                r.schedule.update(len(drafts), accepted)
                if r.payoff is not None:
                    r.payoff.update(len(drafts), accepted, r.draft_c)
                    if r.payoff.off:
                        self.speculation_switched_off += 1
            out.append(self._accept(r, new))
        return out

    def _spec_k(self, run: _Running) -> int:
        """How many tokens ``run``'s next step drafts: 0 for a plain step (speculation off, or stopped paying for
        it, or no plain step timed yet to judge it by, or one token left)."""
        if self.config.speculation == "none":
            return 0
        req = run.request
        k = min(run.schedule.k, req.max_new_tokens - len(run.generated) - 1,
                self.target.config.max_position_embeddings - len(run.tokens))
        # greedy requests only: switching on measured time changes which random draws a sampled request makes,
        # and a seeded request must come out the same every time (greedy output is the same either way)
        if run.payoff is None and run.sampling.greedy:
            c, v = self._speculation_costs()
            run.payoff = BreakEven(c, v, plain_step_s=self._plain_step_s)
        if k < 1 or (run.payoff is not None and (not run.payoff.pays() or not self._plain_measured)):
            return 0
        return k

    def _propose_batch(self, runs: list[_Running], ks: list[int]) -> list[tuple[list[int], torch.Tensor | None]]:
        """Each run's drafts for its k (``_propose``'s choice of method), the draft model's in shared forwards."""
        method = self.config.speculation
        res: list[tuple[list[int], torch.Tensor | None]] = [([], None)] * len(runs)
        need = []
        for i, (r, k) in enumerate(zip(runs, ks)):
            r.draft_c = 0.0
            if k < 1:
                continue
            if method in ("ngram", "draft+ngram"):
                drafts = propose_ngram(r.tokens, k, self.config.ngram_min, self.config.ngram_max, self.sentinels)
                if drafts or method == "ngram":
                    res[i] = (drafts, None)
                    continue
            need.append(i)
        if need:
            c = self._speculation_costs()[0]
            props = self.proposer.propose_batch([runs[i].caches.draft for i in need], [runs[i].tokens for i in need],
                                                [ks[i] for i in need], [runs[i].sampling for i in need])
            for i, prop in zip(need, props):
                runs[i].draft_c, res[i] = c, prop
        return res

    def _fail(self, run: _Running, e: Exception) -> None:
        run.done = True
        self._running.pop(run.request.request_id, None)
        self._release(run)
        self._counters.requests_finished += 1
        run.queue.put_nowait(e if isinstance(e, EngineError) else EngineError(f"{type(e).__name__}: {e}"))

    def _finish_aborted(self, run: _Running) -> None:
        run.done = True
        self._running.pop(run.request.request_id, None)
        self._counters.requests_aborted += 1
        self._counters.wasted_tokens += len(run.generated)
        self._release(run)
        run.queue.put_nowait(Chunk(run.request.request_id, finished=True, finish_reason="abort"))

    # runs in the worker thread: pure model work on this request's own state
    def _burst(self, run: _Running) -> tuple[list[int], str | None]:
        """Model steps for ``run`` back to back in the worker thread, for up to BURST_S, and the tokens they
        commit. Why: handing every step back to the event loop costs two thread wake-ups per token, and on a busy
        machine each wake-up waits for a time slice: the engine's decode took 17 ms/token where the model took
        3-4 ms. The burst ends early when the request finishes, is aborted, is healing (each step constrains the
        next), another request arrives (round robin resumes), no text has been streamed yet (the first chunk
        goes out after one step, as before), or the text reached one of the request's stop strings (the event loop
        ends the request there: without this a line completion's last chunk waited out the rest of the burst, up to
        BURST_S, generating tokens past its newline that nobody sees), so an abort still costs at most one step."""
        deadline = time.perf_counter() + BURST_S
        out: list[int] = []
        while True:
            new, reason = self._accept(run, self._step(run))
            out.extend(new)
            if (reason is not None or run.aborted or run.heal_left or len(self._running) > 1 or not run.emitted
                    or time.perf_counter() >= deadline or (new and self._at_stop(run))):
                return out, reason

    def _at_stop(self, run: _Running) -> bool:
        """Whether the last few generated tokens' text holds one of the request's stop strings (a cheap look at the
        tail; ``_emit`` on the event loop finds where it is and ends the request)."""
        stop = run.request.stop
        if not stop:
            return False
        tail = self.tokenizer.decode(run.generated[-STOP_TAIL_TOKENS:], skip_special_tokens=False)
        return any(s in tail for s in stop)

    def _step(self, run: _Running) -> list[int]:
        self._check_fault()
        req = run.request
        if run.caches is None:                                 # first step: take the document's caches, prefill
            run.caches = self._take_caches(req.cache_key)
            g = None
            if req.temperature > 0:
                g = torch.Generator(device=self.device)
                g.manual_seed(req.seed if req.seed is not None else torch.seed())
            run.sampling = Sampling(req.temperature, req.top_p, g)
            run.schedule = make_schedule(self.config.num_speculative_tokens, self.config.max_speculative_tokens)
            if req.max_new_tokens == 0:
                return []
            new = len(run.prompt) - common_prefix(run.caches.target, run.prompt)
            with self._phase("prompt", new) if new > SMALL_STEP else self._phase("step"):   # per token / per step
                first, reused = prefill(self.target, run.caches.target, run.prompt, run.sampling, self.n_vocab,
                                        self._healing(run))
            self._counters.prompt_tokens += len(run.prompt)
            self._counters.cached_prompt_tokens += reused
            run.tokens = list(run.prompt)
            return [first]
        return self._decode_step(run)

    def _decode_step(self, run: _Running) -> list[int]:
        if self.config.speculation == "none" or run.heal_left:   # healing steps are one constrained token each
            with self._phase("step"):
                return decode_one(self.target, run.caches.target, run.tokens, run.sampling, self.n_vocab,
                                  self._healing(run)).tokens
        k = self._spec_k(run)
        if k < 1:
            with self._phase("step"):
                return self._timed_plain_step(run)             # stopped paying; or no plain step timed yet
        run.draft_c = 0.0
        # speculative steps choose their threads apart from plain ones (a draft's forwards and a (k+1)-token
        # verification are not one-token steps), timed per forward position they run (1 + drafts)
        with self._phase("spec") as box:
            t0 = time.perf_counter()
            res = speculative_step(self.target, run.caches.target, run.tokens,
                                   lambda t, kk, s: self._propose(run, t, kk, s), k, run.sampling, self.n_vocab)
            seconds = time.perf_counter() - t0
            box["units"] = 1 + res.proposed
        if not res.proposed:                                   # no draft (no n-gram match): it was a plain step
            self._note_plain_step(seconds)
        if res.proposed:
            self._counters.record_draft(res.proposed, res.accepted)
            run.schedule.update(res.proposed, res.accepted)
            if run.payoff is not None:
                run.payoff.plain_step_s = self._plain_step_s
                run.payoff.update(res.proposed, res.accepted, run.draft_c, seconds)
                if run.payoff.off:
                    self.speculation_switched_off += 1
        return res.tokens

    def _timed_plain_step(self, run: _Running) -> list[int]:
        t0 = time.perf_counter()
        out = decode_one(self.target, run.caches.target, run.tokens, run.sampling, self.n_vocab).tokens
        self._note_plain_step(time.perf_counter() - t0)
        return out

    def _note_plain_step(self, seconds: float) -> None:
        """Running median-like estimate of a plain decode step's time (BreakEven's unit of cost): an exponential
        average that a single slow step (another process took the core) moves only a little."""
        s = self._plain_step_s if self._plain_measured else None
        self._plain_step_s = seconds if s is None else 0.9 * s + 0.1 * min(seconds, 3 * s)
        self._plain_measured = True

    @torch.inference_mode()
    def _speculation_costs(self) -> tuple[float, float]:
        """(c, v) for BreakEven, measured once on this machine: a draft forward over a target forward (one token
        at a few hundred cached positions), and a 5-token target forward (verification at k=4) over a 1-token one."""
        if self._spec_costs is None:
            import statistics

            def timed(model, cache, n, ids):
                ts = []
                for _ in range(7):
                    cache.truncate(len(ids))
                    t0 = time.perf_counter()
                    model(torch.tensor([[ids[-1]] * n], device=self.device), cache=cache, last_only=True)
                    ts.append(time.perf_counter() - t0)
                return statistics.median(ts)

            n = max(8, min(256, self.target.config.max_position_embeddings - 16))
            ids = [i % self.n_vocab for i in range(n)]
            cache = self.target.new_cache(len(ids) + 8)
            self.target(torch.tensor([ids], device=self.device), cache=cache, last_only=True)
            t1, t5 = timed(self.target, cache, 1, ids), timed(self.target, cache, 5, ids)
            c = 0.0
            if self.draft is not None:
                dcache = self.draft.new_cache(len(ids) + 8)
                self.draft(torch.tensor([ids], device=self.device), cache=dcache, last_only=True)
                c = timed(self.draft, dcache, 1, ids) / t1
            self._spec_costs = (c, max(1.0, t5 / t1))
            if self._plain_step_s is None:
                self._plain_step_s = t1                        # until plain steps are measured: the forward alone
        return self._spec_costs

    def _check_fault(self) -> None:
        if self.fault_after_steps is not None:
            self.fault_state["steps"] += 1
            if self.fault_state["steps"] > self.fault_after_steps:
                self.fault_state["raised"] += 1
                raise InjectedFault(f"injected fault at engine step {self.fault_state['steps']}")

    def _healing(self, run: _Running) -> tuple[int, ...]:
        """The token ids allowed while token healing still has characters to re-type (none: no constraint)."""
        return healing.allowed_tokens(self.tokenizer, run.heal_left, self.n_vocab) if run.heal_left else ()

    def _propose(self, run: _Running, tokens, k: int, sampling: Sampling):
        method = self.config.speculation
        if method in ("ngram", "draft+ngram"):
            drafts = propose_ngram(tokens, k, self.config.ngram_min, self.config.ngram_max, self.sentinels)
            if drafts or method == "ngram":
                return drafts, None                            # one-hot q
        run.draft_c = self._speculation_costs()[0]             # this step's drafts cost draft forwards
        return self.proposer.propose(run.caches.draft, tokens, k, sampling)

    def _take_caches(self, key: str | None) -> _Caches:
        if key is not None and self.config.prefix_cache and key in self._cache_lru:
            return self._cache_lru.pop(key)
        return _Caches(self.target.new_cache(), self.draft.new_cache() if self.draft is not None else None)

    def _release(self, run: _Running) -> None:
        caches, run.caches = run.caches, None
        key = run.request.cache_key
        if caches is None or key is None or not self.config.prefix_cache or self._closed:
            return
        self._cache_lru[key] = caches
        self._cache_lru.move_to_end(key)
        while len(self._cache_lru) > CACHE_KEYS:
            self._cache_lru.popitem(last=False)

    # --- back on the event loop: stream what the step produced --------------------------------------------
    def _commit(self, run: _Running, new: list[int]) -> None:
        self._emit(run, *self._accept(run, new))

    def _accept(self, run: _Running, new: list[int]) -> tuple[list[int], str | None]:
        """Token bookkeeping of one step (limits, stop tokens, healing progress): the tokens to commit and the
        finish reason, if any. Runs in the worker thread between the steps of a burst."""
        req = run.request
        reason = None
        if req.max_new_tokens == 0:
            reason = "length"
            new = []
        else:
            new = new[: req.max_new_tokens - len(run.generated)]
            for i, t in enumerate(new):
                if t in self.stop_ids:
                    new, reason = new[:i + 1], "stop"
                    break
        self._counters.generated_tokens += len(new)
        for t in new:
            if not run.heal_left:
                break
            run.heal_left = healing.advance(run.heal_left, self.tokenizer.decode([t], skip_special_tokens=False))
        run.tokens.extend(new)
        run.generated.extend(new)
        if reason is None and len(run.generated) >= req.max_new_tokens:
            reason = "length"
        if reason is None and len(run.tokens) >= self.target.config.max_position_embeddings:
            reason = "length"
        return new, reason

    def _emit(self, run: _Running, new: list[int], reason: str | None) -> None:
        """On the event loop: the text of everything committed so far, the chunk to stream, finishing."""
        req = run.request
        visible = [t for t in run.generated if t not in self.stop_ids]
        text = healing.strip_healed(self._detokenize(run, visible), req.heal)
        if text is None:                                       # still re-typing what the prompt was backed up by
            text = ""
        text, stopped = apply_stop(text, req.stop)
        if stopped:
            reason = "stop"
        if reason is None:
            if text.endswith("\ufffd"):                        # incomplete UTF-8 sequence: wait for more bytes
                text = text.rstrip("\ufffd")
            text = text[: len(text) - held_back(text, req.stop)]
        delta = text[run.emitted:] if len(text) > run.emitted else ""
        run.emitted = max(run.emitted, len(text))
        if reason is not None:
            run.done = True
            self._running.pop(req.request_id, None)
            self._counters.requests_finished += 1
            self._release(run)
        run.pending_ids.extend(t for t in new if t not in self.stop_ids)
        if delta or reason is not None:
            ids, run.pending_ids = tuple(run.pending_ids), []
            run.queue.put_nowait(Chunk(req.request_id, delta, ids, reason is not None, reason))

    def _detokenize(self, run: _Running, visible: list[int]) -> str:
        ctx = run.prompt[-DETOK_CONTEXT:]
        head = self.tokenizer.decode(ctx, skip_special_tokens=True)
        full = self.tokenizer.decode(ctx + visible, skip_special_tokens=True)
        if full.startswith(head) and not head.endswith("\ufffd"):
            return full[len(head):]
        return self.tokenizer.decode(visible, skip_special_tokens=True)
