"""Scheduling of the torch engine (vLLM ``async_llm.py`` style): one background task owns every running request and
steps them in turn, one decode/speculation step (or a burst of them, up to ``BURST_S``) each, so requests interleave
step by step; plain decode steps of several requests share one forward (``_batch_step``). Model steps run in the
engine's model thread, off the event loop. An aborted request is dropped before its next step, so an abort costs at
most the step already running, and its caches are released. What each step drafts (n-gram lookup, the draft model)
and whether speculation still pays (``BreakEven``, from ``costs``) is decided here too.
"""

from __future__ import annotations

import asyncio
import time

import torch

from ... import healing
from ...models.llama import SMALL_STEP
from ...speculative import (BreakEven, Sampling, catch_up, common_prefix, decode_one, make_schedule, prefill,
                            propose_ngram, speculative_step, verify_greedy, verify_sampling)
from ..base import Chunk, EngineError
from .input import Running

BURST_S = 0.025         # longest run of model steps for one request between visits to the event loop
# A prompt's tokens per model step (a longer one is prefilled in chunks, ``_prefill_step``): an abort or another
# request waits for one chunk at most (SmolLM2 on 2 AVX2 cores: ~2.4 ms a token, so ~0.3 s; the house model ~10x less)
PREFILL_CHUNK = 128
# the chunk of a step that measures another thread count than the prompt phase's best (``ThreadChooser.trial``):
# one thread's samples cost two 128-token chunks at ~1.6x the time on a document's cold prompt (issue 29)
TRIAL_CHUNK = 32


