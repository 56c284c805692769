"""Never slower than none: BreakEven switches speculation off for a request once its tokens per step fall to
the cost per step, and the engine then decodes that request plainly (same greedy output)."""

from __future__ import annotations

import pytest

from completer.engine import Request
from completer.speculative import BreakEven

from tests.helpers import engine_contract as contract


@pytest.mark.parametrize("c,v,steps,off", [
    (0.0, 1.0, [(4, 0)] * 4, True),       # n-gram never accepted: 1 token per step at a cost of 1 -> not worth it
    (0.0, 1.2, [(4, 1)] * 4, False),      # 2 tokens per step for 1.2 steps of cost: pays
    (0.3, 1.0, [(4, 1)] * 4, True),       # draft at c=0.3: cost 2.2 per step for 2 tokens
    (0.3, 1.0, [(4, 3)] * 4, False),      # 4 tokens for 2.2
    (0.3, 1.0, [(4, 0)] * 3, False),      # too few steps to judge
    (0.3, 1.0, [(4, 4)] * 4 + [(4, 0)] * 8, True),   # stopped paying: the window forgets the good start
])
def test_breakeven_table(c, v, steps, off):
    b = BreakEven(c, v, window=8, min_steps=4)
    for p, a in steps:
        b.update(p, a)
    assert b.off is off and b.pays() is not off


@pytest.mark.parametrize("seconds,off", [(0.008, True), (0.004, False)])
def test_breakeven_measured_cost(seconds, off):
    """With the engine's timings, a step's cost is its seconds over a plain step's: 2 tokens for 8 ms against
    3 ms plain steps (2.7 steps' worth) does not pay; 2 tokens for 4 ms does."""
    b = BreakEven(0.0, 1.0, min_steps=4, plain_step_s=0.003)
    for _ in range(4):
        b.update(4, 1, seconds=seconds)
    assert b.off is off


def test_breakeven_never_accepted_with_an_inflated_plain_step():
    """A plain step's estimate that a slow step inflated makes a verification look cheaper than a plain step;
    a proposer that is never accepted still delivers one token per step, which does not pay."""
    b = BreakEven(0.0, 1.0, min_steps=4, plain_step_s=0.010)
    for _ in range(4):
        b.update(4, 0, seconds=0.004)
    assert b.off


def test_breakeven_per_step_cost_and_bad_input():
    b = BreakEven(0.5, 1.0, min_steps=2)
    b.update(4, 1, c=0.0)                  # a free n-gram step in draft+ngram
    b.update(4, 1, c=0.0)
    assert b.pays()
    with pytest.raises(ValueError):
        BreakEven(-1.0)


async def test_engine_turns_off_a_proposer_that_is_never_accepted(make_engine):
    """A scripted proposer whose drafts the target never takes: after a few steps the request decodes plainly,
    so it proposes a bounded number of drafts, and its output equals no speculation."""
    plain = make_engine(speculation="none")
    spec = make_engine(speculation="ngram", num_speculative_tokens=4)
    bad = spec.tokenizer.token_to_id("<|fim_prefix|>")       # never the target's choice in the middle of code
    spec._propose = lambda run, tokens, k, sampling: ([bad] * k, None)
    prompt = contract.PROMPTS[0]
    try:
        _, want, _ = await contract.collect(plain, Request("a", prompt, max_new_tokens=40))
        _, got, _ = await contract.collect(spec, Request("b", prompt, max_new_tokens=40))
        c = spec.counters()
        assert got == want
        assert 0 < c["draft_tokens"] <= 4 * 8 and c["accepted_tokens"] == 0
        assert spec.speculation_switched_off == 1
        assert len(want) > 20                                 # enough plain steps after the switch to matter
    finally:
        await plain.close()
        await spec.close()
