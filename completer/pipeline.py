"""One path from a cursor to ghost text, shared by ``completer complete`` and the language server.

    plan(source, offset, engine, ...)        the prompt plan: tree-sitter context, FIM template, mode, stop strings
    Generation(engine, plan, request_id)     the engine request: streams raw text, post-processes it on demand
    complete(source, offset, engine, ...)    both, for a caller that only wants the final ghost text (the CLI)

Why a ``Generation`` object and not just a function returning a string: the language server's request lifecycle
(``lsp/lifecycle.py``) watches a request *while it streams*: it answers as soon as the ghost text has a first line,
and answers later keystrokes from the same request when the user types what the model is writing. So the raw text
so far, a way to wait for more of it, and the post-processing of any prefix of it are all public here.

When the model writes nothing at all at the end of a finished line (it ends the line at once), one follow-up
request in the same ``Generation`` may ask for the next line (``Settings.next_line``, off by default): the ghost text
then starts with the newline, as Copilot's does, and is the follow-up's, relative to the original cursor.

Stopping a request: closing the engine's stream (cancelling the task that runs :meth:`Generation.run`) is what
aborts the engine request; the engine sees exactly one abort for it (the Engine protocol: "closing the iterator
aborts the request"), nobody calls ``engine.abort`` on top of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from dataclasses import dataclass
from typing import Sequence

from .context import SNIPPET_SHARE, PromptPlan, Snippet, SourceFile, build_prompt
from .context.builder import prepare_counter
from .context.syntax import Trees
from .engine import Engine, Request
from .healing import heal_plan
from .postprocess import postprocess
from .prompt import TEMPLATE_MARKERS, TEMPLATES, fim_prompt
from .text import indentation


@dataclass(frozen=True)
class Settings:
    """What shapes a completion besides the document: the same knobs for the CLI and the server."""

    template: str = "auto"          # FIM template name, or "auto": the engine's own (Engine.prompt_template)
    budget_tokens: int = 1024       # prompt budget given to completer.context.build_prompt
    max_tokens: int = 64            # upper bound on new tokens; line completions use fewer
    temperature: float = 0.0
    seed: int | None = None
    token_healing: bool = True      # back the prompt up to a token boundary at the cursor (completer.healing)
    heal_word: bool = True          # ...by the whole partial word, to where the prompt's tokens stay the same
                                    # (False: by the last token only, as guidance's token healing)
    next_line: bool = False         # at the end of a finished line, a request that wrote nothing is asked for the
                                    # next line (ghost text "\n" + indentation + that line). Off: with the house
                                    # models no such next line was right in the CPU replay (bench/results/
                                    # replay-fb6d48f at b4844c3: 0 of 7-15 a round), so it only added wrong ghost text
    snippet_share: float = SNIPPET_SHARE  # most of the prompt budget that context from beyond the open file takes
    cold_prompt_ms: float = 0.0     # > 0: the budget is cut to what the engine prefills in this time from a cold
                                    # cache (``prompt_budget``); the server's default is COLD_PROMPT_MS, 0 = off


# The server's default ``Settings.cold_prompt_ms`` (setting coldPromptMs). Why: a document's first keystroke (and
# every one typed meanwhile) waits for its whole prompt; SmolLM2 prefills ~1.7 ms a token on 2 AVX2 cores, so the
# 1,024-token budget's ~620-token prompts kept fast typists without ghost text for ~2 s at the start of each document.
# Replays, 3 rounds each (bench/results/replay-cold/): SmolLM2 with the cut budget had ghost text before the next key
# on 90.1% of keystrokes quiet, 92.2% busy (the whole budget: 70.9 / 55.2%), right on 22.0 / 18.1% (18.4 / 13.6%).
# The engine measures 1.1-2.0 ms a token quiet (384-640 tokens at 1 s), house v2 0.3 ms (the whole budget).
COLD_PROMPT_MS = 1000.0
BUDGET_STEP = 128                   # the cut budget is a multiple of this (a stable prompt start for the KV reuse)
# and never below this: with a core busy SmolLM2 measured 2.9-4.7 ms a token (256 tokens), and a fixed 384 was right
# more often there (20.4 vs 18.1%, rounds apart) and in time as often (93.0 vs 92.2%): bench/results/replay-cold/
MIN_COLD_BUDGET = 384


def prompt_budget(settings: Settings, engine: Engine) -> int:
    """The prompt's token budget for ``engine``: ``settings.budget_tokens``, cut with ``settings.cold_prompt_ms``
    to the tokens the engine prefills in that time from a cold cache (its ``prompt_s_per_token``, measured once, so
    the budget, and with it the prompt's start, stays the same for the engine's life), rounded down to BUDGET_STEP,
    at least MIN_COLD_BUDGET. An engine that measured nothing (vLLM, remote) keeps the budget; with cold_prompt_ms 0
    (the CLI) the engine is not asked (the torch engine would measure on that first read)."""
    if settings.cold_prompt_ms <= 0:
        return settings.budget_tokens
    per_token = getattr(engine, "prompt_s_per_token", None)
    if not per_token or per_token <= 0:
        return settings.budget_tokens
    fits = int(settings.cold_prompt_ms / 1000 / per_token) // BUDGET_STEP * BUDGET_STEP
    return min(settings.budget_tokens, max(MIN_COLD_BUDGET, fits))


def prepare(engine: Engine) -> Engine:
    """Compute now, at the engine's start, what the first ``plan`` for ``engine`` would compute once: its template
    (SmolLM2: ~200 ms reading its tokenizer's special tokens), the prompt builder's token-count cache (~80 ms
    deciding how its tokenizer splits text) and the engine's cold-prompt speed that ``prompt_budget`` reads (the
    torch engine measures it on first use). The first keystroke of a fresh server (or its warm-up) waited for them.
    Returns ``engine``."""
    try:
        engine.prompt_template
    except Exception:  # noqa: BLE001 -- no template: plan() says so when it is asked for one
        pass
    getattr(engine, "prompt_s_per_token", None)
    count = getattr(engine, "count_tokens", None)
    if count is not None:
        prepare_counter(count)
    return engine


def resolve_template(template: str, engine: Engine) -> str:
    """``template``, or the engine's own with ``"auto"``; ValueError for an unknown name."""
    if template == "auto":
        return engine.prompt_template
    if template not in TEMPLATES:
        raise ValueError(f"template: must be 'auto' or one of {', '.join(TEMPLATES)}, got {template!r}")
    return template


