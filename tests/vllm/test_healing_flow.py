"""Token healing's control flow in the vLLM backend, without vLLM: a fake ``AsyncLLM`` that plays back token ids.

The GPU contract test (tests/vllm/test_contract.py::test_token_healing) checks the real engine; this one runs
everywhere and checks what the backend asks vLLM for: one one-token request per healing step with
``allowed_token_ids`` from ``completer.healing``, then the main request from prompt + healing tokens with the
remaining budget, and the text the healing tokens add past the re-typed characters streamed first; and, racing
(the default), the main request started unconstrained beside the first healing step, kept when its own first
tokens re-type the text.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from tokenizers import Tokenizer

from completer import healing
from completer.engine.base import Counters, Request
from completer.engine.vllm.engine import VLLMEngine
from completer.models import HOUSE_DIR


class FakeLLM:
    """Plays back ``script[request_id]`` (token ids) as one finished DELTA output; records each call."""

    def __init__(self, tok, script: dict[str, list[int]]):
        self.tok, self.script, self.calls, self.aborted = tok, script, [], []

    def generate(self, prompt, params, rid):
        assert prompt["type"] == "token", prompt   # vLLM's processed input form, not the deprecated raw prompt
        self.calls.append((rid, list(prompt["prompt_token_ids"]), params))
        ids = self.script[rid.split("#")[0] + ("#" + rid.split("#")[1] if "#" in rid else "")]

        async def stream():
            yield SimpleNamespace(num_cached_tokens=0, finished=True, outputs=[SimpleNamespace(
                token_ids=ids, text=self.tok.decode(ids), finish_reason="length")])
        return stream()

    async def abort(self, rid):
        self.aborted.append(rid)


def engine(tok, script, race=False) -> VLLMEngine:
    """The backend on a fake vLLM; ``race``: healing raced against the main request (the default in the backend;
    the sequential flow, its fallback, is what most tests here check)."""
    e = object.__new__(VLLMEngine)
    e.tokenizer, e.llm, e.max_model_len = tok, FakeLLM(tok, script), 4096
    e._SamplingParams, e._DELTA = (lambda **kw: kw), "delta"
    e._counters, e._active, e._closed = Counters(), {}, False
    e.heal_race = race
    return e


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.from_file(str(HOUSE_DIR / "target" / "tokenizer.json"))


async def run(e, request):
    text, ids, last = "", [], None
    async for chunk in e.generate(request):
        text, ids, last = text + chunk.text, ids + list(chunk.token_ids), chunk
    return text, ids, last


async def test_healing_steps_then_the_main_request(tok):
    select = tok.token_to_id("select")
    rest = tok.encode("ed_items)", add_special_tokens=False).ids
    e = engine(tok, {"r#heal0": [select], "r": rest})
    prompt = tok.encode("x = self.", add_special_tokens=False).ids
    text, ids, last = await run(e, Request("r", prompt, max_new_tokens=8, heal="sel"))
    assert text == "ected_items)" and ids == [select] + rest and last.finished
    (hid, hprompt, hparams), (mid, mprompt, mparams) = e.llm.calls
    assert hid == "r#heal0" and hprompt == prompt and hparams["max_tokens"] == 1 and hparams["stop"] == []
    assert hparams["allowed_token_ids"] == list(healing.allowed_tokens(tok, "sel"))
    assert mid == "r" and mprompt == prompt + [select] and mparams["max_tokens"] == 7


async def test_a_token_shorter_than_the_healed_text_takes_another_step(tok):
    se, l_ = tok.token_to_id("se"), tok.token_to_id("l")
    e = engine(tok, {"r#heal0": [se], "r#heal1": [l_], "r": tok.encode("f.x", add_special_tokens=False).ids})
    text, ids, _ = await run(e, Request("r", [5, 6, 7], max_new_tokens=8, heal="sel"))
    assert text == "f.x" and ids[:2] == [se, l_]
    assert e.llm.calls[1][2]["allowed_token_ids"] == list(healing.allowed_tokens(tok, "l"))


async def test_a_stop_string_in_the_healing_token_ends_the_request(tok):
    e = engine(tok, {"r#heal0": [tok.token_to_id("select")]})
    text, _, last = await run(e, Request("r", [5, 6, 7], max_new_tokens=8, heal="sel", stop=("ct",)))
    assert text == "e" and last.finish_reason == "stop" and len(e.llm.calls) == 1    # no main request


async def test_a_request_cancelled_while_healing_counts_as_aborted(tok):
    """Cancelled during a healing step (a keystroke superseded it): started = finished + aborted afterwards, as
    for a cancellation during the main request."""
    import asyncio

    e = engine(tok, {})
    entered = asyncio.Event()

    def generate(prompt, params, rid):
        async def stream():
            entered.set()
            await asyncio.Event().wait()            # the healing step is still running when the cancel comes
            yield None
        return stream()

    e.llm.generate = generate
    task = asyncio.ensure_future(run(e, Request("r", [5, 6, 7], max_new_tokens=8, heal="sel")))
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    c = e.counters()
    assert c["requests_started"] == 1 and c["requests_aborted"] == 1 and c["requests_finished"] == 0


async def test_healing_allows_only_ids_of_the_models_vocabulary(tok):
    """A tokenizer larger than the model's vocabulary: the healing step's allowed ids stay below n_vocab."""
    full = list(healing.allowed_tokens(tok, "sel"))
    cut = max(full)                                   # the model has one id fewer than the tokenizer offers here
    keep = [i for i in full if i < cut]
    covering = next(i for i in keep if tok.decode([i]).startswith("sel"))
    e = engine(tok, {"r#heal0": [covering], "r": [tok.token_to_id("x")]})
    e.n_vocab = cut
    await run(e, Request("r", [5, 6, 7], max_new_tokens=4, heal="sel"))
    assert e.llm.calls[0][2]["allowed_token_ids"] == keep and len(keep) < len(full)


async def test_a_healing_step_over_the_runners_allowed_limit_is_not_sent(tok):
    """vLLM 0.26's V2 model runner holds at most 1024 allowed_token_ids per request and raises inside the engine
    core's model step for more, which kills the engine (the 2026-12-03b replays). Healing " " (thousands of house
    tokens start with a space) is therefore not sent as a constrained step: the space goes back into the prompt and
    the main request is the unhealed one; a small allowed set is still sent as before."""
    assert len(healing.allowed_tokens(tok, " ")) > 1024
    space = tok.encode(" ", add_special_tokens=False).ids
    rest = tok.encode("x = 1", add_special_tokens=False).ids
    e = engine(tok, {"r": rest})
    e.max_allowed_ids = 1024
    text, ids, last = await run(e, Request("r", [5, 6, 7], max_new_tokens=8, heal=" "))
    assert [c[0] for c in e.llm.calls] == ["r"]                       # no healing request at all
    (_, mprompt, mparams), = e.llm.calls
    assert mprompt == [5, 6, 7] + space and mparams["max_tokens"] == 8
    assert text == "x = 1" and ids == rest and last.finished
    assert e.counters()["heal_unconstrained"] == 1
    assert e.counters()["requests_started"] == e.counters()["requests_finished"] == 1


async def test_the_limit_applies_at_a_later_healing_step_too(tok):
    """A first step that re-types part of the text, then a remainder whose allowed set is too large: the healing
    token stays generated, the remainder is appended to the prompt after it, and the output leaves both out."""
    heal = "x "
    x = tok.token_to_id("x")
    assert len(healing.allowed_tokens(tok, heal)) <= 1024 < len(healing.allowed_tokens(tok, " "))
    rest = tok.encode("= 1", add_special_tokens=False).ids
    e = engine(tok, {"r#heal0": [x], "r": rest})
    e.max_allowed_ids = 1024
    text, ids, _ = await run(e, Request("r", [5, 6, 7], max_new_tokens=8, heal=heal))
    assert [c[0] for c in e.llm.calls] == ["r#heal0", "r"]
    assert e.llm.calls[1][1] == [5, 6, 7, x] + tok.encode(" ", add_special_tokens=False).ids
    assert e.llm.calls[1][2]["max_tokens"] == 7
    assert text == "= 1" and ids == [x] + rest


async def test_without_a_limit_a_large_allowed_set_is_sent(tok):
    """The V1 runner (draft_model / ngram speculation) has no such limit: healing " " is constrained as before."""
    tok_space = next(i for i in healing.allowed_tokens(tok, " ") if tok.decode([i]).startswith(" "))
    e = engine(tok, {"r#heal0": [tok_space], "r": [tok.token_to_id("x")]})
    e.max_allowed_ids = None
    await run(e, Request("r", [5, 6, 7], max_new_tokens=4, heal=" "))
    assert e.llm.calls[0][0] == "r#heal0"
    assert e.llm.calls[0][2]["allowed_token_ids"] == list(healing.allowed_tokens(tok, " "))


def test_the_allowed_limit_follows_the_model_runner():
    from completer.engine.vllm.engine import V2_MAX_ALLOWED_TOKEN_IDS, allowed_ids_limit

    assert allowed_ids_limit(SimpleNamespace(use_v2_model_runner=False)) is None
    assert allowed_ids_limit(SimpleNamespace(use_v2_model_runner=True)) == V2_MAX_ALLOWED_TOKEN_IDS == 1024


async def test_a_request_vllm_rejects_is_a_request_error_not_an_engine_failure(tok):
    """vLLM's ValueError for a bad request (its input checks) is the request's fault: RequestError, which the
    supervisor passes on as a refusal without restarting the engine."""
    from completer.engine.base import EngineError, RequestError

    e = engine(tok, {})

    def failing(exc):                            # a stand-in for vLLM's generate whose stream raises ``exc``
        def generate(prompt, params, rid):
            async def stream():
                raise exc
                yield None
            return stream()
        return generate

    e.llm.generate = failing(ValueError("max_tokens must be at least 1"))
    with pytest.raises(RequestError):
        await run(e, Request("r", [5, 6, 7], max_new_tokens=4))
    with pytest.raises(RequestError):
        await run(e, Request("q", [5, 6, 7], max_new_tokens=4, heal="sel"))

    e.llm.generate = failing(RuntimeError("EngineCore encountered an issue"))
    with pytest.raises(EngineError) as got:
        await run(e, Request("s", [5, 6, 7], max_new_tokens=4, heal="sel"))
    assert not isinstance(got.value, RequestError)
    c = e.counters()
    assert c["requests_started"] == c["requests_aborted"] + c["requests_finished"]


async def test_raced_healing_keeps_the_main_request_when_its_first_token_retypes_the_text(tok):
    """The main request starts unconstrained beside the first healing step; its first token re-types "sel"
    (an allowed token: the one the constrained step picks too), so it is the answer: no second request."""
    select = tok.token_to_id("select")
    rest = tok.encode("ed_items)", add_special_tokens=False).ids
    e = engine(tok, {"r#heal0": [select], "r#race": [select] + rest}, race=True)
    prompt = tok.encode("x = self.", add_special_tokens=False).ids
    text, ids, last = await run(e, Request("r", prompt, max_new_tokens=8, heal="sel"))
    assert text == "ected_items)" and ids == [select] + rest and last.finished
    (hid, hprompt, hparams), (mid, mprompt, mparams) = e.llm.calls
    assert hid == "r#heal0" and hparams["allowed_token_ids"] == list(healing.allowed_tokens(tok, "sel"))
    assert mid == "r#race" and mprompt == prompt and mparams["max_tokens"] == 8 and "allowed_token_ids" not in mparams
    assert "r#heal0" in e.llm.aborted and "r#race" not in e.llm.aborted
    c = e.counters()
    assert c["heal_raced"] == 1 and c["requests_finished"] == 1 and c["generated_tokens"] == len(ids)


async def test_raced_healing_over_two_tokens_of_the_first_output(tok):
    """Re-typing "\n        ret" takes two healing steps ("\n       " then " return"): both answered by the main
    request's first output, so no healing request is waited for."""
    heal = "\n        ret"
    nl, ret = (tok.encode(t, add_special_tokens=False).ids for t in ("\n       ", " return"))
    assert len(nl) == len(ret) == 1
    rest = tok.encode(" x", add_special_tokens=False).ids
    e = engine(tok, {"r#heal0": nl, "r#race": nl + ret + rest}, race=True)
    text, ids, _ = await run(e, Request("r", [5, 6, 7], max_new_tokens=8, heal=heal))
    assert text == "urn x" and ids == nl + ret + rest and [c[0] for c in e.llm.calls] == ["r#heal0", "r#race"]


