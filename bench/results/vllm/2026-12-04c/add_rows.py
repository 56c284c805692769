"""Rows of speculation_summary.json for house v2 and its drafter (2026-12-04c): house.py's v2 run (measured) and the
7B shape from the measured 7B step costs (2026-12-03) with v2's drafter's held-out tokens per step (computed)."""
import json, sys
from pathlib import Path
sys.path[:0] = ["bench/vllm", "."]
from summary import house_rows
D = Path("bench/results/vllm")
house = json.loads((D / "2026-12-04c/raw/house.json").read_text())
rows = [dict(r, model="house:v2/target", drafter="house:v2/eagle3" if r["method"] == "eagle3" else None,
             source="2026-12-04c/raw/house.json") for r in house_rows(house)]
E = json.loads(Path("completer/models/house/v2/eagle3/train_meta.json").read_text())["heldout"]["expected_tokens_per_step"]
old = json.loads((D / "speculation_summary.json").read_text())
for r in old:
    if r["scale"] == "7b-shape" and r["method"] == "eagle3" and r.get("quantization") == "bf16":
        e = E[str(r["k"])]
        rows.append({"scale": "7b-shape", "method": "eagle3", "k": r["k"], "tokens_per_step": e,
                     "speedup_vs_none": e / (r["step_ms"] / r["target_step_ms"]), "step_ms": r["step_ms"],
                     "target_step_ms": r["target_step_ms"], "c": r["c"], "quantization": "bf16",
                     "tokens_per_step_from": "house:v2/eagle3's held-out report on house:v2/target (CPU, 199 prompts, same k)",
                     "model": "house:v2/target", "drafter": "house:v2/eagle3", "source": "2026-12-03 step costs",
                     "measured": False})
if any(r.get("source", "").startswith("2026-12-04c") or r.get("drafter") == "house:v2/eagle3" for r in old):
    raise SystemExit("already added")
out = old + rows
(D / "speculation_summary.json").write_text(json.dumps(out, indent=1) + "\n")
for r in rows:
    print(r["scale"], r["method"], r["k"], round(r["tokens_per_step"], 2), round(r["speedup_vs_none"], 3),
          round(r.get("speedup_aggregate_vs_none", 0), 3))
