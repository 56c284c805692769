"""bench.report, run as a program (``python -m bench.report RAW.json``) on raw replay results written here: the
summary JSON (per configuration, per condition, the medians over rounds and the verdicts), the markdown and the plot.
"""

import json
import os

import pytest

from completer.stats import percentile
from tests.helpers.programs import run_program

NEVER = "never"        # what the JSON says for a keystroke that got no ghost text in time (JSON has no infinity)


def test_percentile_linear_interpolation():
    assert percentile([], 50) is None
    assert percentile([7], 99) == 7
    assert percentile([1, 2, 3, 4], 50) == pytest.approx(2.5)
    assert percentile(list(range(101)), 95) == pytest.approx(95)
    assert percentile([10, 0, 20], 100) == 20


def _raw(*configs: dict) -> dict:
    return {"date": "2026-01-01T00:00:00+00:00", "machine": {"cpu": "Test CPU", "cores": 2, "platform": "p",
                                                              "python": "3"},
            "command": "python -m bench.replay", "transport": "stdio", "speed": 1.0, "pause_ms": 500.0,
            "traces": [{"name": "t", "keystrokes": 5, "duration_s": 2.0, "language": "python", "source": "s"}],
            "configs": [{"options": {"engine": {"speculation": "none"}}, **c} for c in configs]}


def _report(tmp_path, raw: dict, name: str = "r"):
    """Run ``python -m bench.report`` on ``raw``; its summary JSON and output folder."""
    src = tmp_path / "in" / f"{name}.raw.json"
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text(json.dumps(raw))
    out = tmp_path / "out"
    run_program("bench.report", src, "--out", out, "--name", name)
    return json.loads((out / f"{name}.json").read_text()), out


def _rec(kind, status, latency=None, gap=100.0):
    return {"kind": kind, "status": status, "latency_ms": latency, "gap_ms": gap}


CFG = {
    "name": "x",
    "traces": [{"records": [_rec("key", "shown", 50, gap=600), _rec("key", "shown", 150, gap=700),
                            _rec("key", "stale", gap=100), _rec("key", "empty", gap=900),
                            _rec("accept", "shown", 10, gap=50), _rec("key", "cancelled", gap=100)],
                "accept_points": 3, "accepted": 1, "chars_saved": 6, "chars_typed": 24, "duration_s": 2.0}],
    "engine": {"generated_tokens": 40, "wasted_tokens": 10, "draft_tokens": 20, "accepted_tokens": 15,
               "prompt_tokens": 100, "cached_prompt_tokens": 80, "requests_aborted": 2},
    "server": {"engine_requests": 3, "served_from_cache": 2},
}


def test_summary_math_on_fixed_records(tmp_path):
    s = _report(tmp_path, _raw(CFG))[0]["configs"][0]
    assert s["keystrokes"] == 5 and s["edits_sent"] == 6 and s["shown"] == 3
    assert s["latency_ms"]["p50"] == pytest.approx(50)
    assert s["latency_ms"]["p95"] == pytest.approx(140)          # 50 + 0.9 * (150 - 50)
    assert s["pauses"] == 3                                    # keys with gap >= 500 ms
    assert s["pauses_ghost_within_100ms"] == pytest.approx(1 / 3)
    assert s["pauses_ghost_within_200ms"] == pytest.approx(2 / 3)
    assert s["engine_requests_per_keystroke"] == pytest.approx(0.5)
    assert s["wasted_share"] == pytest.approx(0.25)
    assert s["acceptance_rate"] == pytest.approx(0.75)
    assert s["cached_prompt_share"] == pytest.approx(0.8)
    assert s["chars_saved"] == 6 and s["chars_saved_share"] == pytest.approx(0.25)
    assert s["status"] == {"shown": 3, "stale": 1, "empty": 1, "cancelled": 1}
    # over all 5 keystrokes: 50, 150, never, never, never -> the median keystroke got no ghost text in time
    assert s["all_keys_ms"] == {"p50": NEVER, "p95": NEVER}
    assert s["answered_ms"] == {"p50": None, "p95": None, "max": None}     # these records carry no answer_ms
    assert s["right_share"] is None and s["empty_share"] == pytest.approx(1 / 5)


def test_all_keys_answered_and_right(tmp_path):
    recs = [dict(_rec("key", "shown", 40), answer_ms=40, right=True), dict(_rec("key", "shown", 60), answer_ms=60,
                                                                             right=False),
            dict(_rec("key", "stale"), answer_ms=300), dict(_rec("key", "cancelled"), answer_ms=90, error=-32800),
            dict(_rec("key", "empty"), answer_ms=20)]
    s = _report(tmp_path / "a", _raw({**CFG, "traces": [{**CFG["traces"][0], "records": recs}]}))[0]["configs"][0]
    assert s["all_keys_ms"] == {"p50": NEVER, "p95": NEVER}   # 40, 60, never x3
    assert s["answered_ms"] == {"p50": 60, "p95": 300, "max": 300}   # 20, 40, 60, 300 (not the -32800); nearest rank
    assert s["right_share"] == pytest.approx(1 / 5)
    s = _report(tmp_path / "b", _raw({**CFG, "traces": [{**CFG["traces"][0], "records": recs[:2] + recs[4:]}]}))[0]
    assert s["configs"][0]["all_keys_ms"] == {"p50": 60, "p95": NEVER}


