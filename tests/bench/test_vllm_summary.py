"""bench.vllm.summary: speculation_summary.json rows from `completer tune` results (run as a program,
``--add-tune``)."""

import json

from tests.helpers.programs import run_program


def _tune(winner: str, eagle_tps: float) -> dict:
    row = {"tokens_per_s_p50": 100.0, "aggregate_tokens_per_s": 120.0, "latency_p50_ms": 50.0, "latency_p95_ms": 80.0,
           "tokens_per_step": 1.0, "speedup_vs_none": 1.0, "greedy_identical_to_none": True, "rounds": 5,
           "first_token_p50_ms": 10.0, "decode_ms_per_token_p50": 2.0}
    eagle = {**row, "tokens_per_s_p50": eagle_tps, "aggregate_tokens_per_s": 150.0, "tokens_per_step": 2.1,
             "speedup_vs_none": eagle_tps / 100}
    return {"winner": winner, "requests": "fixed", "prompts": 24,
            "table": {"eagle3 k=2": eagle, "ngram k=4": {"error": "engine failed"}, "none": row}}


def _add(tmp_path, tune: dict, name: str, rule: str, *tags: str, old: list | None = None) -> list[dict]:
    """Write ``tune`` as ``name`` (relative to the summary's folder), add it with the program, return the summary."""
    summary = tmp_path / "speculation_summary.json"
    if old is not None or not summary.exists():
        summary.write_text(json.dumps(old or []))
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text(json.dumps(tune))
    run_program("bench.vllm.summary", "--add-tune", summary, "--run", name, rule,
                *[a for t in tags for a in ("--tag", t)])
    return json.loads(summary.read_text())


def test_one_row_per_measured_configuration_with_the_speedups_and_the_choice(tmp_path):
    rows = _add(tmp_path, _tune("eagle3 k=2", 117.0), "run/tune.json", "first round")
    assert [(r["method"], r["k"]) for r in rows] == [("eagle3", 2), ("none", 0)]      # the failed engine: no row
    eagle = rows[0]
    assert eagle["speedup_vs_none"] == 1.17 and eagle["speedup_aggregate_vs_none"] == 1.25
    assert eagle["chosen_by_tune"] and not rows[1]["chosen_by_tune"] and eagle["measured"]
    assert eagle["drafter"] == "house:v2/eagle3" and rows[1]["drafter"] is None
    assert eagle["decode_ms_per_token_p50"] == 2.0 and eagle["source"] == "run/tune.json"
    assert eagle["identity_rule"] == "first round"


def test_adding_a_run_again_replaces_its_rows_and_keeps_the_others(tmp_path):
    old = [{"scale": "7b-shape", "method": "eagle3", "k": 4, "measured": False}]
    _add(tmp_path, _tune("none", 90.0), "a.json", "r", "engines=side by side", old=old)
    rows = _add(tmp_path, _tune("eagle3 k=2", 130.0), "a.json", "r", "engines=side by side")
    assert len(rows) == 3 and rows[0]["scale"] == "7b-shape"
    assert rows[1]["speedup_vs_none"] == 1.3 and rows[1]["engines"] == "side by side"


def test_a_tune_of_two_request_shapes_gives_rows_for_each(tmp_path):
    editor, fixed = _tune("none", 90.0), _tune("eagle3 k=2", 130.0)
    both = {**editor, "requests": "editor", "chosen_on": "editor",
            "by_requests": {"editor": {"prompts": 32, "winner": "none", "table": editor["table"]},
                            "fixed": {"prompts": 24, "winner": "eagle3 k=2", "table": fixed["table"]}}}
    rows = _add(tmp_path, both, "run/tune.json", "first round")
    assert [(r["requests"], r["method"], r["prompts"], r["chosen_by_tune"]) for r in rows] == [
        ("editor", "eagle3", 32, False), ("editor", "none", 32, True),
        ("fixed", "eagle3", 24, True), ("fixed", "none", 24, False)]
