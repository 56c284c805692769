"""Concurrent requests on the embedded engine with and without shared forwards (issue 13, item 5).

N clients send a completion at the same moment (held-out FIM prompts, house pair, greedy); per speculation method
(none, draft, ngram: the engine's default is draft) an engine with ``batch_decode`` on (plain steps, the draft's
steps and the target's verifications of all running requests in shared forwards) and one with it off (each request
stepped alone, in turn). Rounds rotate the order of the configurations so that all see the same machine load. Per
configuration: per-request latency p50/p95, aggregate generated tokens per second of a round (median), the engine's
shared forwards and verifications. Outputs must be identical to the same method unbatched (greedy: each row of a
shared forward is computed as alone).

    python bench/batching.py                      # -> bench/results/batching-<UTC time>/
    python bench/batching.py --configs none draft ngram --clients 1 2 4 --rounds 6 --out bench/results/batching-x
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


async def round_(engine, prompts, max_new, tag, warm=False):
    from completer.engine import Request

    async def one(i, p):
        t0 = time.perf_counter()
        ids = []
        key = f"doc{i}" if warm else None           # warm: the client's document cache holds its prompt
        async for c in engine.generate(Request(f"{tag}-{i}", p, max_new_tokens=max_new, cache_key=key)):
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
    from completer.engine.torch.engine import TorchEngine
    from completer.prompt import template_for_model
    from completer.stats import nearest_rank

    configs = [(m, b) for m in args.configs for b in (True, False)]
    engines = {}
    for m, b in configs:
        kw = {} if m == "none" else {"num_speculative_tokens": args.k}
        engines[m, b] = TorchEngine(EngineConfig(speculation=m, device="cpu", threads=args.threads, batch_decode=b,
                                                 **kw))
    for e in engines.values():
        e.stop_ids = set()                                # every request yields max_new tokens
    any_e = engines[configs[0]]
    pool = make_prompts(heldout_sources(max(args.clients)), max(args.clients), 0, 3000, 600, any_e.count_tokens,
                        args.budget, template_for_model(any_e.model_path))
    texts = [p["prompt"] for p in pool]
    rows = []
    total = len(args.clients) * args.rounds * len(configs)
    from tqdm import tqdm
    with tqdm(total=total, desc="batching bench", unit="round") as bar:
        for n in args.clients:
            prompts = (texts * n)[:n]
            for e in engines.values():                        # warm-up (also times a plain step, see _batchable)
                await round_(e, prompts, 8, f"w{n}", args.warm)
            for r in range(args.rounds):
                shift = r % len(configs)
                for cfg in configs[shift:] + configs[:shift]:
                    e = engines[cfg]
                    before = (e.batched_steps, e.batched_verifications, e.counters())
                    wall, res = await round_(e, prompts, args.max_new, f"{n}-{r}-{cfg[0]}-{cfg[1]}", args.warm)
                    after = e.counters()
                    rows.append({"clients": n, "speculation": cfg[0], "batch": cfg[1], "round": r, "wall_s": wall,
                                 "latencies_s": [x for x, _ in res], "outputs": [ids for _, ids in res],
                                 "tokens": sum(len(ids) for _, ids in res),
                                 "batched_forwards": e.batched_steps - before[0],
                                 "batched_verifications": e.batched_verifications - before[1],
                                 "draft_tokens": after["draft_tokens"] - before[2]["draft_tokens"],
                                 "accepted_tokens": after["accepted_tokens"] - before[2]["accepted_tokens"],
                                 "load1": os.getloadavg()[0]})
                    bar.update(1)
    for e in engines.values():
        await e.close()
    summary = []
    for n in args.clients:
        for m in args.configs:
            ref = {r["round"]: r["outputs"] for r in rows if r["clients"] == n and r["speculation"] == m
                   and not r["batch"]}
            for b in (True, False):
                rs = [r for r in rows if r["clients"] == n and r["speculation"] == m and r["batch"] == b]
                lat = [x for r in rs for x in r["latencies_s"]]
                drafted = sum(r["draft_tokens"] for r in rs)
                summary.append({"clients": n, "speculation": m, "batch_decode": b,
                                "latency_ms_p50": 1e3 * statistics.median(lat), "latency_ms_p95": 1e3 * nearest_rank(lat, 95),
                                "tokens_per_s_p50": statistics.median(r["tokens"] / r["wall_s"] for r in rs),
                                "batched_forwards_per_round": statistics.median(r["batched_forwards"] for r in rs),
                                "batched_verifications_per_round":
                                    statistics.median(r["batched_verifications"] for r in rs),
                                "acceptance": sum(r["accepted_tokens"] for r in rs) / drafted if drafted else None,
                                "identical_to_unbatched": all(r["outputs"] == ref[r["round"]] for r in rs),
                                "load1_med": statistics.median(r["load1"] for r in rs)})
    cpu = next((l.split(":", 1)[1].strip() for l in subprocess.run(["lscpu"], capture_output=True, text=True)
                .stdout.splitlines() if l.startswith("Model name")), "?")
    return {"command": "python " + " ".join(shlex.quote(a) for a in sys.argv), "cpu": cpu, "cores": os.cpu_count(),
            "threads": args.threads, "max_new": args.max_new, "warm": args.warm, "k": args.k, "rounds": args.rounds,
            "summary": summary, "rows": rows}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--configs", nargs="+", default=["none", "draft", "ngram"], help="speculation methods")
    p.add_argument("--warm", action="store_true", help="each client's prompt is in its document's KV cache (as "
                   "when typing in it): the rounds time the decode/speculation steps, not the prompt")
    p.add_argument("--k", type=int, default=4, help="num_speculative_tokens of the speculative configurations")
    p.add_argument("--clients", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--rounds", type=int, default=6)
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
    md = ["# Concurrent requests, shared forwards (batch_decode) on/off, per speculation method (bench/batching.py)",
          "", f"Command: `{res['command']}`  ",
          f"Machine: {res['cpu']}, {res['cores']} cores, engine threads {args.threads or 'all'}; load average "
          f"{load0:.2f} at start, {res['load_end']:.2f} at end. House pair, greedy, {args.max_new} tokens per request "
          f"(stop tokens ignored), k={args.k} for draft/ngram, {args.rounds} rounds per configuration, order rotated "
          f"each round. Latency: each request from its send to its last token, all rounds pooled. Prompts: "
          + ("warm (each client's prompt already in its document's KV cache: the time is the decode steps')"
             if args.warm else f"cold ({args.budget}-token budget, prefilled every round)") + ".", "",
          "| clients | speculation | batch_decode | latency p50 ms | p95 ms | tokens/s (round, median) | "
          "shared forwards/round | shared verifications/round | acceptance | outputs = unbatched | load |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in res["summary"]:
        acc = "-" if s["acceptance"] is None else f"{s['acceptance']:.2f}"
        md.append(f"| {s['clients']} | {s['speculation']} | {s['batch_decode']} | {s['latency_ms_p50']:.0f} | "
                  f"{s['latency_ms_p95']:.0f} | {s['tokens_per_s_p50']:.0f} | {s['batched_forwards_per_round']:.0f} | "
                  f"{s['batched_verifications_per_round']:.0f} | {acc} | {s['identical_to_unbatched']} | "
                  f"{s['load1_med']:.2f} |")
    (out / "batching.md").write_text("\n".join(md) + "\n")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    for m in args.configs:
        for b in (True, False):
            ss = [s for s in res["summary"] if s["speculation"] == m and s["batch_decode"] == b]
            style = dict(marker="o", linestyle="-" if b else "--", label=f"{m}, batch {'on' if b else 'off'}")
            line = a1.plot([s["clients"] for s in ss], [s["latency_ms_p50"] for s in ss], **style)[0]
            a2.plot([s["clients"] for s in ss], [s["tokens_per_s_p50"] for s in ss], color=line.get_color(), **style)
    a1.set_xlabel("concurrent requests"); a1.set_ylabel("latency p50 ms"); a1.legend(fontsize=8)
    a2.set_xlabel("concurrent requests"); a2.set_ylabel("aggregate tokens/s (round median)"); a2.legend(fontsize=8)
    fig.suptitle(f"{args.max_new} tokens per request, house pair, {res['cores']}-core CPU")
    fig.tight_layout()
    fig.savefig(out / "batching.png", dpi=110)
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
