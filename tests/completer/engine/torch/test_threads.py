"""ThreadChooser (completer/engine/torch/threads.py): per phase, the thread count that measures fastest, re-tried now
and then with a growing gap. Timings are scripted here, so the choice can be checked exactly."""

from __future__ import annotations

import pytest
import torch

from completer.engine.torch.threads import ThreadChooser


def serve(ch: ThreadChooser, phase: str, cost: dict[int, float], steps: int) -> list[int]:
    picks = []
    for _ in range(steps):
        n = ch.pick(phase)
        ch.record(phase, n, cost[n])
        picks.append(n)
    return picks


def test_measures_each_count_then_uses_the_faster():
    ch = ThreadChooser(2)
    picks = serve(ch, "step", {1: 0.003, 2: 0.008}, 200)
    assert picks[:4] == [1, 1, 2, 2]                    # two measurements of each first
    assert ch.best("step") == 1
    assert picks.count(2) <= 2 + 8                      # re-tries only, with a doubling gap
    retries = [i for i, n in enumerate(picks) if n == 2 and i >= 4]
    gaps = [b - a for a, b in zip(retries, retries[1:])]
    assert gaps == sorted(gaps) and gaps[-1] > gaps[0]


def test_phases_choose_independently():
    ch = ThreadChooser(2)
    serve(ch, "step", {1: 0.003, 2: 0.008}, 50)
    serve(ch, "prompt", {1: 0.0004, 2: 0.0002}, 50)
    assert ch.best("step") == 1 and ch.best("prompt") == 2
    snap = ch.snapshot()
    assert snap["step"]["chosen"] == 1 and snap["prompt"]["chosen"] == 2


def test_a_change_of_load_is_noticed():
    """When the faster count becomes slow (another process took a core), the re-tries move the choice."""
    ch = ThreadChooser(2)
    serve(ch, "step", {1: 0.005, 2: 0.002}, 60)
    assert ch.best("step") == 2
    serve(ch, "step", {1: 0.005, 2: 0.020}, 40)
    assert ch.best("step") == 1


def test_fixed_threads_and_bad_input():
    ch = ThreadChooser(2, adaptive=False)
    assert set(serve(ch, "step", {2: 0.01}, 10)) == {2}
    assert ThreadChooser(1).candidates == [1]
    with pytest.raises(ValueError, match="threads"):
        ThreadChooser(0)


def test_run_sets_torch_threads_and_records():
    before = torch.get_num_threads()
    try:
        ch = ThreadChooser(2)
        with ch.run("prompt", units=100) as box:
            assert torch.get_num_threads() == box["threads"] == 1
            box["units"] = 50
        assert ch.snapshot()["prompt"]["1_threads_ms"] is not None
    finally:
        torch.set_num_threads(before)