async def test_raced_healing_falls_back_to_the_constrained_token_when_the_model_disagrees(tok):
    """The unconstrained first token does not re-type "sel": the main request is aborted, the constrained step's
    token (already computed beside it) is taken without asking again, and the main request starts after it."""
    select = tok.token_to_id("select")
    rest = tok.encode("ed_items)", add_special_tokens=False).ids
    e = engine(tok, {"r#heal0": [select], "r#race": rest, "r": rest}, race=True)
    prompt = tok.encode("x = self.", add_special_tokens=False).ids
    text, ids, last = await run(e, Request("r", prompt, max_new_tokens=8, heal="sel"))
    assert text == "ected_items)" and ids == [select] + rest and last.finished
    assert [c[0] for c in e.llm.calls] == ["r#heal0", "r#race", "r"]   # the step is not asked twice
    assert e.llm.calls[2][1] == prompt + [select] and e.llm.calls[2][2]["max_tokens"] == 7
    assert e.llm.aborted[0] == "r#race"
    c = e.counters()
    assert c["heal_raced"] == 0 and c["wasted_tokens"] == len(rest)
    assert c["requests_started"] == c["requests_finished"] == 1


@pytest.mark.parametrize("heal, stop, temperature, safe", [
    ("sel", ("\n",), 0.0, True),
    ("\n    ", ("\n",), 0.0, False),     # the re-typed newline would stop the unconstrained request at once
    ("ab", ("b=",), 0.0, False),         # a stop that would start inside the re-typed text
    ("sel", ("ct",), 0.0, True),         # "select": the stop matches after the re-typed text, as without racing
    ("sel", (), 0.7, False),             # sampling: not raced
])
def test_which_healed_requests_race(heal, stop, temperature, safe):
    from completer.engine.vllm.engine import race_safe

    assert race_safe(Request("r", [1], max_new_tokens=4, heal=heal, stop=stop, temperature=temperature)) == safe


