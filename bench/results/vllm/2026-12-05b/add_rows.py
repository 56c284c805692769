"""Rows of speculation_summary.json from call 3's `completer tune` on vLLM (house v2, one H200, 2026-12-05b): none,
the shipped EAGLE-3 drafter at k=2 and suffix decoding at k=8, engines side by side, 3 rounds interleaved, new
prompts every round (suffix decoding is a candidate). Run from the project root:
python bench/results/vllm/2026-12-05b/add_rows.py (replaces its own rows)"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
from bench.vllm.summary import add_tune_runs  # noqa: E402

HERE = Path(__file__).resolve().parent
RULE = "first round, every prompt new to the engine (fresh rounds, ee09362)"

rows = add_tune_runs(HERE.parent / "speculation_summary.json", [("2026-12-05b/call3/tune.json", RULE)],
                     engines="side by side, interleaved", machine="1x H200")
for r in rows:
    print(r["requests"], r["method"], r["k"], f'{r["speedup_vs_none"]:.2f}x', f'{r["tokens_per_step"]:.2f} tok/step',
          f'p50/p95 {r["latency_p50_ms"]:.0f}/{r["latency_p95_ms"]:.0f} ms',
          "identical" if r["greedy_identical_to_none"] else "DIFFERS", "CHOSEN" if r["chosen_by_tune"] else "")


def plot(rows: list[dict], path: Path) -> None:
    """Per request shape: each configuration's median tokens/s and its p50 / p95 latency, relative to none's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shapes = list(dict.fromkeys(r["requests"] for r in rows))
    fig, axes = plt.subplots(1, len(shapes), figsize=(5 * len(shapes), 3.6), sharey=True)
    for ax, shape in zip(axes, shapes):
        mine = [r for r in rows if r["requests"] == shape]
        none = next(r for r in mine if r["method"] == "none")
        names = [f'{r["method"]} k={r["k"]}' if r["k"] else r["method"] for r in mine]
        series = {"tokens/s p50 (higher is better)": [r["speedup_vs_none"] for r in mine],
                  "none's latency p50 / this": [none["latency_p50_ms"] / r["latency_p50_ms"] for r in mine],
                  "none's latency p95 / this": [none["latency_p95_ms"] / r["latency_p95_ms"] for r in mine]}
        for j, (label, ys) in enumerate(series.items()):
            ax.bar([i + 0.27 * (j - 1) for i in range(len(mine))], ys, 0.27, label=label)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.axhline(1.3, color="grey", lw=0.8, ls=":")
        ax.set_xticks(range(len(mine)), names)
        ax.set_title(f"{shape} requests ({mine[0]['prompts']} x {mine[0]['rounds']} rounds)")
    axes[0].set_ylabel("relative to none (> 1: faster)")
    axes[0].legend(fontsize=7)
    fig.suptitle("house v2 on vLLM 0.26, one H200: completer tune (2026-12-05b call 3)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


plot(rows, HERE / "tune.png")
