"""Output processing of the torch engine: each step's tokens checked against the request's limits, stop tokens and
token healing (``_accept``, in the model thread between the steps of a burst), then on the event loop the text of
everything committed so far, cut at a stop string and held back where it may still become one, streamed as the
next ``Chunk`` (``_emit``)."""

from __future__ import annotations

from ... import healing
from ..base import Chunk, apply_stop, held_back
from .input import Running

STOP_TAIL_TOKENS = 8    # a burst looks for the request's stop strings in the text of this many last tokens
DETOK_CONTEXT = 4       # prompt tokens decoded with the output so that leading spaces/merges come out right


class OutputProcessing:
    """TorchEngine's output side (a mixin: it reads the engine's tokenizer, stop ids and counters)."""

    def _commit(self, run: Running, new: list[int]) -> None:
        self._emit(run, *self._accept(run, new))

    def _accept(self, run: Running, new: list[int]) -> tuple[list[int], str | None]:
        """Token bookkeeping of one step (limits, stop tokens, healing progress): the tokens to commit and the
        finish reason, if any. Runs in the worker thread between the steps of a burst."""
        req = run.request
        reason = None
        if not run.tokens:                                     # a chunk of the prompt (``_prefill_step``): no token
            return [], None
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

    def _emit(self, run: Running, new: list[int], reason: str | None) -> None:
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

    def _detokenize(self, run: Running, visible: list[int]) -> str:
        ctx = run.prompt[-DETOK_CONTEXT:]
        head = self.tokenizer.decode(ctx, skip_special_tokens=True)
        full = self.tokenizer.decode(ctx + visible, skip_special_tokens=True)
        if full.startswith(head) and not head.endswith("\ufffd"):
            return full[len(head):]
        return self.tokenizer.decode(visible, skip_special_tokens=True)

    def _at_stop(self, run: Running) -> bool:
        """Whether the last few generated tokens' text holds one of the request's stop strings (a cheap look at the
        tail; ``_emit`` on the event loop finds where it is and ends the request)."""
        stop = run.request.stop
        if not stop:
            return False
        tail = self.tokenizer.decode(run.generated[-STOP_TAIL_TOKENS:], skip_special_tokens=False)
        return any(s in tail for s in stop)
