"""The shared engine contract (tests/engine_contract.py) on the embedded engine, CPU, tiny model pair."""

import importlib.util
from pathlib import Path

import pytest

_p = Path(__file__).resolve().parents[1] / "engine_contract.py"
_spec = importlib.util.spec_from_file_location("engine_contract", _p)
contract = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(contract)


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


HOUSE = Path(__file__).resolve().parents[2] / "completer" / "models" / "house"


@pytest.mark.skipif(not all((HOUSE / n / "model.safetensors").is_file() for n in ("target", "draft")),
                    reason="house pair not shipped yet")
async def test_house_pair_lossless(house_engine):
    await contract.check_greedy_speculation_lossless(house_engine, "draft", "adaptive", max_new_tokens=16)
