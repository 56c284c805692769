"""The vLLM backend: the ``Engine`` interface on vLLM's v1 ``AsyncLLM`` (engine core in its own process).

Speculation is vLLM's own (``speculative_config``): ``draft_model`` (target + small draft), ``eagle3`` (a one-layer
drafter on the target's hidden states, ``completer train-drafter``), ``dflash`` (a small decoder drafting all k
tokens in one forward on the target's hidden states, ``completer train-drafter --method dflash``), ``ngram``
(prompt lookup on the CPU) or
``ngram_gpu`` (the same on the GPU, which keeps vLLM's async scheduling) or ``suffix`` (suffix decoding: drafts from
suffix trees of the prompt and of the answers served before, arctic-inference; no async scheduling). ``quantization`` (e.g. fp8) is passed to
vLLM for the target, ``draft_quantization`` and ``draft_tensor_parallel_size`` inside ``speculative_config``; all are
checked before the engine starts. Automatic prefix caching is on unless ``prefix_cache=False``; CUDA graphs (and vLLM's torch.compile) are on
unless ``enforce_eager=True``. Prompts are tokenized here with the model's ``tokenizer.json`` exactly as the embedded
backend does, so both backends see the same token ids. Draft/accepted counts per position come from the scheduler's
``SpecDecodingStats`` through a stat logger passed to ``AsyncLLM`` (they arrive with each engine step's outputs).

vLLM is an optional extra (``pip install completer[vllm]``); importing this module does not need it, building a
``VLLMEngine`` does. The pure helpers (``engine_kwargs``, ``sampling_kwargs``, ``merge_spec_stats``) are tested
without vLLM.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from typing import Any, AsyncIterator

from ... import healing
from ...models import resolve_model
from ...prompt import template_for_model
from ..base import Chunk, Counters, EngineError, Request, RequestError, admit, apply_stop, held_back, open_model
from ..choice import resolve as resolve_speculation
from ..config import EngineConfig
from .settings import engine_kwargs

log = logging.getLogger(__name__)

# vLLM's V2 model runner (0.26 and the 0.32 CPU build checked; the default without speculation and with the EAGLE family) keeps a request's
# allowed_token_ids in a fixed table of 1024 per request (vllm/v1/worker/gpu/sample/logit_bias.py,
# MAX_NUM_ALLOWED_TOKEN_IDS) and raises ValueError for more *inside the engine core's model step*: nothing checks it
# when the request is added, so the whole engine core dies (EngineDeadError) instead of the request failing. Token
# healing of a common piece (" " after a word: 3037 of the house vocabulary's 8192 tokens start with a space) asks
# for more. The V1 runner (draft_model / ngram speculation) uses a vocabulary-wide mask and has no such limit.
V2_MAX_ALLOWED_TOKEN_IDS = 1024


def allowed_ids_limit(vllm_config: Any) -> int | None:
    """The most ``allowed_token_ids`` one request may carry on the model runner vLLM chose for ``vllm_config``
    (None: no limit). Read from vLLM when it says; the V2 runner's table size otherwise."""
    if not getattr(vllm_config, "use_v2_model_runner", True):
        return None
    try:
        from vllm.v1.worker.gpu.sample.logit_bias import MAX_NUM_ALLOWED_TOKEN_IDS
    except Exception:
        return V2_MAX_ALLOWED_TOKEN_IDS
    return int(MAX_NUM_ALLOWED_TOKEN_IDS)


def request_failure(e: Exception) -> EngineError:
    """What a vLLM exception in a request's path is: a ValueError is vLLM refusing the request (RequestError: its
    fault, the engine is fine and stays up); anything else an engine error."""
    if isinstance(e, ValueError):
        return RequestError(f"bad request: {e}")
    return EngineError(f"vLLM engine error: {type(e).__name__}: {e}")


