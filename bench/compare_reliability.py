"""Table and plot of interleaved base/new ``bench.reliability`` load runs (issue 13's load goals, side by side).

Reads every ``{base|new}-{N}clients-run{R}/reliability.json`` under ROOT (``python -m bench.reliability
--skip-fuzz --skip-faults --clients N --out ROOT/new-50clients-run1``, the two trees' runs alternating), and writes
to OUTDIR: ``runs.json`` (one row per run and load mode), ``summary.md`` (every run, then medians per clients, mode
and tree: answered, answered p95, slowest message, messages over 1 s per run, server CPU per request sent) and
``reliability.png``.

    python -m bench.compare_reliability ROOT OUTDIR
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

RUN = re.compile(r"(base|new)-(\d+)clients-run(\d+)$")


def rows(root: Path) -> list[dict]:
    """One row per run folder and load mode (trace replay, continuous typing)."""
    out = []
    for d in sorted(root.glob("*clients-run*")):
        m = RUN.match(d.name)
        if not m or not (d / "reliability.json").is_file():
            continue
        r = json.loads((d / "reliability.json").read_text())
        for mode, load in r["load"].items():
            cpu = load.get("server_cpu") or {}
            out.append({"tree": m[1], "clients": int(m[2]), "run": int(m[3]), "mode": mode,
                        "load": f"{r['loadavg']['start'].split()[0]} / {r['loadavg']['end'].split()[0]}",
                        "sent": load["sent"], "answered": load["answered"], "nonempty": load["nonempty"],
                        "cancelled": load["cancelled"], "busy": load.get("busy"),
                        "p50": load["latency_ms"]["median"], "p95": load["latency_ms"]["p95"],
                        "any_p95": load["any_ms"]["p95"], "any_max": load["any_ms"]["max"],
                        "over_1s": load["any_ms"]["over_1s"],
                        "cpu_proc": cpu.get("process_s"), "cpu_main": cpu.get("main_thread_s"),
                        "ms_req_proc": cpu.get("process_ms_per_request"),
                        "ms_req_main": cpu.get("main_thread_ms_per_request"),
                        "engine_started": load["engine_after"]["requests_started"]})
    return out


def _f(v) -> str:
    return "–" if v is None else f"{v:.1f}" if isinstance(v, float) else str(v)


def _median(xs: list):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def table(runs: list[dict]) -> str:
    lines = ["| clients | mode | tree | run | load start / end | sent | answered (non-empty) | busy | answered p50 / p95 ms "
             "| every message p95 / max ms | over 1 s | engine requests | server CPU s: process / main thread "
             "| per request sent ms: process / main thread |",
             "|---:|---|---|---:|---|---:|---|---:|---|---|---:|---:|---|---|"]
    for x in sorted(runs, key=lambda x: (-x["clients"], x["mode"], x["tree"], x["run"])):
        lines.append(f"| {x['clients']} | {x['mode']} | {x['tree']} | {x['run']} | {x['load']} | {x['sent']} | "
                     f"{x['answered']} ({x['nonempty']}) | {x['busy']} | {_f(x['p50'])} / {_f(x['p95'])} | "
                     f"{_f(x['any_p95'])} / {_f(x['any_max'])} | {x['over_1s']} | {x['engine_started']} | "
                     f"{_f(x['cpu_proc'])} / {_f(x['cpu_main'])} | {_f(x['ms_req_proc'])} / {_f(x['ms_req_main'])} |")
    lines += ["", "Medians over the runs:", "",
              "| clients | mode | tree | runs | answered | answered p95 ms | every message max ms | over 1 s (per run) "
              "| runs with none over 1 s | per request sent ms: process / main thread |",
              "|---:|---|---|---:|---:|---:|---:|---|---:|---|"]
    groups: dict[tuple, list[dict]] = {}
    for x in runs:
        groups.setdefault((x["clients"], x["mode"], x["tree"]), []).append(x)
    for (n, mode, tree), xs in sorted(groups.items(), key=lambda kv: (-kv[0][0], kv[0][1], kv[0][2])):
        over = ", ".join(str(x["over_1s"]) for x in sorted(xs, key=lambda x: x["run"]))
        lines.append(f"| {n} | {mode} | {tree} | {len(xs)} | {_f(_median([x['answered'] for x in xs]))} | "
                     f"{_f(_median([x['p95'] for x in xs]))} | {_f(_median([x['any_max'] for x in xs]))} | {over} | "
                     f"{sum(1 for x in xs if x['over_1s'] == 0)} | {_f(_median([x['ms_req_proc'] for x in xs]))} / "
                     f"{_f(_median([x['ms_req_main'] for x in xs]))} |")
    return "\n".join(lines) + "\n"


def plot(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(16, 4.5))
    modes = sorted({x["mode"] for x in runs})
    cats = [(n, m) for n in sorted({x["clients"] for x in runs}, reverse=True) for m in modes]
    panels = [("ms_req_main", "server main thread (event loop) CPU per request sent, ms"),
              ("any_max", "slowest message (answered, superseded or busy), ms"), ("p95", "answered p95, ms")]
    for i, (key, title) in enumerate(panels):
        for j, tree in enumerate(("base", "new")):
            pts = [(k + (j - 0.5) * 0.3, x[key]) for k, (n, m) in enumerate(cats) for x in runs
                   if x["tree"] == tree and x["clients"] == n and x["mode"] == m and x[key] is not None]
            ax[i].scatter([p[0] for p in pts], [p[1] for p in pts], label=tree, marker="o" if tree == "base" else "^")
        ax[i].set_xticks(range(len(cats)))
        ax[i].set_xticklabels([f"{n} cl.\n{m}" for n, m in cats], fontsize=8)
        ax[i].set_title(title, fontsize=9)
        ax[i].legend()
        if key == "any_max":
            ax[i].axhline(1000, color="grey", lw=0.8, ls="--")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.compare_reliability", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", type=Path, help="folder of {base|new}-{N}clients-run{R}/ run folders")
    ap.add_argument("out", type=Path, help="where runs.json, summary.md and reliability.png go")
    args = ap.parse_args(argv)
    runs = rows(args.root)
    if not runs:
        ap.error(f"no {{base|new}}-{{N}}clients-run{{R}}/reliability.json under {args.root}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "runs.json").write_text(json.dumps(runs, indent=1))
    text = table(runs)
    (args.out / "summary.md").write_text(text)
    plot(runs, args.out / "reliability.png")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
