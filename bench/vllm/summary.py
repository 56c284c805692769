"""Issue 15: speculation on vLLM at two scales, as one machine-readable list and a plot.

Reads the house bench's JSON (``house.py``: tokens/s, tokens per step, greedy match, per configuration, one engine
each, same prompts) and the dummy bench's JSON files (``dummy.py``: the 7B-shape target's decode step and the step
of the same target with a random EAGLE-3 drafter, k drafts + a (k+1)-token verification, nothing accepted).
Writes ``speculation_summary.json``: a list of
``{"scale": "house"|"7b-shape", "method", "k", "tokens_per_step", "speedup_vs_none", "measured"}``
(plus the inputs of each figure). House rows are measured (speedup = median tokens/s per request over none's, the
aggregate ratio beside it). 7B-shape rows are computed (``measured: false``): Leviathan et al.'s E/(k·c + 1) with
k·c + 1 = t_step(k) / t_target measured at 7B shape, E = tokens per step measured with our drafter on the house
target. Also ``speculation_summary.png`` (speedup by k at both scales) and a Markdown table on stdout.

    python bench/vllm/summary.py --house R/house.json --dummy R/dummy_tp1.json R/dummy_k6.json R/dummy_fp8.json \
        --out bench/results/vllm/2026-12-03

Or add the rows of ``completer tune --backend vllm`` results (files relative to the summary's folder, each with how
that tune judged greedy identity) to an existing summary, replacing rows an earlier run added from the same files:

    python bench/vllm/summary.py --add-tune R/speculation_summary.json --run measured/tune.json "first round" \
        --tag engines="side by side"
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def house_rows(house: dict, source: str | None = None, skip: tuple = ()) -> list[dict]:
    res = house["results"]
    none = res.get("none")
    if not none or "error" in none:
        raise SystemExit("house JSON has no 'none' result to compare with")
    rows = []
    for name, r in res.items():
        if "error" in r or name in skip:
            continue
        method, k = (name.split(" k=") + [None])[:2] if " k=" in name else (name, None)
        rows.append({"scale": "house", "method": method, "k": int(k) if k else 0,
                     "tokens_per_step": r["spec"]["mean_tokens_per_step"],
                     "speedup_vs_none": r["tokens_per_s"]["median"] / none["tokens_per_s"]["median"],
                     "speedup_aggregate_vs_none": r["aggregate_tokens_per_s"] / none["aggregate_tokens_per_s"],
                     "tokens_per_s_p50": r["tokens_per_s"]["median"],
                     "latency_p50_ms": r["latency_s"]["median"] * 1e3, "latency_p95_ms": r["latency_s"]["p95"] * 1e3,
                     "acceptance_per_position": r["spec"]["acceptance_per_position"],
                     "greedy_identical_to_none": f"{r.get('greedy_identical_to_none')}/{r.get('greedy_compared')}",
                     "measured": True, **({"source": source} if source else {})})
    return rows


def tune_rows(tune: dict, source: str, rule: str, model: str = "house:v2/target",
              drafter: str = "house:v2/eagle3") -> list[dict]:
    """Rows from one ``completer tune --backend vllm`` result (its JSON): one per configuration measured, with the
    requests' shape (``editor``: lines typed in held-out files, planned as the server plans them; ``fixed``:
    fill-in-the-middle completions of ``max_new_tokens``) and ``rule``, how that tune judged greedy identity. A
    tune of several shapes on the same engines (``--requests editor,fixed``) gives rows for each."""
    if "by_requests" in tune:
        one = {k: v for k, v in tune.items() if k != "by_requests"}
        return [row for shape, part in tune["by_requests"].items()
                for row in tune_rows({**one, **part, "requests": shape}, source, rule, model, drafter)]
    none = tune["table"]["none"]
    rows = []
    for config, r in tune["table"].items():
        if "error" in r:
            continue
        method, _, k = config.partition(" k=")
        rows.append({"scale": "house", "method": method, "k": int(k or 0), "tokens_per_step": r["tokens_per_step"],
                     "speedup_vs_none": r["speedup_vs_none"],
                     "speedup_aggregate_vs_none": r["aggregate_tokens_per_s"] / none["aggregate_tokens_per_s"],
                     "tokens_per_s_p50": r["tokens_per_s_p50"], "latency_p50_ms": r["latency_p50_ms"],
                     "latency_p95_ms": r["latency_p95_ms"], "greedy_identical_to_none": r["greedy_identical_to_none"],
                     "identity_rule": rule, "chosen_by_tune": config == tune["winner"],
                     "requests": tune.get("requests", "fixed"), "prompts": tune["prompts"], "rounds": r["rounds"],
                     **({"first_token_p50_ms": r["first_token_p50_ms"],
                         "decode_ms_per_token_p50": r["decode_ms_per_token_p50"]} if "first_token_p50_ms" in r else {}),
                     "measured": True, "model": model,
                     "drafter": r.get("settings", {}).get("drafter") or (drafter if method == "eagle3" else None),
                     "source": source})
    return rows


def add_tune_runs(summary: Path, runs: list[tuple[str, str]], **tags) -> list[dict]:
    """Add the rows of ``runs`` ((file relative to ``summary``'s folder, identity rule), ...) to ``summary``,
    replacing rows an earlier call made from the same files; ``tags`` are added to each new row."""
    old = json.loads(summary.read_text())
    names = {name for name, _ in runs}
    rows = [{**row, **tags} for name, rule in runs
            for row in tune_rows(json.loads((summary.parent / name).read_text()), name, rule)]
    summary.write_text(json.dumps([r for r in old if r.get("source") not in names] + rows, indent=1) + "\n")
    return rows


def dummy_steps(files: list[Path]) -> tuple[float, dict]:
    """(target decode step s, {(k, quant): step s}) from dummy.py JSON files."""
    target, steps = None, {}
    for f in files:
        for name, r in json.loads(f.read_text())["results"].items():
            if "error" in r:
                continue
            if name == "target-7b":
                target = r["decode_step_s"]["median"]
            elif name.startswith("eagle3 k="):
                steps[(r["k"], r.get("quantization"))] = r["step_s"]["median"]
    if target is None:
        raise SystemExit("no target-7b decode step in the dummy JSON files")
    return target, steps


def shape_rows(target_s: float, steps: dict, house: list[dict], fp8_target_s: float | None) -> list[dict]:
    E = {r["k"]: r["tokens_per_step"] for r in house if r["method"] == "eagle3"}
    rows = [{"scale": "7b-shape", "method": "none", "k": 0, "tokens_per_step": 1.0, "speedup_vs_none": 1.0,
             "step_ms": target_s * 1e3, "measured": True}]
    for (k, quant), s in sorted(steps.items(), key=lambda x: (x[0][1] or "", x[0][0])):
        if k not in E:
            continue
        cost = s / target_s                                        # k*c + 1, in bf16 target steps
        own = s / fp8_target_s if quant == "fp8" and fp8_target_s else cost if not quant else None
        row = {"scale": "7b-shape", "method": "eagle3", "k": k, "tokens_per_step": E[k],
               "speedup_vs_none": E[k] / cost, "step_ms": s * 1e3, "target_step_ms": target_s * 1e3,
               "c": (own - 1) / k if own else None, "quantization": quant or "bf16",
               "speedup_vs_none_is_against": "the bf16 target without speculation",
               "tokens_per_step_from": "vLLM on the house target with the house EAGLE-3 drafter (same k)",
               "measured": False}
        if quant == "fp8" and fp8_target_s:
            row["speedup_vs_fp8_none"] = E[k] * fp8_target_s / s
            row["fp8_target_step_ms"] = fp8_target_s * 1e3
        rows.append(row)
    return rows


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for scale, style in (("house", "o-"), ("7b-shape", "s--")):
        pts = sorted((r["k"], r["speedup_vs_none"]) for r in rows if r["scale"] == scale and r["method"] == "eagle3"
                     and r.get("quantization", "bf16") == "bf16")
        if pts:
            ax.plot(*zip(*pts), style, label=f"eagle3, {scale} ({'measured' if scale == 'house' else 'E/(kc+1)'})")
    agg = sorted((r["k"], r["speedup_aggregate_vs_none"]) for r in rows if r["scale"] == "house"
                 and r["method"] == "eagle3")
    if agg:
        ax.plot(*zip(*agg), "o:", label="eagle3, house, aggregate tokens/s")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.axhline(2.0, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("k (draft tokens per step)")
    ax.set_ylabel("speedup vs no speculation")
    ax.set_title("vLLM 0.26 on one H200: EAGLE-3 drafter for the house target")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--house", type=Path)
    ap.add_argument("--dummy", type=Path, nargs="+")
    ap.add_argument("--extra-house", type=Path, nargs="*", default=[],
                    help="house.json of other runs (each compared with its own none; their none rows left out)")
    ap.add_argument("--fp8-target-step-ms", type=float, default=None,
                    help="fp8 target decode step measured elsewhere (dummy.py --quant fp8), for the fp8 rows")
    ap.add_argument("--out", type=Path, help="folder for speculation_summary.json/.png")
    ap.add_argument("--add-tune", type=Path, metavar="SUMMARY",
                    help="instead: add the rows of --run tune results to this speculation_summary.json")
    ap.add_argument("--run", nargs=2, action="append", default=[], metavar=("FILE", "RULE"),
                    help="with --add-tune: a tune result (relative to SUMMARY's folder) and its identity rule")
    ap.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE",
                    help="with --add-tune: a field added to each new row")
    args = ap.parse_args()
    if args.add_tune:
        if not args.run:
            ap.error("--add-tune needs at least one --run FILE RULE")
        bad = [t for t in args.tag if "=" not in t]
        if bad:
            ap.error(f"--tag takes KEY=VALUE, not {bad[0]!r}")
        tags = dict(t.split("=", 1) for t in args.tag)
        rows = add_tune_runs(args.add_tune, [tuple(r) for r in args.run], **tags)
        print(f"added {len(rows)} rows to {args.add_tune}")
        return
    if not (args.house and args.dummy and args.out):
        ap.error("--house, --dummy and --out are required (or --add-tune)")
    house = house_rows(json.loads(args.house.read_text()))
    extra = [row for f in args.extra_house for row in house_rows(json.loads(f.read_text()), str(f), skip=("none",))]
    target_s, steps = dummy_steps(args.dummy)
    rows = house + extra + shape_rows(target_s, steps, house,
                              args.fp8_target_step_ms / 1e3 if args.fp8_target_step_ms else None)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "speculation_summary.json").write_text(json.dumps(rows, indent=1) + "\n")
    plot(rows, args.out / "speculation_summary.png")
    print("| scale | method | k | tokens/step | speedup vs none | measured | notes |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        note = ""
        if r["scale"] == "house":
            note = ("from " + r["source"].split("/measured-")[-1] + "; " if r.get("source") else "") + (f"aggregate {r['speedup_aggregate_vs_none']:.2f}x; latency p50/p95 {r['latency_p50_ms']:.1f}/"
                    f"{r['latency_p95_ms']:.1f} ms; greedy = none {r['greedy_identical_to_none']}")
        elif r["method"] != "none":
            note = f"step {r['step_ms']:.2f} ms vs {r['target_step_ms']:.2f} ms, c = {r['c']:.3f}, {r['quantization']}"
            if r["quantization"] != "bf16":
                note += f" target (speedup vs the bf16 target; c against the {r['quantization']} target's step)"
            if "speedup_vs_fp8_none" in r:
                note += f"; vs fp8 none {r['speedup_vs_fp8_none']:.2f}x"
        else:
            note = f"decode step {r['step_ms']:.2f} ms"
        print(f"| {r['scale']} | {r['method']} | {r['k']} | {r['tokens_per_step']:.2f} | {r['speedup_vs_none']:.2f}x | "
              f"{r['measured']} | {note} |")
    print(f"wrote {args.out / 'speculation_summary.json'} and .png")


if __name__ == "__main__":
    main()