def sampling_kwargs(request: Request) -> dict:
    """``SamplingParams`` keyword arguments for ``request`` (``output_kind`` is added by the engine)."""
    kw: dict[str, Any] = dict(max_tokens=request.max_new_tokens, temperature=request.temperature,
                              top_p=request.top_p, stop=list(request.stop), seed=request.seed)
    if request.temperature == 0:
        kw["top_p"] = 1.0                # greedy: top_p is meaningless and vLLM would warn
    return kw


def race_safe(request: Request) -> bool:
    """Whether a healed request may be served by one unconstrained request whose output starts with the re-typed
    characters (``VLLMEngine._heal_race``): greedy (then its first tokens, when allowed, are the constrained
    steps' own), and no stop string that could match where the re-typed characters are (vLLM checks stops on the
    whole output; after healing's own requests the main one sees only what follows them)."""
    heal = request.heal
    return request.temperature == 0 and not any(s and s in heal for s in request.stop) and \
        held_back(heal, request.stop) == 0


async def _after(first: Any, stream: Any) -> AsyncIterator[Any]:
    """``first`` (when not None, an output already read from ``stream``), then the rest of ``stream``."""
    if first is not None:
        yield first
    async for out in stream:
        yield out


def merge_spec_stats(counters: Counters, stats: Any) -> None:
    """Add one engine step's ``vllm.v1.spec_decode.metrics.SpecDecodingStats`` (summed over the step's requests)
    to ``counters``. Reads only plain attributes so it is testable without vLLM."""
    if stats is None or not getattr(stats, "num_drafts", 0):
        return
    for name, add in (("draft_per_position", stats.num_draft_tokens_per_pos),
                      ("accepted_per_position", stats.num_accepted_tokens_per_pos)):
        lst = getattr(counters, name)
        if len(lst) < len(add):
            lst.extend([0] * (len(add) - len(lst)))
        for i, n in enumerate(add):
            lst[i] += int(n)
    counters.draft_tokens += int(stats.num_draft_tokens)
    counters.accepted_tokens += int(stats.num_accepted_tokens)


def _stat_logger_factory(counters: Counters):
    """A per-engine vLLM stat logger factory that feeds ``counters`` (imports vLLM)."""
    from vllm.v1.metrics.loggers import StatLoggerBase

    class CountersLogger(StatLoggerBase):
        def __init__(self, vllm_config, engine_index: int = 0):
            self.engine_index = engine_index

        def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx: int = 0):
            if scheduler_stats is not None:
                merge_spec_stats(counters, scheduler_stats.spec_decoding_stats)

        def log_engine_initialized(self):
            pass

    return lambda vllm_config, engine_index=0: CountersLogger(vllm_config, engine_index)


def token_input(prompt_token_ids: list[int]) -> dict:
    """The engine input for a prompt of token ids in vLLM's current form, as ``vllm.inputs.tokens_input`` makes it
    (what vLLM's own OpenAI server passes to ``AsyncLLM.generate``): used where vLLM is not imported (tests)."""
    return {"type": "token", "prompt_token_ids": prompt_token_ids}


