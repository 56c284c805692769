"""Engine counters between two snapshots (completer.engine.base.counted_between, tokens_per_step): what the replay
and the vLLM benchmarks report an engine counted over their run."""

from completer.engine.base import Counters, counted_between, tokens_per_step


def test_an_unset_position_before_reads_as_zero():
    """An unset entry (None) in a per-position list of the snapshot before counts as zero instead of failing at the
    end of a replay (2026-12-05b, the first suffix replay on the H200, failed on acceptance_per_position's None)."""
    before = {"draft_per_position": [3, None], "drafts": 3, "name": "x"}
    after = {"draft_per_position": [7, 2], "drafts": 9, "name": "x"}
    assert counted_between(before, after) == {"draft_per_position": [4, 2], "drafts": 6}
    assert counted_between(None, {"drafts": 1}) == {"drafts": 1} and counted_between({"drafts": 1}, None) == {}


def test_acceptance_between_snapshots_comes_from_the_counts_not_from_subtracted_ratios():
    """A snapshot's acceptance ratios are derived (None where nothing was drafted: the None that failed the first
    suffix replay); between two snapshots they are derived again from the counts added."""
    before = {"draft_tokens": 4, "accepted_tokens": 4, "draft_per_position": [4, 0], "accepted_per_position": [4, 0],
              "acceptance_rate": 1.0, "acceptance_per_position": [1.0, None]}
    after = {"draft_tokens": 10, "accepted_tokens": 7, "draft_per_position": [8, 2], "accepted_per_position": [6, 1],
             "acceptance_rate": 0.7, "acceptance_per_position": [0.75, 0.5]}
    d = counted_between(before, after)
    assert d["draft_tokens"] == 6 and d["accepted_per_position"] == [2, 1]
    assert d["acceptance_rate"] == 0.5 and d["acceptance_per_position"] == [0.5, 0.5]


def test_per_position_delta_and_tokens_per_step():
    """The vLLM benchmarks' spec-decode figures: counts per position between snapshots (a longer list after than
    before: the new positions count from zero), acceptance per position and tokens per step from them."""
    before = dict(draft_tokens=8, accepted_tokens=5, generated_tokens=10, prompt_tokens=50, cached_prompt_tokens=0,
                  draft_per_position=[2, 2, 2, 2], accepted_per_position=[2, 2, 1, 0])
    after = dict(draft_tokens=20, accepted_tokens=11, generated_tokens=30, prompt_tokens=90, cached_prompt_tokens=16,
                 draft_per_position=[5, 5, 5, 5, 1], accepted_per_position=[5, 3, 2, 1, 1])
    d = counted_between(before, after)
    assert d["draft_per_position"] == [3, 3, 3, 3, 1] and d["accepted_per_position"] == [3, 1, 1, 1, 1]
    assert d["acceptance_per_position"] == [1.0, 1 / 3, 1 / 3, 1 / 3, 1.0]
    assert tokens_per_step(d) == 1 + 6 / 3
    assert d["cached_prompt_tokens"] == 16 and d["generated_tokens"] == 20
    assert tokens_per_step({"accepted_tokens": 0, "draft_per_position": []}) == 1.0      # nothing drafted


def test_between_two_snapshots_of_real_counters():
    c = Counters()
    before = c.snapshot()
    c.draft_tokens, c.accepted_tokens = 4, 3
    c.draft_per_position, c.accepted_per_position = [2, 2], [2, 1]
    d = counted_between(before, c.snapshot())
    assert d["acceptance_rate"] == 0.75 and d["acceptance_per_position"] == [1.0, 0.5]
    assert tokens_per_step(d) == 1 + 3 / 2
