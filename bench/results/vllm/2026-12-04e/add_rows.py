"""Rows of speculation_summary.json from `completer tune` on vLLM (house v2), 2026-12-04d and 2026-12-04e: one row
per configuration per run, with the requests' shape ("editor": lines typed in held-out files, planned as the server
plans them; "fixed": 48-token fill-in-the-middle completions) and the rule that judged greedy identity.
Run from the project root: python bench/results/vllm/2026-12-04e/add_rows.py (replaces its own rows)"""
import json
from pathlib import Path

D = Path("bench/results/vllm")
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
old = json.loads((D / "speculation_summary.json").read_text())
old = [r for r in old if r.get("source") not in {name for name, _ in RUNS}]   # re-running replaces this script's rows
rows = []
for name, rule in RUNS:
    t = json.loads((D / name).read_text())
    for config, r in t["table"].items():
        if "error" in r:
            continue
        method, _, k = config.partition(" k=")
        rows.append({"scale": "house", "method": method, "k": int(k or 0), "tokens_per_step": r["tokens_per_step"],
                     "speedup_vs_none": r["speedup_vs_none"],
                     "speedup_aggregate_vs_none": r["aggregate_tokens_per_s"] / t["table"]["none"]["aggregate_tokens_per_s"],
                     "tokens_per_s_p50": r["tokens_per_s_p50"], "latency_p50_ms": r["latency_p50_ms"],
                     "latency_p95_ms": r["latency_p95_ms"], "greedy_identical_to_none": r["greedy_identical_to_none"],
                     "identity_rule": rule, "chosen_by_tune": config == t["winner"], "requests": t.get("requests", "fixed"),
                     "prompts": t["prompts"], "rounds": r["rounds"], "measured": True, "model": "house:v2/target",
                     "drafter": "house:v2/eagle3" if method == "eagle3" else None, "source": name})
(D / "speculation_summary.json").write_text(json.dumps(old + rows, indent=1) + "\n")
for r in rows:
    print(r["source"], r["requests"], r["method"], r["k"], f'{r["speedup_vs_none"]:.2f}x', r["chosen_by_tune"])