class VLLMEngine:
    """``Engine`` on vLLM's ``AsyncLLM``. ``engine_overrides`` are extra vLLM engine arguments (benchmarks)."""

    name = "vllm"
    n_vocab: int | None = None       # the model's vocabulary, read from vLLM at start
    max_allowed_ids: int | None = V2_MAX_ALLOWED_TOKEN_IDS   # the most allowed_token_ids one request may carry
    # (None: no limit); set at start from the model runner vLLM chose
    _heal_unconstrained = 0          # healing steps served unconstrained because their allowed set was too large
    _heal_raced = 0                  # healed requests whose own first tokens re-typed the text (no healing request)
    heal_race = True                 # race the main request against the first healing step (``_heal_race``)
    _prompt = staticmethod(token_input)   # vllm.inputs.tokens_input once vLLM is imported

    def __init__(self, config: EngineConfig, **engine_overrides: Any) -> None:
        try:
            from vllm import SamplingParams
            from vllm.engine.arg_utils import AsyncEngineArgs
            from vllm.sampling_params import RequestOutputKind
            from vllm.v1.engine.async_llm import AsyncLLM
        except ImportError as e:
            raise EngineError(f"backend 'vllm' needs vLLM (pip install 'completer[vllm]'; a CUDA GPU): {e}") from e
        config, self.speculation_choice = resolve_speculation(config)   # "auto": what `completer tune` measured
        self.config = config
        self.model_path, self.tokenizer = open_model(config.model)
        try:
            self.draft_path = (resolve_model(config.draft) if config.speculation == "draft" else
                               resolve_model(config.drafter) if config.speculation in ("eagle3", "dflash") else None)
        except FileNotFoundError as e:
            raise EngineError(str(e)) from e
        try:
            self.kwargs = engine_kwargs(config, self.model_path, self.draft_path, **engine_overrides)
        except ValueError as e:
            raise EngineError(str(e)) from e
        self._SamplingParams = SamplingParams
        self._DELTA = RequestOutputKind.DELTA
        self._counters = Counters()
        self._active: dict[str, str] = {}          # request id -> the id of its vLLM request now running
        self._closed = False
        log.info("starting vLLM AsyncLLM: %s", self.kwargs)
        try:
            self.llm = AsyncLLM.from_engine_args(AsyncEngineArgs(**self.kwargs),
                                                 stat_loggers=[_stat_logger_factory(self._counters)])
        except Exception as e:
            raise EngineError(f"vLLM engine failed to start: {type(e).__name__}: {e}") from e
        self.max_model_len = self.llm.model_config.max_model_len
        self.n_vocab = self.llm.model_config.get_vocab_size()   # ids past it are a per-request error, not a crash
        self.max_allowed_ids = allowed_ids_limit(self.llm.vllm_config)
        from vllm.inputs import tokens_input

        # vLLM's processed form for token ids ({"type": "token", ...}): AsyncLLM.generate takes it as it is; a raw
        # TokensPrompt goes through InputProcessor's deprecated path ("Passing raw prompts ... is deprecated")
        self._prompt = tokens_input             # an instance attribute: not bound as a method
        # vLLM's engine core is a separate process: if this process ends without close() (an unhandled signal
        # path, sys.exit from a thread), shut it down at interpreter exit so it never outlives us holding the GPU
        import atexit

        atexit.register(self._shutdown_at_exit)
        healing.prepare(self.tokenizer)             # token healing's vocabulary table, before the first keystroke

    def _shutdown_at_exit(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                self.llm.shutdown()
            except Exception:
                pass

    # --- Engine protocol ----------------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=True).ids

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def counters(self) -> dict:
        return {**self._counters.snapshot(), "heal_unconstrained": self._heal_unconstrained,
                "heal_raced": self._heal_raced}

    @functools.cached_property
    def prompt_template(self) -> str:
        """The target model's FIM template, read off its folder once (ValueError when it shows none)."""
        return template_for_model(self.model_path)

    async def generate(self, request: Request) -> AsyncIterator[Chunk]:
        rid = request.request_id
        c = self._counters
        ids = admit(request, closed=self._closed, running=self._active, encode=self.encode, n_vocab=self.n_vocab,
                    positions=self.max_model_len, counters=c)
        if request.max_new_tokens == 0:
            c.requests_finished += 1
            yield Chunk(rid, finished=True, finish_reason="length")
            return
        stream, first = None, None
        if request.heal:                                # token healing
            try:
                raced = await self._heal_race(request, ids) if self.heal_race and race_safe(request) else None
                if isinstance(raced, tuple):            # the main request's own first tokens healed the prompt
                    stream, first = raced
                else:                                   # constrained steps (the first perhaps taken), then the rest
                    heal_ids, extra, tail = await self._heal(request, ids, first_step=raced)
            except (asyncio.CancelledError, GeneratorExit):
                c.requests_aborted += 1                 # started, so it must end as finished or aborted (the
                raise                                   # 50-client load left 2741 of 3844 counted as running)
            except Exception as e:                      # vLLM refused a healing step, or failed
                c.requests_aborted += 1
                raise request_failure(e) from e
            if stream is None:
                ids, c.generated_tokens = ids + heal_ids + tail, c.generated_tokens + len(heal_ids)
                extra, stopped = apply_stop(extra, request.stop)
                left = request.max_new_tokens - len(heal_ids)
                if stopped or left <= 0:
                    c.requests_finished += 1
                    yield Chunk(rid, extra, tuple(heal_ids), True, "stop" if stopped else "length")
                    return
                if extra or heal_ids:
                    yield Chunk(rid, extra, tuple(heal_ids))
                request = dataclasses.replace(request, max_new_tokens=left, heal="")
        vid = f"{rid}#race" if first is not None else rid     # vLLM's id of the request streaming the answer
        if stream is None:
            params = self._SamplingParams(**sampling_kwargs(request), output_kind=self._DELTA)
            stream = self.llm.generate(self._prompt(prompt_token_ids=ids), params, rid)
        self._active[rid] = vid
        generated, done, seen = 0, False, False
        try:
            async for out in _after(first, stream):
                if not seen and out.num_cached_tokens:
                    c.cached_prompt_tokens += out.num_cached_tokens
                seen = True
                o = out.outputs[0]
                new = tuple(o.token_ids)
                generated += len(new)
                c.generated_tokens += len(new)
                reason = None
                if out.finished:
                    done = True
                    reason = o.finish_reason if o.finish_reason in ("stop", "length") else "abort"
                    if reason == "abort":
                        c.requests_aborted += 1
                        c.wasted_tokens += generated
                    else:
                        c.requests_finished += 1
                if new or o.text or out.finished:
                    yield Chunk(rid, o.text, new, out.finished, reason)
                # after the finished output vLLM's generator ends by itself, which ends this loop
        except (asyncio.CancelledError, GeneratorExit):
            if not done:
                done = True
                c.requests_aborted += 1
                c.wasted_tokens += generated
                await self.llm.abort(vid)
            raise
        except Exception as e:                        # vLLM rejected the request (its fault), or failed
            done = True
            c.requests_aborted += 1                   # started, so it ends as finished or aborted
            raise request_failure(e) from e
        finally:
            self._active.pop(rid, None)
            await stream.aclose()                   # vLLM's generator aborts its request if it is still running

    async def _heal_race(self, request: Request, ids: list[int]):
        """Token healing without a request of its own when the model agrees with what was typed: the main request
        starts unconstrained from the backed-up prompt and, beside it in the same engine steps, the first
        constrained healing step. When the main request's first tokens re-type the removed characters, each one in
        its step's allowed set, they are the tokens the constrained steps pick (greedy: the argmax over the whole
        vocabulary, when allowed, is the argmax over the allowed set), so it goes on as the answer, its first
        output's text without the re-typed characters: returns (its stream, that output). Otherwise it is
        aborted and the constrained step's token is returned (``int``; healing goes on from it as in
        :meth:`_heal`), or None when no step could be raced (an allowed set the model runner cannot take)."""
        allowed = healing.allowed_tokens(self.tokenizer, request.heal, self.n_vocab)
        if not allowed or (self.max_allowed_ids is not None and len(allowed) > self.max_allowed_ids):
            return None
        rid, c = request.request_id, self._counters
        step = self.llm.generate(self._prompt(prompt_token_ids=ids), self._SamplingParams(
            **dict(sampling_kwargs(request), max_tokens=1, stop=[]), allowed_token_ids=list(allowed),
            output_kind=self._DELTA), f"{rid}#heal0")
        main = self.llm.generate(self._prompt(prompt_token_ids=ids), self._SamplingParams(
            **sampling_kwargs(request), output_kind=self._DELTA), f"{rid}#race")   # its own id: never reused
        self._active[rid] = f"{rid}#race"
        kept, step_done = False, False
        try:
            first = await anext(main, None)
            o = first.outputs[0] if first is not None else None
            toks = list(o.token_ids) if o is not None else []
            left, text, n = request.heal, "", 0
            for t in toks:                          # the healing steps these tokens answer, while they do
                if t not in healing.allowed_tokens(self.tokenizer, left, self.n_vocab):
                    break
                piece = self.tokenizer.decode([t], skip_special_tokens=False)
                text, left, n = text + piece, healing.advance(left, piece), n + 1
                if not left:
                    break
            if n and not left and o.text.startswith(request.heal):   # (vLLM's text: cut at a stop, if any)
                o.text = o.text[len(request.heal):]
                kept = True
                self._heal_raced += 1
                return main, first
            c.wasted_tokens += len(toks)
            got: list[int] = []
            async for out in step:                  # computed beside the main request's first step
                got.extend(out.outputs[0].token_ids)
            step_done = True
            return got[0] if got else None
        finally:
            if not kept:
                self._active.pop(rid, None)
                await self.llm.abort(f"{rid}#race")
                await main.aclose()
            if not step_done:
                await self.llm.abort(f"{rid}#heal0")    # finished by now, or of no use
            await step.aclose()

    async def _heal(self, request: Request, ids: list[int],
                    first_step: int | None = None) -> tuple[list[int], str, list[int]]:
        """Token healing on vLLM: (the healing token ids, the text they add after ``request.heal``, prompt ids to
        append after them). vLLM's ``allowed_token_ids`` holds for a whole request, so each constrained step is a
        one-token request of its own (usually one or two; prefix caching makes their prefills nearly free).

        A step whose allowed set is larger than the model runner takes (``max_allowed_ids``) is not constrained:
        healing stops there and the characters still to re-type go back into the prompt as plain tokens (the
        prompt as it was before healing backed it up), so the request is served as without healing rather than
        sent to vLLM, whose engine core would die on it. ``first_step``: the first step's token when
        :meth:`_heal_race` has it already."""
        left, new, text = request.heal, [], ""
        if first_step is not None:                  # the first step's token, taken already (``_heal_race``)
            piece = self.tokenizer.decode([first_step], skip_special_tokens=False)
            new, text, left = [first_step], piece, healing.advance(left, piece)
        while left and len(new) < request.max_new_tokens:
            allowed = healing.allowed_tokens(self.tokenizer, left, self.n_vocab)   # ids past the model's
            # vocabulary would fail inside vLLM's engine core (it checks them against the tokenizer's length only)
            if not allowed:
                break
            if self.max_allowed_ids is not None and len(allowed) > self.max_allowed_ids:
                self._heal_unconstrained += 1
                return new, "", self.tokenizer.encode(left, add_special_tokens=False).ids
            kw = dict(sampling_kwargs(request), max_tokens=1, stop=[])
            params = self._SamplingParams(**kw, allowed_token_ids=list(allowed), output_kind=self._DELTA)
            got: list[int] = []
            sub = f"{request.request_id}#heal{len(new)}"
            async with contextlib.aclosing(self.llm.generate(self._prompt(prompt_token_ids=ids + new), params, sub)) as s:
                async for out in s:
                    got.extend(out.outputs[0].token_ids)
            if not got:
                break
            piece = self.tokenizer.decode(got[:1], skip_special_tokens=False)
            new.append(got[0])
            text += piece
            left = healing.advance(left, piece)
        return new, healing.strip_healed(text, request.heal) or "", []

    async def abort(self, request_id: str) -> None:
        if request_id in self._active and not self._closed:
            await self.llm.abort(self._active[request_id])        # generate() then ends with finish_reason "abort"

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._active:
            await self.llm.abort(list(self._active.values()))
        self.llm.shutdown()
        import atexit

        atexit.unregister(self._shutdown_at_exit)
