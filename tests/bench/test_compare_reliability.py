import json

from tests.helpers.programs import run_program


def _run(root, name, over_1s, p95, answered):
    d = root / name
    d.mkdir(parents=True)
    load = {"sent": 100, "answered": answered, "nonempty": answered - 1, "cancelled": 100 - answered, "busy": 0,
            "latency_ms": {"median": 5.0, "p95": p95}, "any_ms": {"p95": p95 + 1, "max": 900.0 + over_1s * 200,
                                                                  "over_1s": over_1s},
            "server_cpu": {"process_s": 3.0, "main_thread_s": 2.0, "process_ms_per_request": 1.5,
                           "main_thread_ms_per_request": 1.0},
            "engine_after": {"requests_started": 40}}
    (d / "reliability.json").write_text(json.dumps({"loadavg": {"start": "1.0 0.9 0.8", "end": "1.5 1 1"},
                                                    "load": {"traces": load}}))


def test_medians_per_tree_and_the_runs_with_nothing_over_a_second(tmp_path):
    root = tmp_path / "runs"
    _run(root, "base-50clients-run1", 3, 300.0, 60)
    _run(root, "base-50clients-run2", 0, 100.0, 80)
    _run(root, "base-50clients-run3", 5, 200.0, 70)
    _run(root, "new-50clients-run1", 0, 90.0, 90)
    (root / "notes").mkdir()                                   # not a run folder: ignored
    run_program("bench.compare_reliability", root, tmp_path / "out")
    runs = json.loads((tmp_path / "out" / "runs.json").read_text())
    assert sorted((r["tree"], r["run"]) for r in runs) == [("base", 1), ("base", 2), ("base", 3), ("new", 1)]
    medians = (tmp_path / "out" / "summary.md").read_text().split("Medians over the runs:")[1]
    # clients | mode | tree | runs | answered | answered p95 | max | over 1 s per run | runs with none over 1 s
    assert "| 50 | traces | base | 3 | 70 | 200.0 | 1500.0 | 3, 0, 5 | 1 |" in medians
    assert "| 50 | traces | new | 1 | 90 | 90.0 | 900.0 | 0 | 1 |" in medians
    assert (tmp_path / "out" / "reliability.png").stat().st_size > 0


def test_no_runs_is_a_clear_error(tmp_path):
    proc = run_program("bench.compare_reliability", tmp_path, tmp_path / "out", check=False)
    assert proc.returncode != 0
    assert "no {base|new}-{N}clients-run{R}/reliability.json" in proc.stderr
