"""Issue 8 (3): the markdown report and plot from the device JSON (house.json, dummy_tp*.json, lsp*.json).

Expected speedup at real scale (Leviathan et al. 2023, arXiv 2211.17192): one speculative step with k draft tokens
costs k*c + 1 target-step units (c = t_draft / t_target, measured at real size in dummy_tp*.json) and yields E
tokens, E = mean tokens per step measured on the house pair (1 + accepted / drafts, the bonus token included); for
i.i.d. acceptance alpha, E = (1 - alpha^(k+1)) / (1 - alpha). Speedup = E / (k*c + 1). The measured small-scale
speedup is the house pair's median decode tokens/s with the draft over that without.

    python bench/vllm/report.py RESULTS_DIR [--out bench/results/vllm]      (FIGURES.md, FIGURES.json, a plot)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def solve_alpha(e: float, k: int) -> float | None:
    """alpha with (1 - alpha^(k+1)) / (1 - alpha) = e (bisection; e in [1, k+1])."""
    if not 1 <= e <= k + 1:
        return None
    lo, hi = 0.0, 1.0 - 1e-9
    for _ in range(100):
        mid = (lo + hi) / 2
        val = (1 - mid ** (k + 1)) / (1 - mid)
        lo, hi = (mid, hi) if val < e else (lo, mid)
    return (lo + hi) / 2


def leviathan(e: float, k: int, c: float) -> float:
    return e / (k * c + 1)


def ms(x):
    return f"{x * 1e3:.2f}" if isinstance(x, (int, float)) else "—"


def house_section(house: dict, c: float | None) -> tuple[list[str], list[dict]]:
    res = house["results"]
    base = res.get("none", {})
    base_tps = base.get("tokens_per_s", {}).get("median")
    lines = ["## 1. House pair (vLLM, one GPU, bf16, CUDA graphs, one request at a time)", "",
             "| config | latency p50 ms | p95 ms | TTFT p50 ms | tok/s p50 | tokens/step | acceptance per position "
             "| greedy = none | measured speedup | expected at 7B/0.5B |", "|---|---|---|---|---|---|---|---|---|---|"]
    rows = []
    for name, r in res.items():
        if "error" in r:
            lines.append(f"| {name} | failed: {r['error'][:120]} |||||||||")
            continue
        s = r["spec"]
        k = r["config"].get("num_speculative_tokens")
        e = s["mean_tokens_per_step"]
        meas = r["tokens_per_s"]["median"] / base_tps if base_tps else None
        exp = leviathan(e, k, c) if (c is not None and k and r["config"]["speculation"] == "draft") else None
        exp_ngram = e if r["config"]["speculation"] == "ngram" else None   # n-gram lookup costs ~nothing (c = 0)
        acc = ", ".join(f"{a:.2f}" for a in s["acceptance_per_position"] if a is not None) or "—"
        same = f"{r.get('greedy_identical_to_none', '—')}/{r.get('greedy_compared', '—')}"
        lines.append(f"| {name} | {ms(r['latency_s']['median'])} | {ms(r['latency_s']['p95'])} | "
                     f"{ms(r['ttft_s']['median'])} | {r['tokens_per_s']['median']:.0f} | {e:.2f} | {acc} | {same} | "
                     f"{meas:.2f}x | {f'{exp:.2f}x' if exp else (f'≤{exp_ngram:.2f}x (c≈0)' if exp_ngram else '—')} |")
        rows.append({"name": name, "k": k, "e": e, "alpha": solve_alpha(e, k) if k else None, "measured": meas,
                     "expected": exp, "acc": s["acceptance_per_position"]})
    pc = base.get("prefix_cache_ttft")
    if pc:
        runs = pc["runs"]
        lines += ["", f"Prefix cache (no speculation): TTFT of a never-seen FIM prompt p50 {ms(pc['cold_s']['median'])} "
                      f"ms (p95 {ms(pc['cold_s']['p95'])}), of the same prompt with 5 characters typed at the cursor "
                      f"p50 {ms(pc['extended_s']['median'])} ms (p95 {ms(pc['extended_s']['p95'])}); "
                      f"{len(runs)} pairs, prompts of ~{sorted(r['prompt_tokens'] for r in runs)[len(runs)//2]} "
                      f"tokens, cached tokens on the extended prompt median "
                      f"{sorted(r['cached_extended'] for r in runs)[len(runs)//2]} (cold: "
                      f"{sorted(r['cached_cold'] for r in runs)[len(runs)//2]})."]
    return lines, rows


def dummy_section(dummy: dict, tp: str) -> tuple[list[str], float | None]:
    res = dummy["results"]
    lines = [f"## 2. Real-size shapes, random weights (load_format=dummy, bf16, CUDA graphs, TP={tp})", "",
             "| model | params | decode step p50 ms | p95 ms | bandwidth floor ms | floor / measured | prefill 2k p50 ms "
             "| prefill 4k p50 ms |", "|---|---|---|---|---|---|---|---|"]
    for name, r in res.items():
        if "error" in r:
            lines.append(f"| {name} | failed: {r['error'][:150]} |||||||")
            continue
        lines.append(f"| {name} | {r['params']/1e9:.2f} B | {ms(r['decode_step_s']['median'])} | "
                     f"{ms(r['decode_step_s']['p95'])} | {ms(r['bandwidth_floor_s'])} | {r['floor_fraction']:.0%} | "
                     f"{ms(r['prefill_s']['2048']['median'])} | {ms(r['prefill_s']['4096']['median'])} |")
    t, d = res.get("target-7b", {}), res.get("draft-0.5b", {})
    c = None
    if "decode_step_s" in t and "decode_step_s" in d:
        c = d["decode_step_s"]["median"] / t["decode_step_s"]["median"]
        lines += ["", f"Cost ratio c = t_draft / t_target = {ms(d['decode_step_s']['median'])} / "
                      f"{ms(t['decode_step_s']['median'])} = **{c:.3f}** (parameter ratio "
                      f"{d['params']/t['params']:.3f}). Floor = 2 bytes x params / 4.8 TB/s."]
    return lines, c


def plot(rows: list[dict], path: Path) -> bool:
    """Draw the acceptance and speedup plot; False (and a message) without matplotlib (a bare GPU box)."""
    try:
        import matplotlib
    except ImportError:
        print(f"matplotlib is not installed: no {path.name} (pip install matplotlib, then run this again)")
        return False

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for r in rows:
        if r["acc"] and r["k"]:
            a.plot(range(1, len(r["acc"]) + 1), r["acc"], marker="o", label=r["name"])
    a.set_xlabel("draft position"), a.set_ylabel("acceptance"), a.set_title("house pair on vLLM"), a.legend()
    names = [r["name"] for r in rows if r["measured"]]
    b.bar([i - 0.2 for i in range(len(names))], [r["measured"] for r in rows if r["measured"]], 0.4,
          label="measured (house pair)")
    b.bar([i + 0.2 for i in range(len(names))], [r["expected"] or 0 for r in rows if r["measured"]], 0.4,
          label="expected at 7B/0.5B (Leviathan)")
    b.set_xticks(range(len(names)), names, rotation=30), b.axhline(1, color="k", lw=0.5), b.legend()
    b.set_ylabel("speedup vs no speculation")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def lsp_section(files: list[tuple[str, dict]]) -> list[str]:
    """The LSP replay figures (``bench.replay`` JSON, one configuration or several per file) as one table."""
    out = ["## 4. LSP over websockets (bench.replay, keystroke to ghost text)", "",
           "| file | config | shown | p50 ms | p95 ms | p99 ms | engine req/key | engine aborts | wasted tokens | "
           "acceptance | engine ready s |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    commands = []
    for name, d in files:
        for c in d.get("configs", []):
            lat = c.get("latency_ms") or {}
            acc = c.get("acceptance_rate")
            out.append(f"| {name} | {c.get('name')} | {c.get('shown')}/{c.get('edits_sent')} | "
                       f"{_num(lat.get('p50'))} | {_num(lat.get('p95'))} | {_num(lat.get('p99'))} | "
                       f"{_num(c.get('engine_requests_per_keystroke'), 2)} | {c.get('engine_aborts')} | "
                       f"{c.get('wasted_tokens')} ({_num(100 * c['wasted_share'] if c.get('wasted_share') is not None else None, 0)}%) | "
                       f"{_num(acc, 2)} | {_num(c.get('engine_ready_s'))} |")
        if d.get("command"):
            commands.append(f"- `{name}`: `{d['command']}`")
    return out + [""] + commands + [""]


def _num(x, digits: int = 1) -> str:
    return f"{x:.{digits}f}" if isinstance(x, (int, float)) else "—"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("results", type=Path)
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results" / "vllm")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    lines = ["# vLLM backend on the H200: measured figures (generated by bench/vllm/report.py)", ""]
    house = json.loads((args.results / "house.json").read_text()) if (args.results / "house.json").is_file() else None
    c = None
    dummy_lines = []
    for f in sorted(args.results.glob("dummy_tp*.json")):
        dl, cc = dummy_section(json.loads(f.read_text()), f.stem.split("tp")[-1])
        dummy_lines += dl + [""]
        c = c if c is not None else cc
    if house:
        m = house["machine"]
        lines += [f"Machine: {m.get('gpu')}; vLLM {m.get('vllm')}, torch {m.get('torch')}, Python {m.get('python')}.",
                  ""]
        hl, rows = house_section(house, c)
        lines += hl + [""]
        if plot(rows, args.out / "house_speculation.png"):
            lines += ["![acceptance and speedup](house_speculation.png)", ""]
    lines += dummy_lines
    if house and c is not None:
        lines += ["## 3. Expected speedup at real scale (Leviathan et al.)", "",
                  "Speedup(k) = E(k) / (k·c + 1), E = mean tokens per verification step measured on the house pair "
                  "(bonus token included), c from section 2; alpha solves E = (1 − α^(k+1)) / (1 − α).", "",
                  "| config | E (tokens/step) | alpha | expected speedup 7B/0.5B | measured speedup house pair |",
                  "|---|---|---|---|---|"]
        for r in rows:
            if r["expected"] is not None:   # alpha: None for an E no i.i.d. acceptance gives ("—")
                lines.append(f"| {r['name']} | {r['e']:.2f} | {_num(r['alpha'], 3)} | {r['expected']:.2f}x | "
                             f"{_num(r['measured'], 2)}x |")
        lines.append("")
    lsp = sorted(args.results.glob("lsp*.json"))
    if lsp:
        lines += lsp_section([(f.name, json.loads(f.read_text())) for f in lsp])
    (args.out / "FIGURES.md").write_text("\n".join(lines))
    # the same figures, machine-readable: the cost ratio c and per house configuration E, alpha, the speedups
    (args.out / "FIGURES.json").write_text(json.dumps({"c": c, "house": rows if house else []}, indent=1) + "\n")
    print(f"wrote {args.out / 'FIGURES.md'} and FIGURES.json")


if __name__ == "__main__":
    main()
