"""Concurrent requests on the embedded engine with and without batched decode steps (issue 13, item 5).

N clients send a completion at the same moment (held-out FIM prompts, house target, greedy, no speculation so
that every decode step is batchable); rounds alternate between an engine with ``batch_decode`` on and one with it
off, so both see the same machine load. Per configuration: per-request latency p50/p95, aggregate generated
tokens per second of a round, and the engine's batched forwards. Outputs must be identical (a batched step gives
each request what it gets alone).

    python bench/batching.py                      # -> bench/results/batching-<UTC time>/
    python bench/batching.py --clients 1 2 4 8 --rounds 4 --out bench/results/batching
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


async def round_(engine, prompts, max_new, tag):
    from completer.engine import Request

    async def one(i, p):
        t0 = time.perf_counter()
        ids = []
        async for c in engine.generate(Request(f"{tag}-{i}", p, max_new_tokens=max_new)):
            ids.extend(c.token_ids)
        return time.perf_counter() - t0, ids

    t0 = time.perf_counter()
    res = await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
    return time.perf_counter() - t0, res


async def run(args) -> dict:
    try:                                   # imported as bench.batching or run as a script (python bench/batching.py)
        from bench.speculation import heldout_sources, make_prompts
    except ImportError:
        from speculation import heldout_sources, make_prompts

    from completer.engine import EngineConfig
    from completer.engine.torch_engine import TorchEngine
    from completer.prompt import template_for_model

    engines = {b: TorchEngine(EngineConfig(speculation="none", device="cpu", threads=args.threads, batch_decode=b))
               for b in (True, False)}
    for e in engines.values():
        e.stop_ids = set()                                # every request yields max_new tokens
    any_e = engines[True]
    pool = make_prompts(heldout_sources(max(args.clients)), max(args.clients), 0, 3000, 600, any_e.count_tokens,
                        args.budget, template_for_model(any_e.model_path))
    texts = [p["prompt"] for p in pool]
    rows = []
    total = len(args.clients) * args.rounds * 2
    from tqdm import tqdm
    with tqdm(total=total, desc="batching bench", unit="round") as bar:
        for n in args.clients:
            prompts = (texts * n)[:n]
            for e in engines.values():                        # warm-up
                await round_(e, prompts, 4, f"w{n}")
            for r in range(args.rounds):
                for b in ((True, False) if r % 2 == 0 else (False, True)):
                    e = engines[b]
                    before = e.batched_steps
                    wall, res = await round_(e, prompts, args.max_new, f"{n}-{r}-{b}")
                    rows.append({"clients": n, "batch": b, "round": r, "wall_s": wall,
                                 "latencies_s": [x for x, _ in res], "outputs": [ids for _, ids in res],
                                 "tokens": sum(len(ids) for _, ids in res), "batched_forwards": e.batched_steps - before,
                                 "load1": os.getloadavg()[0]})
                    bar.update(1)
    for e in engines.values():
        await e.close()
    summary = []
    for n in args.clients:
        ref = {r["round"]: r["outputs"] for r in rows if r["clients"] == n and not r["batch"]}
        for b in (True, False):
            rs = [r for r in rows if r["clients"] == n and r["batch"] == b]
            lat = sorted(x for r in rs for x in r["latencies_s"])
            summary.append({"clients": n, "batch_decode": b, "latency_ms_p50": 1e3 * statistics.median(lat),
                            "latency_ms_p95": 1e3 * lat[min(len(lat) - 1, round(0.95 * (len(lat) - 1)))],
                            "tokens_per_s_p50": statistics.median(r["tokens"] / r["wall_s"] for r in rs),
                            "batched_forwards_per_round": statistics.median(r["batched_forwards"] for r in rs),
                            "identical_to_unbatched": all(r["outputs"] == ref[r["round"]] for r in rs),
                            "load1_med": statistics.median(r["load1"] for r in rs)})
    cpu = next((l.split(":", 1)[1].strip() for l in subprocess.run(["lscpu"], capture_output=True, text=True)
                .stdout.splitlines() if l.startswith("Model name")), "?")
    return {"command": "python " + " ".join(shlex.quote(a) for a in sys.argv), "cpu": cpu, "cores": os.cpu_count(),
            "threads": args.threads, "max_new": args.max_new, "rounds": args.rounds, "summary": summary, "rows": rows}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--max-new", type=int, default=32)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--budget", type=int, default=1024)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    out = Path(args.out) if args.out else ROOT / "bench" / "results" / f"batching-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}"
    out.mkdir(parents=True, exist_ok=True)
    load0 = os.getloadavg()[0]
    res = asyncio.run(run(args))
    res["load_start"], res["load_end"] = load0, os.getloadavg()[0]
    (out / "batching.json").write_text(json.dumps(res, indent=1) + "\n")
    md = ["# Concurrent requests, batched decode steps on/off (bench/batching.py)", "",
          f"Command: `{res['command']}`  ",
          f"Machine: {res['cpu']}, {res['cores']} cores, engine threads {args.threads or 'all'}; load average "
          f"{load0:.2f} at start, {res['load_end']:.2f} at end. House target, no speculation, {args.max_new} tokens "
          f"per request, {args.rounds} rounds per configuration, alternating.", "",
          "| clients | batch_decode | latency p50 ms | p95 ms | tokens/s (round) | batched forwards/round | "
          "outputs = unbatched | load |", "|---|---|---|---|---|---|---|---|"]
    for s in res["summary"]:
        md.append(f"| {s['clients']} | {s['batch_decode']} | {s['latency_ms_p50']:.0f} | {s['latency_ms_p95']:.0f} | "
                  f"{s['tokens_per_s_p50']:.0f} | {s['batched_forwards_per_round']:.0f} | {s['identical_to_unbatched']} "
                  f"| {s['load1_med']:.2f} |")
    (out / "batching.md").write_text("\n".join(md) + "\n")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    for b in (True, False):
        ss = [s for s in res["summary"] if s["batch_decode"] == b]
        a1.plot([s["clients"] for s in ss], [s["latency_ms_p50"] for s in ss], marker="o", label=f"batch {b}")
        a2.plot([s["clients"] for s in ss], [s["tokens_per_s_p50"] for s in ss], marker="o", label=f"batch {b}")
    a1.set_xlabel("concurrent requests"); a1.set_ylabel("latency p50 ms"); a1.legend()
    a2.set_xlabel("concurrent requests"); a2.set_ylabel("aggregate tokens/s"); a2.legend()
    fig.tight_layout()
    fig.savefig(out / "batching.png", dpi=110)
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
