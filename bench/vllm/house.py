"""Issue 8 (1): the vLLM backend on the house pair, one GPU: speculation side by side, and prefix-cache TTFT.

Per configuration (no speculation; EAGLE-3 drafter k = 2..8; draft model k = 2, 4, 6, 8; n-gram k = 4 on the CPU
and ngram_gpu k = 4, 8), each in its own engine with CUDA graphs
and bf16: completion latency (request to last chunk) and decode tokens/s (tokens / latency) over the same held-out
fill-in-the-middle prompts (``bench/vllm/prompts.json``, made by ``make_prompts.py``), one request at a time as an
editor sends them, greedy; medians and p95. Acceptance per draft position from the engine's counters (vLLM's
SpecDecodingStats). Greedy outputs are compared with the no-speculation run (bf16 kernels differ between a 1-token
decode and a k+1-token verification, so a near-tie can flip; the match count is reported, not asserted).

TTFT: for each prompt, the prompt cold (never seen), then the same prompt extended by a few typed characters
(its prefix is in vLLM's automatic prefix cache) — the editor's case after a keystroke.

    python bench/vllm/house.py --out $OUT/vllm [--tensor-parallel-size 2]
    python bench/vllm/house.py --out $OUT/vllm --only "none,eagle3 k=4,eagle3 k=2" --deadline-s 500

The JSON (with each configuration's token ids, compared with none's as soon as both exist) is rewritten after every
configuration, so a run cut off by a time limit keeps what it measured.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parent)]

from common import base_parser, counters_delta, engine_overrides, machine, summary, timed, write_json  # noqa: E402
from tqdm import tqdm  # noqa: E402

from completer.engine import EngineConfig, Request  # noqa: E402
from completer.engine.vllm.engine import VLLMEngine  # noqa: E402
from completer.prompt import FIM_PREFIX, FIM_SUFFIX  # noqa: E402

PROMPTS = Path(__file__).resolve().parent / "prompts.json"


def configs(ks: list[int], ngram_k: int, eagle_ks: list[int] = (2, 3, 4, 6, 8)) -> dict[str, dict]:
    out = {"none": dict(speculation="none")}
    for k in eagle_ks:
        out[f"eagle3 k={k}"] = dict(speculation="eagle3", num_speculative_tokens=k)
    for k in ks:
        out[f"draft k={k}"] = dict(speculation="draft", num_speculative_tokens=k)
    out[f"ngram k={ngram_k}"] = dict(speculation="ngram", num_speculative_tokens=ngram_k)
    for k in (ngram_k, 8):
        out[f"ngram_gpu k={k}"] = dict(speculation="ngram_gpu", num_speculative_tokens=k)
    return out


def make_engine(args, **cfg) -> VLLMEngine:
    return VLLMEngine(EngineConfig(backend="vllm", model=args.model, draft=args.draft, drafter=args.drafter,
                                   dtype="bfloat16",
                                   tensor_parallel_size=args.tensor_parallel_size,
                                   gpu_memory_utilization=args.gpu_memory_utilization,
                                   enforce_eager=args.enforce_eager, **cfg), **engine_overrides())


async def run_config(args, name: str, cfg: dict, prompts: list[str], warmup: list[str]) -> dict:
    t0 = time.perf_counter()
    engine = make_engine(args, **cfg)
    startup = time.perf_counter() - t0
    try:
        for i in range(3):                                           # warm-up (kernels, graphs)
            await timed(engine, Request(f"w{i}", warmup[i], max_new_tokens=args.max_new_tokens))
        before = engine.counters()
        runs = []
        for i, p in enumerate(tqdm(prompts, desc=name, file=sys.stdout, mininterval=5)):
            runs.append(await timed(engine, Request(f"{name}-{i}", p, max_new_tokens=args.max_new_tokens,
                                                    stop=("\n\n\n",))))
        spec = counters_delta(engine.counters(), before)
        ttft = []
        if name == "none":                                            # prefix cache: cold vs extended prompt
            for i, p in enumerate(prompts[: args.ttft_prompts]):
                # a never-seen prefix (unique first line), then the same prompt with characters typed at the cursor
                # (PSM: the prompt up to <|fim_suffix|> is shared, so its full KV blocks come from the cache)
                body = p.replace(FIM_PREFIX, f"{FIM_PREFIX}# session {i} {time.time_ns()}\n", 1)
                pre, sep, post = body.partition(FIM_SUFFIX)
                cold_prompt, warm_prompt = body, pre + "x = 1" + sep + post
                b = engine.counters()["cached_prompt_tokens"]
                cold = await timed(engine, Request(f"cold{i}", cold_prompt, max_new_tokens=1))
                m = engine.counters()["cached_prompt_tokens"]
                warm = await timed(engine, Request(f"warm{i}", warm_prompt, max_new_tokens=1))
                e = engine.counters()["cached_prompt_tokens"]
                ttft.append({"cold_s": cold["ttft_s"], "extended_s": warm["ttft_s"],
                             "prompt_tokens": engine.count_tokens(warm_prompt),
                             "cached_cold": m - b, "cached_extended": e - m})
    finally:
        await engine.close()
        await asyncio.sleep(2)                                        # let the engine process free the GPU
    lat = [r["latency_s"] for r in runs]
    tps = [r["tokens"] / r["latency_s"] for r in runs if r["tokens"]]
    res = {"config": cfg, "startup_s": startup, "latency_s": summary(lat), "tokens_per_s": summary(tps),
           "ttft_s": summary([r["ttft_s"] for r in runs]), "tokens": summary([r["tokens"] for r in runs]),
           "total_tokens": sum(r["tokens"] for r in runs), "total_s": sum(lat),
           "aggregate_tokens_per_s": sum(r["tokens"] for r in runs) / sum(lat), "spec": spec,
           "ids": [r["ids"] for r in runs]}
    if ttft:
        res["prefix_cache_ttft"] = {"cold_s": summary([t["cold_s"] for t in ttft]),
                                    "extended_s": summary([t["extended_s"] for t in ttft]), "runs": ttft}
    return res


async def main() -> None:
    p = base_parser(__doc__)
    p.add_argument("--model", default="house:target")
    p.add_argument("--draft", default="house:draft")
    p.add_argument("--prompts", type=Path, default=PROMPTS)
    p.add_argument("--n", type=int, default=40, help="prompts per configuration")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--ks", default="2,4,6,8")
    p.add_argument("--ngram-k", type=int, default=4)
    p.add_argument("--ttft-prompts", type=int, default=20)
    p.add_argument("--drafter", default="house:eagle3", help="EAGLE-3 drafter folder for the eagle3 configurations")
    p.add_argument("--only", default=None, help="comma-separated configuration names to run, in this order")
    p.add_argument("--deadline-s", type=float, default=None,
                   help="start no engine later than this minus --engine-s seconds after the start")
    p.add_argument("--engine-s", type=float, default=75.0)
    args = p.parse_args()
    everything = [d["prompt"] for d in json.loads(args.prompts.read_text())]
    prompts, warmup = everything[: args.n], everything[-3:]         # warm-up prompts are never measured
    assert len(everything) >= args.n + 3, f"{args.prompts} has {len(everything)} prompts; need --n + 3"
    cfgs = configs([int(k) for k in args.ks.split(",")], args.ngram_k)
    if args.only:
        unknown = [k for k in args.only.split(",") if k not in cfgs]
        if unknown:
            raise SystemExit(f"unknown configuration(s) {unknown}; known: {list(cfgs)}")
        cfgs = {k: cfgs[k] for k in args.only.split(",")}                # in the order given
    results = {}
    t_start = time.perf_counter()
    for name, cfg in cfgs.items():
        left = None if args.deadline_s is None else args.deadline_s - (time.perf_counter() - t_start)
        if left is not None and left < args.engine_s:
            print(f"{name} skipped: {left:.0f} s left before the deadline", flush=True)
            results[name] = {"config": cfg, "error": f"skipped: {left:.0f} s left before the deadline"}
            continue
        try:
            results[name] = await run_config(args, name, cfg, prompts, warmup)
        except Exception as e:                                          # keep the other configurations
            print(f"{name} failed: {type(e).__name__}: {e}", flush=True)
            results[name] = {"config": cfg, "error": f"{type(e).__name__}: {e}"}
        r = results[name]
        if "error" not in r:
            print(f"{name}: latency p50 {r['latency_s']['median']*1e3:.1f} ms p95 {r['latency_s']['p95']*1e3:.1f} "
                  f"ms, {r['tokens_per_s']['median']:.0f} tok/s, tokens/step {r['spec']['mean_tokens_per_step']:.2f}, "
                  f"acc/pos {[round(a, 3) if a is not None else None for a in r['spec']['acceptance_per_position']]}",
                  flush=True)
        base = results.get("none", {}).get("ids")
        if base:                                    # compared as each configuration finishes (a timeout loses none)
            for other in results.values():
                if "ids" in other:
                    other["greedy_identical_to_none"] = sum(a == b for a, b in zip(other["ids"], base))
                    other["greedy_compared"] = len(base)
        r = results[name]
        if base and "ids" in r and name != "none":
            print(f"{name}: greedy output identical to none on {r['greedy_identical_to_none']}/{len(base)} prompts",
                  flush=True)
        write_json(args.out, "house.json", {"machine": machine(), "args": {k: str(v) for k, v in vars(args).items()},
                                           "results": results})


if __name__ == "__main__":
    asyncio.run(main())