class Scheduling:
    """TorchEngine's scheduler and model steps (a mixin: it drives the engine's models, caches and counters)."""

    def _ensure_scheduler(self) -> None:
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._wakeup = asyncio.Event()
            self._task = loop.create_task(self._scheduler(), name="torch-engine-scheduler")

    def _mark_aborted(self, run: Running) -> None:
        if run.aborted or run.done:
            return
        run.aborted = True
        if self._wakeup is not None:
            self._wakeup.set()

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

    def _after_step(self, run: Running, new: list[int], reason: str | None) -> None:
        if run.aborted:                                        # aborted during its steps: drop the output
            self._finish_aborted(run)
            return
        try:
            self._emit(run, new, reason)
        except Exception as e:  # e.g. detokenization: fail this request, keep the scheduler alive
            if not run.done:
                self._fail(run, e)

    def _batchable(self, run: Running) -> bool:
        """A request whose next step can share forwards with others' (``_batch_step``): prefilled, no healing
        constraint (each healing step constrains the next), its cache holding every committed token but the last
        (as every step leaves it), and, when speculation is judged by measured time (greedy requests), a plain
        step already timed (until then a request steps alone, timed, as ``_decode_step`` does)."""
        return (not run.done and not run.aborted and run.caches is not None and not run.heal_left
                and len(run.tokens) < self.target.config.max_position_embeddings
                and run.caches.target.length == len(run.tokens) - 1
                and run.caches.target.tokens[-1:] == run.tokens[-2:-1]
                and (self.config.speculation == "none" or not run.sampling.greedy or self._plain_measured))

    @torch.inference_mode()
    def _batch_step(self, runs: list[Running]) -> list[tuple[list[int], str | None]]:
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

    def _spec_k(self, run: Running) -> int:
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

    def _propose_batch(self, runs: list[Running], ks: list[int]) -> list[tuple[list[int], torch.Tensor | None]]:
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

    def _fail(self, run: Running, e: Exception) -> None:
        run.done = True
        self._running.pop(run.request.request_id, None)
        self._release(run)
        self._counters.requests_finished += 1
        run.queue.put_nowait(e if isinstance(e, EngineError) else EngineError(f"{type(e).__name__}: {e}"))

    def _finish_aborted(self, run: Running) -> None:
        run.done = True
        self._running.pop(run.request.request_id, None)
        self._counters.requests_aborted += 1
        self._counters.wasted_tokens += len(run.generated)
        self._release(run)
        run.queue.put_nowait(Chunk(run.request.request_id, finished=True, finish_reason="abort"))

    def _burst(self, run: Running) -> tuple[list[int], str | None]:
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

    def _step(self, run: Running) -> list[int]:
        self._check_fault()
        req = run.request
        if run.caches is None:                                 # first step: take the document's caches
            run.caches = self._take_caches(req.cache_key)
            g = None
            if req.temperature > 0:
                g = torch.Generator(device=self.device)
                g.manual_seed(req.seed if req.seed is not None else torch.seed())
            run.sampling = Sampling(req.temperature, req.top_p, g)
            run.schedule = make_schedule(self.config.num_speculative_tokens, self.config.max_speculative_tokens)
            run.reused = common_prefix(run.caches.target, run.prompt)
        if not run.tokens:                                     # the prompt, a chunk a step
            return self._prefill_step(run)
        return self._decode_step(run)

    def _prefill_step(self, run: Running) -> list[int]:
        """The next PREFILL_CHUNK tokens of the prompt into the cache ([] : more to come), or the rest and the first
        token. In chunks so that a long cold prompt can be aborted between them, its positions so far kept for
        the document (the next keystroke's prompt shares them), and other requests step in between. A request
        for no tokens (``max_new_tokens`` 0, a warm-up: ``lsp/warm.py``) fills the cache with the whole prompt
        and ends; the document's next request finds it there."""
        req = run.request
        cache = run.caches.target
        new = len(run.prompt) - common_prefix(cache, run.prompt)
        chunk = PREFILL_CHUNK
        if self.threads is not None and self.threads.trial("prompt"):   # a prompt chunk still measured as "prompt"
            chunk = max(SMALL_STEP + 1, min(TRIAL_CHUNK, PREFILL_CHUNK))
        if new > chunk + chunk // 2 or (req.max_new_tokens == 0 and new > 0):
            n = min(new, chunk)
            with self._phase("prompt", n) if n > SMALL_STEP else self._phase("step"):
                catch_up(self.target, cache, run.prompt[:len(run.prompt) - new + n], self.n_vocab)
            if n < new or req.max_new_tokens:
                return []
        if req.max_new_tokens == 0:
            self._prompt_done(run)
            return []
        with self._phase("prompt", new) if new > SMALL_STEP else self._phase("step"):   # per token / per step
            first, _ = prefill(self.target, cache, run.prompt, run.sampling, self.n_vocab, self._healing(run))
        self._prompt_done(run)
        return [first]

    def _prompt_done(self, run: Running) -> None:
        self._counters.prompt_tokens += len(run.prompt)
        self._counters.cached_prompt_tokens += min(run.reused, len(run.prompt) - 1)
        run.tokens = list(run.prompt)

    def _decode_step(self, run: Running) -> list[int]:
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

    def _timed_plain_step(self, run: Running) -> list[int]:
        t0 = time.perf_counter()
        out = decode_one(self.target, run.caches.target, run.tokens, run.sampling, self.n_vocab).tokens
        self._note_plain_step(time.perf_counter() - t0)
        return out

    def _healing(self, run: Running) -> tuple[int, ...]:
        """The token ids allowed while token healing still has characters to re-type (none: no constraint)."""
        return healing.allowed_tokens(self.tokenizer, run.heal_left, self.n_vocab) if run.heal_left else ()

    def _propose(self, run: Running, tokens, k: int, sampling: Sampling):
        method = self.config.speculation
        if method in ("ngram", "draft+ngram"):
            drafts = propose_ngram(tokens, k, self.config.ngram_min, self.config.ngram_max, self.sentinels)
            if drafts or method == "ngram":
                return drafts, None                            # one-hot q
        run.draft_c = self._speculation_costs()[0]             # this step's drafts cost draft forwards
        return self.proposer.propose(run.caches.draft, tokens, k, sampling)
