"""Rows of speculation_summary.json from this folder's `completer tune` runs on vLLM (house v2): engines side by
side, rounds interleaved (5589ff5). Run from the project root: python bench/results/vllm/2026-12-04f/add_rows.py
(replaces its own rows)"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
from bench.vllm.summary import add_tune_runs  # noqa: E402

RULE = "first round, no prompt cached (dbd9bbf)"
RUNS = [("2026-12-04f/call9/tune-fixed.json", RULE), ("2026-12-04f/call6/tune-editor.json", RULE),
        ("2026-12-04f/call3/tune-prof.json", RULE + "; under py-spy")]
for r in add_tune_runs(Path("bench/results/vllm/speculation_summary.json"), RUNS, engines="side by side, interleaved"):
    print(r["source"], r["requests"], r["method"], r["k"], f'{r["speedup_vs_none"]:.2f}x', r["chosen_by_tune"])