def test_write_json_markdown_and_plot(tmp_path):
    data, out = _report(tmp_path, _raw(CFG))
    md = (out / "r.md").read_text()
    assert "Test CPU, 2 cores" in md and "python -m bench.replay" in md
    assert "| x | 3/6 | 50 | 140 | 148 |" in md
    assert "| x | 5 | 40% | – | – | 20% | never / never |" in md
    assert data["configs"][0]["acceptance_rate"] == pytest.approx(0.75)
    assert data["configs"][0]["all_keys_ms"] == {"p50": "never", "p95": "never"}     # JSON has no infinity
    assert (out / "r.png").stat().st_size > 1000
    assert json.loads((out / "tmp" / "r.raw.json").read_text()) == _raw(CFG)        # the raw records kept beside


def test_without_matplotlib_it_says_how_to_get_the_plot_and_rerendering_stays_in_the_run_folder(tmp_path,
                                                                                                  monkeypatch):
    # a "matplotlib" that fails to import, ahead of the installed one on the program's path
    blocker = tmp_path / "no-matplotlib" / "matplotlib"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError(\"No module named 'matplotlib'\")\n")
    run = tmp_path / "replay-20260101T000000Z"
    raw_file = run / "tmp" / "replay.raw.json"
    raw_file.parent.mkdir(parents=True)
    raw_file.write_text(json.dumps(_raw(CFG)))
    before = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(blocker.parent), before])))
    out = run_program("bench.report", raw_file).stdout
    assert not (run / "replay.png").exists() and (run / "replay.json").exists()     # the run's folder, not tmp/
    assert "pip install -e '.[bench]'" in out and f"python -m bench.report {raw_file.resolve()}" in out
    monkeypatch.setenv("PYTHONPATH", before or "")
    # The command it prints draws the plot into the run's folder, not into the committed bench/results.
    run_program("bench.report", raw_file.resolve())
    assert (run / "replay.png").stat().st_size > 1000


def _key(status, right=None, answer=None, rhythm_trace=None):
    r = {"kind": "key", "status": status, "latency_ms": answer if status == "shown" else None, "gap_ms": 100.0}
    if right is not None:
        r["right"] = right
    if answer is not None:
        r["answer_ms"] = answer
    return r


def _cfg(name: str, traces: list[dict], **extra) -> dict:
    """A configuration's raw results: its traces' records and nothing accepted."""
    return {"name": name, "traces": [{"accept_points": 0, "accepted": 0, "chars_saved": 0, "chars_typed": 10,
                                      "duration_s": 1.0, **t} for t in traces], **extra}


def test_right_before_the_next_key_is_a_share_of_all_keystrokes_per_condition(tmp_path):
    fast = [_key("shown", True, 40), _key("shown", False, 60), _key("stale", answer=300), _key("cancelled"),
            dict(_key("empty", answer=20)), {"kind": "accept", "status": "shown", "right": True, "latency_ms": 5,
                                             "answer_ms": 5, "gap_ms": 50}]
    slow = [_key("shown", True, 30), _key("shown", True, 50)]
    one = _report(tmp_path / "one", _raw(_cfg("fast", [{"records": fast}]),
                                         _cfg("old", [{"records": [_key("shown", answer=10)]}])))[0]
    h = {c["name"]: c for c in one["conditions"]}
    assert h["fast"]["keystrokes"] == 5                                 # accept edits are not keystrokes
    assert h["fast"]["right_before_next_key"] == pytest.approx(1 / 5)   # shown AND right, over all keystrokes
    assert h["fast"]["ghost_before_next_key"] == pytest.approx(2 / 5)
    assert (h["fast"]["answered_p50_ms"], h["fast"]["answered_p95_ms"]) == (40, 300)   # 5, 20, 40, 60, 300
    assert h["old"]["right_before_next_key"] is None                    # no verdict: an old raw file

    def run(name, load, rnd, f, s):
        return _cfg(name, [{"rhythm": "fast", "records": f}, {"rhythm": "slow", "records": s}], load=load,
                    round=rnd, loadavg=f"{rnd}.0 1 1 1/1 1")

    data = _report(tmp_path / "rounds", _raw(run("default", "quiet", 1, fast, slow),
                                             run("base", "quiet", 1, fast[2:], slow[:1]),
                                             run("default", "quiet", 2, fast[2:], slow),
                                             run("base", "quiet", 2, fast, slow[:1] + [_key("stale")])))[0]
    rows = data["conditions"]
    assert {(r["name"], r["rhythm"]) for r in rows} == {(n, r) for n in ("default", "base")
                                                        for r in ("fast", "slow", "all")}
    meds = {(m["name"], m["rhythm"]): m for m in data["headline"]}
    assert meds["default", "fast"]["right_before_next_key"] == pytest.approx(0.1)       # rounds: 1/5 and 0/3
    assert meds["default", "fast"]["right_before_next_key_range"] == [0, pytest.approx(0.2)]
    assert meds["default", "slow"]["right_before_next_key"] == 1.0
    assert meds["base", "slow"]["right_before_next_key"] == pytest.approx(0.75)          # 1/1 and 1/2
    assert meds["default", "all"]["keystrokes"] == 7 + 5
    assert meds["default", "fast"]["loadavg_1min_range"] == [1.0, 2.0]
    v = {(x["load"], x["rhythm"]): x for x in data["verdicts"]}
    assert v["quiet", "slow"]["best"] == "default"
    assert v["quiet", "slow"]["default_minus_base"] == pytest.approx(0.25)
    assert v["quiet", "fast"]["default_minus_base"] == pytest.approx(0.0)                # 0.1 each
