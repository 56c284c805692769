"""The shared engine contract (tests/helpers/engine_contract.py) on the embedded engine, CPU: tiny pair and house pair."""

import pytest

from tests.helpers import engine_contract as contract


@pytest.mark.parametrize("speculation,k", [("draft", 1), ("draft", 4), ("draft", "adaptive"),
                                           ("ngram", 3), ("draft+ngram", "adaptive")])
async def test_greedy_speculation_is_lossless(make_engine, speculation, k):
    counters = await contract.check_greedy_speculation_lossless(make_engine, speculation, k)
    if "draft" in speculation:   # the tiny draft is the target minus a layer: it must be right sometimes
        assert 0 < counters["accepted_tokens"] < counters["draft_tokens"]


@pytest.mark.parametrize("speculation", ["none", "draft"])
async def test_abort_within_one_step(make_engine, speculation):
    await contract.check_abort_within_one_step(make_engine, speculation=speculation, max_step_tokens=9)


@pytest.mark.parametrize("speculation", ["none", "draft+ngram"])
async def test_concurrent_requests(make_engine, speculation):
    await contract.check_concurrent_requests(make_engine, n=8, speculation=speculation)


async def test_house_pair_lossless(house_engine):
    await contract.check_greedy_speculation_lossless(house_engine, "draft", "adaptive", max_new_tokens=16)


async def test_token_healing(house_engine):
    # the house pair: a trained tokenizer, so mid-word prompts have real words to heal to
    await contract.check_token_healing(house_engine)
