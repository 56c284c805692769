"""The formula behind the vLLM report (Leviathan et al.) and the counter arithmetic of the benchmarks (CPU)."""

import pytest

from bench.vllm import dummy, report


@pytest.mark.parametrize("alpha,k", [(0.0, 4), (0.5, 2), (0.8, 4), (0.95, 8)])
def test_solve_alpha_inverts_expected_tokens(alpha, k):
    e = (1 - alpha ** (k + 1)) / (1 - alpha)
    assert report.solve_alpha(e, k) == pytest.approx(alpha, abs=1e-6)


def test_solve_alpha_rejects_impossible_lengths():
    assert report.solve_alpha(0.5, 4) is None and report.solve_alpha(6.0, 4) is None


def test_leviathan_speedup():
    assert report.leviathan(3.0, 4, 0.0) == 3.0            # free proposer: every extra token is a gain
    assert report.leviathan(3.0, 4, 0.5) == 1.0            # 4 drafts at half a target step eat the gain
    assert report.leviathan(1.0, 4, 0.1) < 1               # nothing accepted: pure loss


def test_dummy_shapes_have_the_published_sizes():
    assert dummy.params(dummy.SHAPES["target-7b"]) / 1e9 == pytest.approx(7.62, abs=0.01)
    assert dummy.params(dummy.SHAPES["draft-0.5b"]) / 1e9 == pytest.approx(0.494, abs=0.01)


def test_lsp_replay_figures_become_a_table():
    d = {"command": "python -m bench.replay x", "configs": [
        {"name": "none", "shown": 188, "edits_sent": 207, "latency_ms": {"p50": 63.13, "p95": 89.4, "p99": 124.2},
         "engine_requests_per_keystroke": 0.8, "engine_aborts": 10, "wasted_tokens": 82, "wasted_share": 0.074,
         "acceptance_rate": None, "engine_ready_s": 84.7}]}
    lines = report.lsp_section([("lsp_vllm_none.json", d)])
    assert "| lsp_vllm_none.json | none | 188/207 | 63.1 | 89.4 | 124.2 | 0.80 | 10 | 82 (7%) | — | 84.7 |" in lines
    assert "- `lsp_vllm_none.json`: `python -m bench.replay x`" in lines


def test_load_cpu_is_read_over_the_load_not_the_engine_start():
    from bench.vllm import lsp_report

    # engine start (busy), idle wait, a short blip, idle, then the load (1 core busy), then idle at the end
    cpu = [0, 5, 10, 10.05, 10.1, 10.6, 10.6, 11.6, 12.6, 13.6, 14.6, 14.62]
    samples = [{"t": float(t), "cpu_s_server": c} for t, c in enumerate(cpu)]
    w = lsp_report.busy_window(samples)
    assert w == (6.0, 10.0)
    assert lsp_report.cpu_during(samples, w, "cpu_s_server") == pytest.approx(1.0)
    assert lsp_report.busy_window([{"t": 0.0, "cpu_s_server": 1.0}, {"t": 1.0, "cpu_s_server": 1.0}]) is None
