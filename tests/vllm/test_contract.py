"""The shared engine contract (tests/helpers/engine_contract.py) on the vLLM backend with the house pair (GPU only)."""

import importlib.util

import pytest

from completer import healing
from completer.engine.base import Request

from tests.helpers import engine_contract as contract


@pytest.mark.parametrize("speculation,k", [("draft", 4), ("ngram", 3)])
async def test_greedy_speculation_is_lossless(make_engine, speculation, k):
    counters = await contract.check_greedy_speculation_lossless(make_engine, speculation, k)
    assert len(counters["draft_per_position"]) == k, counters
    if speculation == "draft":   # a trained draft of the same data is right some of the time, not always
        assert 0 < counters["accepted_tokens"] < counters["draft_tokens"], counters


async def test_suffix_decoding_is_lossless_and_drafts_an_answer_it_served_before(make_engine):
    """speculation="suffix": vLLM's suffix decoding (arctic-inference's suffix tree, bench/vllm/arctic_suffix.sh)
    keeps greedy output, and a request whose answer it served before has that answer drafted from memory."""
    if importlib.util.find_spec("arctic_inference") is None:
        pytest.skip("arctic_inference is not installed (bash bench/vllm/arctic_suffix.sh builds it)")
    await contract.check_greedy_speculation_lossless(make_engine, "suffix", 8)
    spec = make_engine(speculation="suffix", num_speculative_tokens=8)
    try:
        first = await contract.collect(spec, Request("a", contract.PROMPTS[0], max_new_tokens=24))
        before = spec.counters()
        again = await contract.collect(spec, Request("b", contract.PROMPTS[0], max_new_tokens=24))
        after = spec.counters()
    finally:
        await spec.close()
    assert again == first and len(again[1]) > 8
    assert after["accepted_tokens"] - before["accepted_tokens"] >= len(again[1]) // 2, (before, after)


@pytest.mark.parametrize("speculation", ["none", "draft"])
async def test_abort_within_one_step(make_engine, speculation):
    # vLLM streams from its own process: tokens of up to a few steps may be in flight when abort() is called
    await contract.check_abort_within_one_step(make_engine, speculation=speculation, max_step_tokens=16)


async def test_concurrent_requests(make_engine):
    await contract.check_concurrent_requests(make_engine, n=8, speculation="draft", num_speculative_tokens=4)


async def test_token_healing(make_engine):
    await contract.check_token_healing(make_engine)


async def test_prompts_reach_vllm_in_its_processed_form(make_engine):
    """vLLM 0.26 deprecates raw prompts ("Passing raw prompts to InputProcessor is deprecated ... removed"): every
    request, healing steps included, hands AsyncLLM the processed ``{"type": "token"}`` input."""
    engine = make_engine(speculation="none")
    seen: list[dict] = []
    process = engine.llm.input_processor.process_inputs

    def record(request_id, prompt, *args, **kwargs):
        seen.append(prompt)
        return process(request_id, prompt, *args, **kwargs)

    engine.llm.input_processor.process_inputs = record
    try:
        await contract.greedy_outputs(engine, contract.PROMPTS[:2], 4)
        p = contract.HEAL_PROMPTS[0]
        heal = healing.heal_point(p, engine.tokenizer)
        text, _, _ = await contract.collect(engine, Request("h", p[: len(p) - len(heal)], max_new_tokens=4, heal=heal))
        assert text, "the healed request wrote nothing"
    finally:
        await engine.close()
    assert seen and all(isinstance(p, dict) and p.get("type") == "token" for p in seen), seen


async def test_raced_healing_answers_as_the_healing_requests_do(make_engine):
    """Healing raced against the main request (the default) and healing by constrained requests first: the same
    tokens and text for every healed prompt; at least one answered by the main request's own first token."""
    engine = make_engine(speculation="none")
    try:
        got = {}
        for race in (False, True):
            engine.heal_race = race
            for i, p in enumerate(contract.HEAL_PROMPTS):
                heal = healing.heal_point(p, engine.tokenizer)
                req = Request(f"race{race}-{i}", p[: len(p) - len(heal)], max_new_tokens=12, heal=heal)
                got.setdefault(i, []).append(await contract.collect(engine, req))
        raced = engine.counters()["heal_raced"]
    finally:
        await engine.close()
    for i, (plain, fast) in got.items():
        assert plain[:2] == fast[:2], f"prompt {i}: {plain} vs raced {fast}"
    assert raced >= 1