def check_template(template: str, engine: Engine) -> str | None:
    """For a template named explicitly (not ``"auto"``): ValueError when its special tokens are not in the model's
    vocabulary (the model would read them as text and write garbage), else a warning when it is not the model's own
    template (same tokens in another order, e.g. ``qwen`` on a house model, also gives garbage); None when fine."""
    name = resolve_template(template, engine)
    own = engine.prompt_template
    if template == "auto" or name == own:
        return None
    tokenizer = getattr(engine, "tokenizer", None)
    if tokenizer is not None:
        missing = [m for m in TEMPLATE_MARKERS[name]
                   if tokenizer.token_to_id(m) is None and tokenizer.token_to_id("\u2581" + m) is None]
        if missing:
            raise ValueError(f"template {name!r}: the model's vocabulary has no {', '.join(missing)} (its own "
                             f"template is {own!r}; leave the template on 'auto')")
    if name == "plain":
        return f"template 'plain' sends only the code before the cursor (the model's own, {own!r}, sends both sides)"
    return (f"template {name!r} is not this model's own ({own!r}): it was not trained on that prompt layout and "
            f"its completions will likely be garbage")


def plan(source: SourceFile, offset: int, engine: Engine, settings: Settings = Settings(),
         others: Sequence[SourceFile] = (), trees: Trees | None = None,
         snippets: Sequence[Snippet] = ()) -> PromptPlan:
    """The prompt plan at ``offset`` of ``source`` within ``prompt_budget(settings, engine)`` tokens; with
    ``settings.token_healing`` the prompt ends on a token boundary (an engine without a ``tokenizer`` is not
    healed). ``trees``: the caller's parse trees of its open documents (incremental re-parsing), if it keeps them.
    ``snippets``: context from beyond the open file that the caller made off the keystroke path."""
    p = build_prompt(source, offset, others=list(others), count_tokens=engine.count_tokens,
                     budget_tokens=prompt_budget(settings, engine), template=resolve_template(settings.template, engine),
                     max_tokens=settings.max_tokens, trees=trees, snippets=snippets,
                     snippet_share=settings.snippet_share)
    return heal_plan(p, getattr(engine, "tokenizer", None), settings.heal_word) if settings.token_healing else p


