"""Rows of speculation_summary.json from call 3's `completer tune` on vLLM (house v2, one H100): the tune was cut off
by its time limit in round 3 of 3 (engine starts took 400 of its 510 s), so it chose nothing and wrote only
``tune.json.partial`` (per shape, each configuration's figures over its first 2 rounds). Here the partial tables are judged
as tune judges a finished run (``completer.tune.judge``: speed-up = median tokens/s over none's; greedy identity on
the first round, no prompt cached; the choice with --min-gain 1.05), so ``chosen_by_tune`` is what tune's rule picks
from these two rounds. Run from the project root:
python bench/results/vllm/2026-12-05/add_rows.py (replaces its own rows)"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
from bench.vllm.summary import tune_rows  # noqa: E402
from completer.tune import judge  # noqa: E402

HERE = Path(__file__).resolve().parent
SUMMARY = HERE.parent / "speculation_summary.json"
SOURCE = "2026-12-05/call3/tune.json.partial"
RULE = "first round, no prompt cached (dbd9bbf); tune cut off after 2 of 3 rounds, choice from those"


def finished_form(partial: dict) -> dict:
    """The partial tables judged as tune judges a finished run (``completer.tune.judge``, its default --min-gain)."""
    return {"by_requests": {shape: {"table": table, "prompts": len(table["none"]["output"]),
                                    "winner": judge(table, 1.05)} for shape, table in partial["tables"].items()}}


rows = [{**r, "engines": "side by side, interleaved", "machine": "1x H100 80GB HBM3",
         "drafter": "DFlash, 3 layers, causal blocks of 7 (2026-12-05 call 1, not committed)"
         if r["method"] == "dflash" else r["drafter"]}
        for r in tune_rows(finished_form(json.loads((HERE / "call3/tune.json.partial").read_text())), SOURCE, RULE)]
old = json.loads(SUMMARY.read_text())
SUMMARY.write_text(json.dumps([r for r in old if r.get("source") != SOURCE] + rows, indent=1) + "\n")
for r in rows:
    print(r["requests"], r["method"], r["k"], f'{r["speedup_vs_none"]:.2f}x', f'{r["tokens_per_step"]:.2f} tok/step',
          f'p50/p95 {r["latency_p50_ms"]:.0f}/{r["latency_p95_ms"]:.0f} ms', "identical" if r["greedy_identical_to_none"] else "DIFFERS",
          "CHOSEN" if r["chosen_by_tune"] else "")