async def test_a_stop_string_after_the_retyped_text_ends_a_raced_request(tok):
    """vLLM checks stops on the whole output ("select" holds "ct" after "sel"): the same answer as the
    sequential flow's, "e"."""
    select = tok.token_to_id("select")

    class Stopping(FakeLLM):
        def generate(self, prompt, params, rid):
            if rid == "r#race":                                 # as vLLM: cut before the stop, finished "stop"
                self.calls.append((rid, list(prompt["prompt_token_ids"]), params))

                async def stream():
                    yield SimpleNamespace(num_cached_tokens=0, finished=True, outputs=[SimpleNamespace(
                        token_ids=[select], text="sele", finish_reason="stop")])
                return stream()
            return super().generate(prompt, params, rid)

    e = engine(tok, {"r#heal0": [select]}, race=True)
    e.llm = Stopping(tok, {"r#heal0": [select]})
    text, _, last = await run(e, Request("r", [5, 6, 7], max_new_tokens=8, heal="sel", stop=("ct",)))
    assert text == "e" and last.finish_reason == "stop" and e.counters()["heal_raced"] == 1


async def test_aborting_a_raced_request_aborts_its_vllm_request(tok):
    """A raced answer streams under its own vLLM id: abort(request id) and a cancelled consumer reach it."""
    import asyncio

    select = tok.token_to_id("select")
    e = engine(tok, {"r#heal0": [select]}, race=True)
    gate = asyncio.Event()
    plain = e.llm.generate

    def generate(prompt, params, rid):
        if rid != "r#race":
            return plain(prompt, params, rid)
        e.llm.calls.append((rid, list(prompt["prompt_token_ids"]), params))

        async def stream():
            yield SimpleNamespace(num_cached_tokens=0, finished=False, outputs=[SimpleNamespace(
                token_ids=[select], text="select", finish_reason=None)])
            await gate.wait()                        # generating until aborted
            yield SimpleNamespace(num_cached_tokens=0, finished=True, outputs=[SimpleNamespace(
                token_ids=[], text="", finish_reason="abort")])
        return stream()

    e.llm.generate = generate
    chunks = []

    async def consume():
        async for chunk in e.generate(Request("r", [5, 6, 7], max_new_tokens=8, heal="sel")):
            chunks.append(chunk)
            if len(chunks) == 1:
                await e.abort("r")
                gate.set()

    await consume()
    assert chunks[0].text == "ect" and chunks[-1].finish_reason == "abort"
    assert "r#race" in e.llm.aborted and not e._active
    c = e.counters()
    assert c["requests_started"] == c["requests_aborted"] == 1
