"""The formula behind the vLLM report (Leviathan et al.), the real-size shapes and the LSP figures, through the
benchmarks run as programs (``bench/vllm/report.py``, ``dummy.py --write-only``, ``lsp_report.py``) on results
written here (CPU)."""

import json

import pytest

from tests.helpers.programs import run_program


def _step(ms: float) -> dict:
    s = {"median": ms / 1e3, "p95": ms / 1e3}
    return {"params": 1e9, "decode_step_s": s, "bandwidth_floor_s": ms / 2e3, "floor_fraction": 0.5,
            "prefill_s": {"2048": s, "4096": s}}


def _house_config(e: float, k: int | None) -> dict:
    t = {"median": 0.01, "p95": 0.02}
    return {"spec": {"mean_tokens_per_step": e, "acceptance_per_position": [0.5] * (k or 0)},
            "config": {"speculation": "draft" if k else "none", **({"num_speculative_tokens": k} if k else {})},
            "latency_s": t, "ttft_s": t, "tokens_per_s": {"median": 100.0 * e}}


def _figures(tmp_path, c: float, configs: dict[str, tuple[float, int]], lsp: dict | None = None) -> dict:
    """Run the report on a house.json of ``configs`` (name: (tokens per step E, k)) and a dummy_tp1.json whose draft
    step is ``c`` times the target's; FIGURES.json (and FIGURES.md beside it)."""
    res = tmp_path / "results"
    res.mkdir(parents=True)
    house = {"machine": {"gpu": "test"}, "results": {"none": _house_config(1.0, None),
                                                     **{n: _house_config(e, k) for n, (e, k) in configs.items()}}}
    (res / "house.json").write_text(json.dumps(house))
    (res / "dummy_tp1.json").write_text(json.dumps({"results": {"target-7b": _step(20.0), "draft-0.5b": _step(20.0 * c)}}))
    if lsp:
        (res / "lsp_vllm_none.json").write_text(json.dumps(lsp))
    out = tmp_path / "out"
    run_program("bench.vllm.report", res, "--out", out)
    return json.loads((out / "FIGURES.json").read_text())


@pytest.mark.parametrize("alpha,k", [(0.0, 4), (0.5, 2), (0.8, 4), (0.95, 8)])
def test_solve_alpha_inverts_expected_tokens(tmp_path, alpha, k):
    e = (1 - alpha ** (k + 1)) / (1 - alpha)
    [row] = [r for r in _figures(tmp_path, 0.1, {"draft": (e, k)})["house"] if r["name"] == "draft"]
    assert row["e"] == e and row["alpha"] == pytest.approx(alpha, abs=1e-6)


def test_solve_alpha_rejects_impossible_lengths(tmp_path):
    rows = {r["name"]: r for r in _figures(tmp_path, 0.1, {"short": (0.5, 4), "long": (6.0, 4)})["house"]}
    assert rows["short"]["alpha"] is None and rows["long"]["alpha"] is None


@pytest.mark.parametrize("e,k,c,check", [
    (3.0, 4, 0.0, lambda s: s == 3.0),           # free proposer: every extra token is a gain
    (3.0, 4, 0.5, lambda s: s == 1.0),           # 4 drafts at half a target step eat the gain
    (1.0, 4, 0.1, lambda s: s < 1),              # nothing accepted: pure loss
])
def test_leviathan_speedup(tmp_path, e, k, c, check):
    figures = _figures(tmp_path, c, {"draft": (e, k)})
    assert figures["c"] == pytest.approx(c)
    [row] = [r for r in figures["house"] if r["name"] == "draft"]
    assert check(row["expected"]), row
    assert row["measured"] == pytest.approx(e)                 # tokens/s over none's (100 * E over 100)


def test_dummy_shapes_have_the_published_sizes(tmp_path):
    out = run_program("bench.vllm.dummy", "--write-only", "--models-dir", tmp_path, "--only",
                      "target-7b,draft-0.5b").stdout
    shapes = json.loads(out.strip().splitlines()[-1])
    assert shapes["target-7b"]["params"] / 1e9 == pytest.approx(7.62, abs=0.01)
    assert shapes["draft-0.5b"]["params"] / 1e9 == pytest.approx(0.494, abs=0.01)
    cfg = json.loads((tmp_path / "target-7b" / "config.json").read_text())
    assert cfg["hidden_size"] == 3584 and cfg["num_hidden_layers"] == 28


def test_lsp_replay_figures_become_a_table(tmp_path):
    d = {"command": "python -m bench.replay x", "configs": [
        {"name": "none", "shown": 188, "edits_sent": 207, "latency_ms": {"p50": 63.13, "p95": 89.4, "p99": 124.2},
         "engine_requests_per_keystroke": 0.8, "engine_aborts": 10, "wasted_tokens": 82, "wasted_share": 0.074,
         "acceptance_rate": None, "engine_ready_s": 84.7}]}
    _figures(tmp_path, 0.1, {}, lsp=d)
    lines = (tmp_path / "out" / "FIGURES.md").read_text().splitlines()
    assert "| lsp_vllm_none.json | none | 188/207 | 63.1 | 89.4 | 124.2 | 0.80 | 10 | 82 (7%) | — | 84.7 |" in lines
    assert "- `lsp_vllm_none.json`: `python -m bench.replay x`" in lines


def _load_stage(samples: list[dict]) -> dict:
    lat = {"median": 50.0, "p95": 90.0, "max": 120.0}
    return {"stages": {"load": {
        "sent": 10, "clients": 2, "duration_s": 12.0, "engine_options": {}, "answered": 9, "nonempty": 8,
        "cancelled": 1, "busy": 0, "errors": {}, "unanswered": 0, "latency_ms": lat, "any_ms": lat,
        "supervisor_inflight_max": 2, "supervisor": {}, "rss_mib": {"max": 500.0},
        "samples": [{"t": s["t"], "supervisor_inflight": 1} for s in samples], "samples_device": samples}}}


def _lsp_report(tmp_path, samples: list[dict]) -> dict:
    folder = tmp_path / "call1"
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps(_load_stage(samples)))
    run_program("bench.vllm.lsp_report", folder, "--out", tmp_path)
    [load] = json.loads((tmp_path / "lsp_summary.json").read_text())["loads"]
    return load


def test_load_cpu_is_read_over_the_load_not_the_engine_start(tmp_path):
    # engine start (busy), idle wait, a short blip, idle, then the load (1 core busy), then idle at the end
    cpu = [0, 5, 10, 10.05, 10.1, 10.6, 10.6, 11.6, 12.6, 13.6, 14.6, 14.62]
    samples = [{"t": float(t), "cpu_s_server": c} for t, c in enumerate(cpu)]
    during = _lsp_report(tmp_path / "a", samples)["cpu_during_load"]
    assert during["window_s"] == [6.0, 10.0]
    assert during["server"] == pytest.approx(1.0) and during["engine_core"] is None
    flat = _lsp_report(tmp_path / "b", [{"t": 0.0, "cpu_s_server": 1.0}, {"t": 1.0, "cpu_s_server": 1.0}])
    assert "cpu_during_load" not in flat                        # no busy window
