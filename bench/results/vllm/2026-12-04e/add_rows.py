"""Rows of speculation_summary.json from `completer tune` on vLLM (house v2), 2026-12-04d and 2026-12-04e: one row
per configuration per run (bench/vllm/summary.py's tune_rows), with the rule that judged greedy identity.
Run from the project root: python bench/results/vllm/2026-12-04e/add_rows.py (replaces its own rows)"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
from bench.vllm.summary import add_tune_runs  # noqa: E402

RUNS = [  # (file, rule: how greedy identity was judged by the tune that ran)
    ("2026-12-04d/tune.json", "1 round, every prompt"),
    ("2026-12-04e/call3/tune.json", "every round (e9568df)"),
    ("2026-12-04e/call4/tune-editor-other.json", "every round (e9568df)"),
    ("2026-12-04e/call4/tune-fixed.json", "every round (e9568df)"),
    ("2026-12-04e/call7/tune-editor-ngram.json", "round by round (b38b117)"),
    ("2026-12-04e/call7/tune-fixed.json", "round by round (b38b117)"),
    ("2026-12-04e/call10/tune-fixed.json", "first round, no prompt cached (dbd9bbf)"),
    ("2026-12-04e/call10/tune-editor.json", "first round, no prompt cached (dbd9bbf)"),
    ("2026-12-04e/call13/tune-fixed.json", "first round, no prompt cached (dbd9bbf)"),
]
for r in add_tune_runs(Path("bench/results/vllm/speculation_summary.json"), RUNS, engines="one at a time"):
    print(r["source"], r["requests"], r["method"], r["k"], f'{r["speedup_vs_none"]:.2f}x', r["chosen_by_tune"])
