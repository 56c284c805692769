"""``completer tune``: choose the speculation setting by measuring it, on this machine, for these models.

Why: whether speculation pays depends on the hardware and the models (on the H200 the house pair's ``draft_model``
is 0.5x of no speculation while at 7B an EAGLE-3 drafter is ~2x; on a CPU it is different again), so the setting is
chosen from a measurement, not hoped for. Each available method and k runs in its own engine on the same sample
prompts, one request at a time, greedy, in rounds interleaved across the configurations (the order rotating; the
embedded backend's engines all side by side, vLLM's one at a time); per configuration, from each prompt's median time
over the rounds: median tokens/s per request, aggregate tokens/s, latency p50/p95, tokens per step, and whether the
output is identical to no speculation (and the same in every round). The winner is the fastest
configuration by median tokens/s among those with identical greedy output, at least ``--min-gain`` over none, and
request latency p50 and p95 no higher than none's; if nothing qualifies, ``none`` wins. Saves the result (JSON: the winning engine settings and the whole table) where
an engine with ``speculation="auto"`` (the default) finds it for these models (``completer/engine/choice.py``), also
to ``--out`` if given, and prints the table.

    completer tune                                   # embedded backend, house pair, CPU or GPU
    completer tune --backend vllm --model M --draft D --drafter E --out tune.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import time
from pathlib import Path

from .engine import EngineConfig, EngineError, Request, create_engine
from .engine.choice import choice_path, measured_for
from .engine.config import DEFAULT_MODEL, HOUSE_DRAFTS, own_drafter
from .stats import nearest_rank


def candidates(backend: str, ks: list[int], draft: str | None, drafter: str | None) -> dict[str, dict]:
    """Every speculation setting the backend offers, each k of ``ks`` (engine settings per name)."""
    out = {"none": dict(speculation="none")}
    for k in ks:
        if draft:
            out[f"draft k={k}"] = dict(speculation="draft", num_speculative_tokens=k)
        if backend == "vllm" and drafter:
            out[f"eagle3 k={k}"] = dict(speculation="eagle3", num_speculative_tokens=k)
        out[f"ngram k={k}"] = dict(speculation="ngram", num_speculative_tokens=k)
        if backend == "vllm":
            out[f"ngram_gpu k={k}"] = dict(speculation="ngram_gpu", num_speculative_tokens=k)
        elif draft:
            out[f"draft+ngram k={k}"] = dict(speculation="draft+ngram", num_speculative_tokens=k)
    if backend == "torch" and draft:
        out["draft adaptive"] = dict(speculation="draft", num_speculative_tokens="adaptive")
    return out


async def _one(engine, rid: str, prompt, max_new_tokens: int) -> tuple[float, list[int]]:
    t0, ids = time.perf_counter(), []
    async for chunk in engine.generate(Request(rid, prompt, max_new_tokens=max_new_tokens)):
        ids.extend(chunk.token_ids)
    return time.perf_counter() - t0, ids


def summarise(rounds: list[list[tuple[float, list[int]]]], before: dict, after: dict) -> dict:
    """One configuration's figures from its rounds (each: (seconds, token ids) per prompt): per prompt the median
    time over the rounds, then medians / p95 over the prompts; the ids of the first round (greedy: every round's)."""
    lat = [statistics.median(r[i][0] for r in rounds) for i in range(len(rounds[0]))]
    ids = [ids for _, ids in rounds[0]]
    drafts = (after.get("draft_per_position") or [0])[0] - ((before.get("draft_per_position") or [0]) + [0])[0]
    accepted = after.get("accepted_tokens", 0) - before.get("accepted_tokens", 0)
    return {"tokens_per_s_p50": statistics.median(len(x) / t for t, x in zip(lat, ids) if x),
            "aggregate_tokens_per_s": sum(len(x) for x in ids) / sum(lat),
            "latency_p50_ms": statistics.median(lat) * 1e3, "latency_p95_ms": nearest_rank(lat, 95) * 1e3,
            "tokens_per_step": 1 + accepted / drafts if drafts else 1.0, "rounds": len(rounds),
            "same_output_every_round": all([x for _, x in r] == ids for r in rounds), "ids": ids}


async def measure(configs: dict[str, EngineConfig], prompts: list, max_new_tokens: int, rounds: int,
                  progress) -> dict[str, dict]:
    """Run ``configs`` side by side: every engine built and warmed first, then ``rounds`` rounds in which each
    configuration runs every prompt once, the order rotating each round (so a change of the machine's load falls on
    all of them alike). A configuration whose engine fails is ``{"error": ...}``."""
    engines, out = {}, {}
    try:
        for name, config in configs.items():
            try:
                engines[name] = create_engine(config)
                await _one(engines[name], "warm-up", prompts[0], max_new_tokens)
            except (EngineError, ValueError) as e:
                out[name] = {"error": str(e)}
                engines.pop(name, None)
        before = {name: e.counters() for name, e in engines.items()}
        runs: dict[str, list] = {name: [] for name in engines}
        names = list(engines)
        for r in range(rounds):
            k = r % len(names) if names else 0
            for name in names[k:] + names[:k]:
                runs[name].append([await _one(engines[name], f"r{r}-{i}", p, max_new_tokens)
                                   for i, p in enumerate(prompts)])
                progress(name, r)
        for name, e in engines.items():
            out[name] = summarise(runs[name], before[name], e.counters())
    finally:
        for e in engines.values():
            await e.close()
    return out


def sample_prompts(args, tokenizer) -> list:
    if args.prompts:
        data = json.loads(Path(args.prompts).read_text())
        out = [d["prompt"] if isinstance(d, dict) else d for d in data][: args.n]
        if not out:
            raise SystemExit(f"completer tune: no prompts in {args.prompts}")
        return out
    from .models.drafter import heldout_prompts

    return heldout_prompts(tokenizer, args.n, seed=1234, max_len=900)


def choose(table: dict[str, dict], min_gain: float) -> str:
    """The fastest configuration that is never slower than none: identical greedy output (so the same tokens per
    prompt, and latency compares like for like), at least ``min_gain`` in median tokens/s, and neither the median
    nor the p95 request latency above none's (a tokens/s gain on short requests alone once chose a setting that
    made the median request slower); else ``none``."""
    base = table["none"]
    ok = [(r["tokens_per_s_p50"], name) for name, r in table.items()
          if "error" not in r and r.get("greedy_identical_to_none")
          and r["tokens_per_s_p50"] >= min_gain * base["tokens_per_s_p50"]
          and r["latency_p50_ms"] <= base["latency_p50_ms"] and r["latency_p95_ms"] <= base["latency_p95_ms"]]
    return max(ok)[1] if ok else "none"


async def run(args) -> int:
    ks = [int(k) for k in args.ks.split(",") if k]
    common = dict(backend=args.backend, model=args.model, draft=args.draft, device=args.device)
    if args.backend == "vllm":
        common.update(drafter=args.drafter, gpu_memory_utilization=args.gpu_memory_utilization)
    cands = candidates(args.backend, ks, args.draft, args.drafter)
    if args.only:
        cands = {k: cands[k] for k in args.only.split(",") if k in cands}
        cands.setdefault("none", dict(speculation="none"))
    from .engine.base import open_model

    _, tokenizer = open_model(args.model)              # the engines' tokenizer, without starting an engine
    prompts = sample_prompts(args, tokenizer)
    rounds = args.rounds or (3 if args.backend == "torch" else 1)
    print(f"tuning {len(cands)} configurations on {len(prompts)} prompts, {args.max_new_tokens} new tokens each, "
          f"{rounds} round(s)", flush=True)
    # the embedded backend's engines are small and share one model thread: all side by side, rounds interleaved;
    # vLLM engines each take a share of GPU memory: one at a time, its rounds in a row
    groups = [list(cands)] if args.backend == "torch" else [[name] for name in cands]
    total, done, t0 = rounds * len(cands), [0], time.time()

    def progress(name: str, r: int) -> None:
        done[0] += 1
        eta = (time.time() - t0) / done[0] * (total - done[0])
        print(f"[{done[0]}/{total}] round {r + 1}/{rounds} {name}  (ETA {eta:.0f} s)", flush=True)

    table: dict[str, dict] = {}
    for group in groups:
        measured = await measure({n: EngineConfig(**{**common, **cands[n]}) for n in group}, prompts,
                                 args.max_new_tokens, rounds, progress)
        for name in group:
            table[name] = {"settings": cands[name], **measured[name]}
            if "error" in measured[name]:
                print(f"{name}: error: {measured[name]['error']}", flush=True)
    base = table["none"]
    for r in table.values():
        if "error" not in r and "error" not in base:
            r["greedy_identical_to_none"] = r["ids"] == base["ids"] and r["same_output_every_round"]
            r["speedup_vs_none"] = r["tokens_per_s_p50"] / base["tokens_per_s_p50"]
    if "error" in base:
        raise SystemExit(f"completer tune: no speculation failed, nothing to compare with: {base['error']}")
    for r in table.values():
        r.pop("ids", None)
    winner = choose(table, args.min_gain)
    tuned = EngineConfig(**{**common, "speculation": "none"})
    result = {"command": "completer tune " + " ".join(args.argv), "measured_for": measured_for(tuned),
              "machine": {"platform": platform.platform(),
              "processor": platform.processor(), "python": sys.version.split()[0]},
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "prompts": len(prompts),
              "max_new_tokens": args.max_new_tokens, "min_gain": args.min_gain,
              "winner": winner, "settings": {**common, **table[winner]["settings"]}, "table": table}
    text = json.dumps(result, indent=1) + "\n"
    saved_to = choice_path(tuned)                 # where an engine with speculation="auto" finds it
    saved_to.parent.mkdir(parents=True, exist_ok=True)
    tmp = saved_to.with_name(saved_to.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(saved_to)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    print("| configuration | tok/s p50 | vs none | aggregate tok/s | latency p50 / p95 ms | tokens/step | greedy = none |")
    print("|---|---|---|---|---|---|---|")
    for name, r in table.items():
        if "error" in r:
            print(f"| {name} | error: {r['error']} | | | | | |")
            continue
        print(f"| {name}{' **(chosen)**' if name == winner else ''} | {r['tokens_per_s_p50']:.1f} | "
              f"{r['speedup_vs_none']:.2f}x | {r['aggregate_tokens_per_s']:.1f} | {r['latency_p50_ms']:.0f} / "
              f"{r['latency_p95_ms']:.0f} | {r['tokens_per_step']:.2f} | {r['greedy_identical_to_none']} |")
    print(f"chosen: {winner} -> engine settings {json.dumps(result['settings'])}; saved for speculation='auto' "
          f"(the default) in {saved_to}" + (f"; wrote {args.out}" if args.out else ""))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = argparse.ArgumentParser(prog="completer tune", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=("torch", "vllm"), default="torch")
    ap.add_argument("--model", default=DEFAULT_MODEL, help=f"target model (default {DEFAULT_MODEL})")
    ap.add_argument("--draft", default=None, help="draft model ('' for none; default: the house target's own "
                    "draft, none for other models)")
    ap.add_argument("--drafter", default=None, help="EAGLE-3 drafter (vLLM backend; '' for none; default: the one "
                    "that ships for the target: house:eagle3 for house:target, house:v2/eagle3 for house:v2/target)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.35)
    ap.add_argument("--ks", default="2,4", help="comma-separated k to try for each method")
    ap.add_argument("--only", default=None, help="comma-separated configuration names (none is always run)")
    ap.add_argument("--prompts", default=None, help="JSON list of prompts (strings or {'prompt': ...}); "
                    "default: fill-in-the-middle prompts from held-out source files")
    ap.add_argument("--n", type=int, default=12, help="prompts per configuration")
    ap.add_argument("--rounds", type=int, default=0, help="rounds over the prompts per configuration, interleaved "
                    "(per prompt the median time is used; default 3 on the embedded backend, 1 on vLLM)")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--min-gain", type=float, default=1.05, help="a method must beat none by this factor")
    ap.add_argument("--out", default=None, help="also write the result here (it is always saved where engines "
                    "with speculation='auto' look: completer/engine/choice.py)")
    args = ap.parse_args(argv)
    args.argv = argv
    args.draft, args.drafter = default_models(args.model, args.draft, args.drafter)
    return asyncio.run(run(args))


def default_models(model: str, draft: str | None, drafter: str | None) -> tuple[str | None, str | None]:
    """The draft and the EAGLE-3 drafter tune runs with: the ones given ('' = none), else the ones that ship for
    ``model`` (house:v2/target: house:v2/draft and house:v2/eagle3; house:target: house:draft and house:eagle3)."""
    return (HOUSE_DRAFTS.get(model) if draft is None else (draft or None),
            own_drafter(model) if drafter is None else (drafter or None))


if __name__ == "__main__":
    raise SystemExit(main())