class Generation:
    """One engine request for a plan: the raw text as it streams, and the ghost text of any prefix of it.

    ``run()`` consumes the engine's stream (run it in the task whose cancellation should abort the request);
    ``changed()`` waits for the next chunk or the end; ``ghost()`` post-processes the raw text so far.
    """

    def __init__(self, engine: Engine, plan: PromptPlan, request_id: str, settings: Settings = Settings(),
                 cache_key: str | None = None):
        self.engine, self.plan = engine, plan
        self.request = Request(request_id, plan.prompt, max_new_tokens=max(1, min(settings.max_tokens,
                                                                                   plan.max_tokens)),
                               stop=plan.stop, temperature=settings.temperature, seed=settings.seed,
                               cache_key=cache_key, heal=plan.heal)
        self.raw = ""                      # the engine's text so far (stop strings already removed by the engine)
        self.tokens = 0                    # tokens streamed so far
        self.finished = False              # the engine ended the request (stop / length), text is complete
        self.aborted = False               # the stream was closed before the end (cancelled), or the engine aborted
        self.error: BaseException | None = None
        self.started = time.perf_counter()
        self.first_at: float | None = None  # when the first generated text arrived (TTFT = first_at - started)
        self.ended: float | None = None
        self.settings, self.cache_key = settings, cache_key
        self.follow_up: str | None = None  # "next_line": the follow-up request whose text this is
        self._lead = ""                    # text the ghost text starts with before the follow-up's (the newline)
        self._ended_by_model = True        # the last stream ended by a stop (not the token limit)
        self._event = asyncio.Event()

    @property
    def done(self) -> bool:
        return self.finished or self.aborted or self.error is not None

    def ghost(self, raw: str | None = None, skip: Sequence[str] = ()) -> str:
        """The ghost text for ``raw`` (default: all the text so far), as ``completer.postprocess`` makes it (``skip``:
        filters left out); after a next-line follow-up, the newline and indentation before it."""
        text = postprocess(self.raw if raw is None else raw, self.plan, skip)
        if not self._lead:
            return text
        # a next line must look like code: words, or a short closer (``}``); not a run of punctuation (``{{{{``)
        body = text.strip()
        return self._lead + text if body and (any(c.isalnum() for c in body) or len(body) <= 3) else ""

    async def run(self) -> str:
        """Stream the request to its end and return the ghost text. Cancelling the caller closes the stream,
        which aborts the engine request (once). An abort from inside the engine (restart, close) ends it with
        CancelledError, as if the caller had been cancelled. When the model wrote nothing, a follow-up request
        (:meth:`next_request`) may run after it, aborted the same way."""
        try:
            await self._stream()
            follow = self.next_request() if self.finished and not self.raw.strip() else None
            if follow is not None:
                kind, plan, lead = follow
                self.follow_up, self.plan, self._lead, self.raw, self.finished = kind, plan, lead, "", False
                self.request = dataclasses.replace(self.request, request_id=f"{self.request.request_id}/{kind}",
                                                   prompt=plan.prompt, stop=plan.stop, heal=plan.heal)
                await self._stream()
        except asyncio.CancelledError:
            self.aborted = True
            raise
        except BaseException as e:
            self.error = e
            raise
        finally:
            self.ended = time.perf_counter()
            if not self.finished:
                self.aborted = self.aborted or self.error is None
            self._wake()
        return self.ghost()

    async def _stream(self) -> None:
        async with contextlib.aclosing(self.engine.generate(self.request)) as stream:
            async for chunk in stream:
                if self.first_at is None and (chunk.text or chunk.token_ids):
                    self.first_at = time.perf_counter()
                self.raw += chunk.text
                self.tokens += len(chunk.token_ids) or (1 if chunk.text else 0)
                if chunk.finished:
                    if chunk.finish_reason == "abort":
                        self.aborted = True
                        raise asyncio.CancelledError(f"engine aborted {self.request.request_id}")
                    if chunk.finish_reason == "length":
                        self._ended_by_model = False   # out of tokens: the model did not end, no follow-up
                    self.finished = True
                self._wake()
                if self.finished:
                    break

    def next_request(self) -> tuple[str, PromptPlan, str] | None:
        """The follow-up for a request that wrote nothing: (kind, its plan, the text before its ghost text), or None.

        ``next_line`` (``Settings.next_line``): line mode at the end of a line with code on it and nothing after the
        cursor, and the model ended (a stop, not the token limit): it ended the line (its first text was the
        newline). The next line is asked for: the prompt with a newline and the line's indentation after the cursor
        (healed over them, as an editor's Enter would put them), and the ghost text is that newline, indentation and
        line. (Asking again without token healing when the cursor is mid-word, where the healed model often re-types
        the partial word and ends, was tried too: on the replay traces and bench.quality it added only wrong text.)
        """
        plan, s = self.plan, self.settings
        if self.follow_up is not None or not self._ended_by_model:
            return None
        line_before = plan.prefix[plan.prefix.rfind("\n") + 1:]
        rest = plan.suffix.split("\n", 1)[0]
        if s.next_line and plan.mode == "line" and "\n" in plan.stop and line_before.strip() and not rest.strip():
            lead = "\n" + indentation(line_before)
            prefix = plan.prefix + lead
            nxt = dataclasses.replace(plan, prompt=fim_prompt(prefix, plan.suffix, plan.template, plan.context),
                                      prefix=prefix, heal="")
            if s.token_healing:
                nxt = heal_plan(nxt, getattr(self.engine, "tokenizer", None), s.heal_word)
            return "next_line", nxt, lead
        return None

    @property
    def ttft_s(self) -> float | None:
        """Time to first token: request sent to the first generated text (None if none came)."""
        return None if self.first_at is None else self.first_at - self.started

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first (None with fewer than two tokens or before the end)."""
        if self.first_at is None or self.ended is None or self.tokens < 2:
            return None
        return (self.ended - self.first_at) / (self.tokens - 1)

    async def changed(self) -> None:
        """Return after the next chunk arrives or the request ends (at once if it has ended)."""
        if self.done:
            return
        await self._event.wait()

    def _wake(self) -> None:
        self._event.set()
        self._event = asyncio.Event()


async def complete(source: SourceFile, offset: int, engine: Engine, settings: Settings = Settings(),
                   others: Sequence[SourceFile] = (), request_id: str = "complete",
                   cache_key: str | None = None) -> str:
    """The ghost text at ``offset`` of ``source``: plan, run the engine request to its end, post-process."""
    return await Generation(engine, plan(source, offset, engine, settings, others), request_id, settings,
                            cache_key).run()
