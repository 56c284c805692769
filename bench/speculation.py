"""Issue-2 speculation benchmark: the embedded engine on the house pair, CPU, every method side by side in one run.

What it measures, per configuration (no speculation; draft model with fixed k = 1..8; n-gram prompt lookup;
adaptive k with the draft, with n-gram, and with draft+n-gram): per-completion latency (request to last chunk,
greedy, cold prompt: no prefix-cache reuse) and decode throughput (generated tokens / latency), as medians and p95
over every prompt x repeat; acceptance rate per draft position from the engine's counters. Prompts are
fill-in-the-middle prompts cut at random points of held-out files (never trained on). The configurations run
interleaved (for each repeat, for each prompt, every configuration) so that machine noise hits them all alike.
Greedy outputs must be identical across configurations (speculation is lossless); the run checks and reports it.

It also times one target forward and one draft forward of a single token at a typical context, because the
draft pays only where it is much cheaper than the target: with cost ratio c = t_draft / t_target and per-token
acceptance alpha, k draft tokens cost about k*c + 1 target-forward units and yield (1 - alpha^(k+1)) / (1 - alpha)
tokens (Leviathan et al. 2023). On a CPU a small model's forward is dominated by fixed per-call overhead, so c is
far from params_draft / params_target.

    python bench/speculation.py                 # house pair, CPU -> bench/results/speculation-<UTC time>/speculation.*
    python bench/speculation.py --model gguf:smollm2 --draft house:smollm2/draft --ks 2 4 \
        --configs none 'draft k=2' 'draft k=4' 'ngram k=4'      # SmolLM2-135M and its draft (plain prompts)
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

from completer.engine import EngineConfig, Request
from completer.engine.config import HOUSE_DRAFT, HOUSE_MODEL
from completer.engine.torch.engine import TorchEngine
from completer.prompt import fim_prompt
from completer.stats import nearest_rank

try:
    from bench import record
except ImportError:                 # run as a file (python bench/speculation.py): bench/ is on sys.path
    import record

RESULTS = Path(__file__).resolve().parent / "results"


def configs(ks: list[int]) -> dict[str, dict]:
    out = {"none": dict(speculation="none")}
    for k in ks:
        out[f"draft k={k}"] = dict(speculation="draft", num_speculative_tokens=k)
    out["ngram k=4"] = dict(speculation="ngram", num_speculative_tokens=4)
    out["draft adaptive"] = dict(speculation="draft", num_speculative_tokens="adaptive")
    out["ngram adaptive"] = dict(speculation="ngram", num_speculative_tokens="adaptive")
    out["draft+ngram adaptive"] = dict(speculation="draft+ngram", num_speculative_tokens="adaptive")
    return out


def heldout_sources(limit_files: int, files: list[str] | None = None) -> list[tuple[str, str]]:
    """(name, text) of held-out Python files from the models helper's corpus split (or the given files)."""
    if not files:
        from completer.training import corpus

        out = []
        for rel, path in corpus.iter_files("heldout"):   # deterministic order: the standard library first
            text = corpus.read_source(path)
            if text and text.count("\n") >= 40:
                out.append((rel, text))
            if len(out) >= limit_files * 4:
                break
        return out
    out = []
    for f in files:
        try:
            text = Path(f).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if text.count("\n") >= 40:
            out.append((str(f), text))
    return out


def make_prompts(sources, n: int, seed: int, prefix_chars: int, suffix_chars: int, count=len,
                 budget: int = 10**9, template: str | None = None) -> list[dict]:
    """FIM prompts (``completer.context.build_prompt`` with ``template``, or plain PSM when None) cut at the start of a random non-blank line's code, one per file round-robin."""
    rng = random.Random(seed)
    prompts = []
    rng.shuffle(sources)
    for name, text in sources:
        if len(prompts) >= n:
            break
        lines = text.split("\n")
        cands = [i for i in range(10, len(lines) - 5) if lines[i].strip() and not lines[i].strip().startswith("#")]
        if not cands:
            continue
        i = rng.choice(cands)
        indent = len(lines[i]) - len(lines[i].lstrip())
        cut = sum(len(x) + 1 for x in lines[:i]) + indent + min(len(lines[i].strip()), rng.randint(0, 12))
        before, after = text[:cut], text[cut:]
        if template is not None:                         # the context API, as the language server builds it
            from completer.context import SourceFile, build_prompt

            prompt = build_prompt(SourceFile(Path(name).resolve().as_uri(), "python", text), cut, count_tokens=count,
                                  budget_tokens=budget, template=template).prompt
        else:
            pre, suf = prefix_chars, suffix_chars
            while True:                                  # fit the model's context (budget in tokens)
                prompt = fim_prompt(before[-pre:], after[:suf], "qwen")
                if count(prompt) <= budget or pre < 64:
                    break
                pre, suf = pre * 3 // 4, suf * 3 // 4
        prompts.append({"file": name, "offset": cut, "prompt": prompt})
    return prompts


@torch.inference_mode()
def forward_cost(engine: TorchEngine, context: int, reps: int = 30) -> dict:
    """Median seconds of one single-token forward of target and draft at ``context`` cached positions."""
    out = {}
    for name, model in (("target", engine.target), ("draft", engine.draft)):
        if model is None:
            continue
        cache = model.new_cache(capacity=context + 8)
        ids = torch.randint(0, engine.n_vocab, (1, context))
        model(ids, cache=cache)
        times = []
        for _ in range(5):                                # warm-up
            cache.truncate(context)
            model(ids[:, :1], cache=cache, last_only=True)
        for _ in range(reps):
            cache.truncate(context)
            t0 = time.perf_counter()
            model(ids[:, :1], cache=cache, last_only=True)
            times.append(time.perf_counter() - t0)
        out[name] = statistics.median(times)
        out[f"{name}_params"] = sum(p.numel() for p in model.parameters())
    return out


def machine() -> dict:
    import os
    return record.machine(torch_threads=torch.get_num_threads(), load_average_1m=os.getloadavg()[0])


def model_provenance(spec: str) -> str:
    from completer.models import resolve_model

    folder = resolve_model(spec)
    for report in (folder / "REPORT.md", folder.parent / "REPORT.md"):
        if report.is_file():
            for line in report.read_text().splitlines():
                if "trained-on" in line:
                    return line.strip().strip("-* ")
    return "provenance unknown"


async def run(args) -> dict:
    provenance = model_provenance(args.model)            # read before loading, next to the weights it describes
    cfgs = configs(args.ks)
    if args.configs:
        unknown = set(args.configs) - set(cfgs)
        if unknown:
            raise SystemExit(f"unknown --configs {sorted(unknown)}; known: {list(cfgs)}")
        cfgs = {n: kw for n, kw in cfgs.items() if n in args.configs or n == "none"}
    engines = {}
    for name, kw in cfgs.items():
        draft = args.draft if "draft" in kw["speculation"] else None
        engines[name] = TorchEngine(EngineConfig(model=args.model, draft=draft, device=args.device,
                                                 prefix_cache=False, max_speculative_tokens=args.max_k,
                                                 threads=args.threads, **kw))
    any_engine = next(e for e in engines.values() if e.draft is not None)
    sources = heldout_sources(args.prompts, args.files)
    budget = min(args.context_tokens,
                 any_engine.target.config.max_position_embeddings - args.max_tokens - args.max_k - 8)
    template = None
    if args.template != "plain":
        from completer.prompt import template_for_model
        template = template_for_model(any_engine.model_path) if args.template == "auto" else args.template
    prompts = make_prompts(sources, args.prompts, args.seed, args.prefix_chars, args.suffix_chars,
                           any_engine.count_tokens, budget, template)
    if not prompts:
        raise SystemExit("no held-out files with enough lines found")
    ctx = int(statistics.median(any_engine.count_tokens(p["prompt"]) for p in prompts))
    cost = forward_cost(any_engine, ctx)
    lat = {n: [] for n in cfgs}
    tps = {n: [] for n in cfgs}
    ttft = {n: [] for n in cfgs}
    dtps = {n: [] for n in cfgs}
    outputs = {n: {} for n in cfgs}
    # warm-up: one completion per configuration (first-call allocations)
    for name, eng in engines.items():
        async for _ in eng.generate(Request(f"warm-{name}", prompts[0]["prompt"], max_new_tokens=4)):
            pass
    for eng in engines.values():  # counters from the measured runs only
        eng._counters = type(eng._counters)()
    total = args.repeats * len(prompts) * len(cfgs)
    with tqdm(total=total, desc="speculation bench", unit="completion") as bar:
        for r in range(args.repeats):
            for i, p in enumerate(prompts):
                for name, eng in engines.items():
                    t0 = time.perf_counter()
                    ids, t_first, n_first = [], None, 0
                    async for chunk in eng.generate(Request(f"{name}-{r}-{i}", p["prompt"],
                                                            max_new_tokens=args.max_tokens)):
                        ids.extend(chunk.token_ids)
                        if t_first is None:
                            t_first, n_first = time.perf_counter(), len(ids)
                    t1 = time.perf_counter()
                    dt = t1 - t0
                    lat[name].append(dt)
                    tps[name].append(len(ids) / dt if dt > 0 else 0.0)
                    ttft[name].append(t_first - t0)
                    if len(ids) > n_first and t1 > t_first:
                        dtps[name].append((len(ids) - n_first) / (t1 - t_first))
                    outputs[name].setdefault(i, ids)
                    bar.update(1)
    identical = all(outputs[n] == outputs["none"] for n in cfgs)
    rows = []
    base_tps = statistics.median(dtps["none"]) if dtps["none"] else None
    for name, eng in engines.items():
        c = eng.counters()
        rows.append({
            "config": name, **cfgs[name],
            "decode_tokens_per_s_median": statistics.median(dtps[name]) if dtps[name] else None,
            "decode_tokens_per_s_p95_low": nearest_rank(dtps[name], 5) if dtps[name] else None,
            "tokens_per_s_median": statistics.median(tps[name]), "tokens_per_s_p95_low": nearest_rank(tps[name], 5),
            "latency_ms_median": 1000 * statistics.median(lat[name]), "latency_ms_p95": 1000 * nearest_rank(lat[name], 95),
            "ttft_ms_median": 1000 * statistics.median(ttft[name]), "ttft_ms_p95": 1000 * nearest_rank(ttft[name], 95),
            "speedup_vs_none": (statistics.median(dtps[name]) / base_tps) if base_tps and dtps[name] else None,
            "generated_tokens": c["generated_tokens"], "draft_tokens": c["draft_tokens"],
            "accepted_tokens": c["accepted_tokens"], "acceptance_rate": c["acceptance_rate"],
            "acceptance_per_position": c["acceptance_per_position"],
        })
    for eng in engines.values():
        await eng.close()
    return {"command": "python " + " ".join(shlex.quote(a) for a in sys.argv), "machine": machine(),
            "model": args.model, "draft": args.draft, "model_provenance": provenance,
            "template": template or "plain", "prompts": len(prompts), "repeats": args.repeats, "max_new_tokens": args.max_tokens,
            "median_prompt_tokens": ctx, "forward_cost_s": cost,
            "cost_ratio_draft_over_target": cost.get("draft", 0) / cost["target"] if cost.get("target") else None,
            "identical_greedy_outputs": identical, "rows": rows,
            "prompt_sources": sorted({Path(p["file"]).name for p in prompts})}


def markdown(res: dict) -> str:
    m, cost = res["machine"], res["forward_cost_s"]
    c = res["cost_ratio_draft_over_target"]
    lines = [
        f"# Speculative decoding on `{res['model']}` + `{res['draft']}` (embedded engine, CPU)", "",
        f"Command: `{res['command']}`  ",
        f"Machine: {m['cpu']}, {m['cores']} cores, torch {m['torch']} ({m['torch_threads']} threads), "
        f"Python {m['python']}; 1-minute load average {m.get('load_average_1m_before', float('nan')):.1f} before, "
        f"{m['load_average_1m']:.1f} after the run (other jobs share these cores: absolute figures are noisy, the "
        "interleaved side-by-side comparison is what counts)  ",
        f"Models: target `{res['model']}`, draft `{res['draft']}` ({res['model_provenance']})  ",
        f"{res['prompts']} FIM prompts ({res['template']} template, built by completer.context) from held-out files (median {res['median_prompt_tokens']} tokens) x "
        f"{res['repeats']} repeats, greedy, up to {res['max_new_tokens']} new tokens, no prefix-cache reuse.  ",
        f"Greedy outputs identical across all configurations: **{res['identical_greedy_outputs']}**", "",
        "| config | decode tok/s median | decode tok/s p5 | speedup (decode) | latency ms median | latency ms p95 | "
        "TTFT ms median | tok/s overall median | acceptance | acceptance per position |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in res["rows"]:
        acc = "-" if r["acceptance_rate"] is None else f"{r['acceptance_rate']:.2f}"
        per = " ".join("-" if a is None else f"{a:.2f}" for a in r["acceptance_per_position"]) or "-"
        f = (lambda v, spec: "-" if v is None else format(v, spec))
        lines.append(f"| {r['config']} | {f(r['decode_tokens_per_s_median'], '.1f')} | "
                     f"{f(r['decode_tokens_per_s_p95_low'], '.1f')} | {f(r['speedup_vs_none'], '.2f')}x | "
                     f"{r['latency_ms_median']:.0f} | {r['latency_ms_p95']:.0f} | {r['ttft_ms_median']:.0f} | "
                     f"{r['tokens_per_s_median']:.1f} | {acc} | {per} |")
    lines += [
        "", "## What this measures and why it comes out this way", "",
        f"One single-token forward at {res['median_prompt_tokens']} cached positions takes "
        f"{1000 * cost['target']:.2f} ms for the target ({cost['target_params'] / 1e6:.1f}M parameters) and "
        f"{1000 * cost.get('draft', float('nan')):.2f} ms for the draft ({cost.get('draft_params', 0) / 1e6:.1f}M): "
        f"cost ratio c = {c:.2f}, although the draft has "
        f"{cost.get('draft_params', 0) / cost['target_params']:.2f}x the parameters. "
        + ("On a CPU, models this small are bound by per-call overhead (Python, per-layer kernel calls, attention "
           "over the cache), not by weight bytes, so the draft is not proportionally cheaper."
           if c and c > 1.5 * cost.get("draft_params", 0) / cost["target_params"] else
           "Here the forward time scales roughly with the parameters."), "",
        "A speculative step with k draft tokens costs about k*c + (one target forward over k+1 tokens) and yields "
        "(1 - a^(k+1)) / (1 - a) tokens for per-token acceptance a (Leviathan et al. 2023). The draft pays only "
        "where c is small and a is high; larger k pays only while the acceptance at the later positions stays "
        "high (per-position column: the share of drafts that reached position i whose first i tokens were all "
        "accepted). N-gram drafting costs no forward at all (c = 0), so it pays whenever code repeats itself, and "
        "falls back to a plain decode step when nothing matches. Adaptive k follows the observed acceptance "
        "instead of a fixed guess.", "",
        "Latency is the whole completion (prefill + decode) of one cold request; TTFT is the time to its first "
        "chunk (prefill + first token; the same work for every configuration); decode tok/s counts the tokens after "
        "the first chunk over the time after it, which is the part speculation changes, and 'speedup' compares "
        "its median with no speculation. 'p5' for tokens/s is the slow tail (5th percentile).",
    ]
    return "\n".join(lines) + "\n"


def plot(res: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = res["rows"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(14, 5))
    names = [r["config"] for r in rows]
    med = [r["decode_tokens_per_s_median"] or 0 for r in rows]
    low = [(r["decode_tokens_per_s_median"] or 0) - (r["decode_tokens_per_s_p95_low"] or 0) for r in rows]
    a1.bar(names, med, yerr=[low, [0] * len(low)], capsize=3, color=["gray"] + ["C0"] * (len(rows) - 1))
    a1.axhline(med[0], color="gray", ls="--", lw=1)
    a1.set_ylabel("decode tokens/s after the first chunk (median, bar to p5)")
    a1.set_title("Decode throughput per configuration")
    a1.tick_params(axis="x", rotation=60)
    for r in rows:
        per = [a for a in r["acceptance_per_position"] if a is not None]
        if per and (len(rows) <= 6 or r["config"] in ("draft k=8", "draft adaptive", "ngram adaptive",
                                                       "draft+ngram adaptive")):
            a2.plot(range(1, len(per) + 1), per, marker="o", label=r["config"])
    a2.set_xlabel("draft position")
    a2.set_ylabel("share of drafts of length >= i with positions 1..i all accepted")
    a2.set_ylim(0, 1.05)
    a2.set_title("Acceptance per position")
    a2.legend()
    fig.suptitle(f"{res['model']} + {res['draft']} on {res['machine']['cpu']} ({res['machine']['cores']} cores)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=HOUSE_MODEL, help=f"target (default {HOUSE_MODEL}; house v1: house:target)")
    p.add_argument("--draft", default=HOUSE_DRAFT, help=f"draft (default {HOUSE_DRAFT}; house v1: house:draft)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--prompts", type=int, default=6)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1: small models, shared CPUs)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--ks", type=int, nargs="+", default=list(range(1, 9)))
    p.add_argument("--configs", nargs="+", help="run only these configurations (names as in the table, e.g. "
                   "'draft k=2' 'ngram k=4'; none is always run)")
    p.add_argument("--max-k", type=int, default=8, help="bound for adaptive k")
    p.add_argument("--template", default="auto", help="FIM template (auto: from the model) or 'plain' PSM")
    p.add_argument("--context-tokens", type=int, default=512, help="prompt budget in tokens")
    p.add_argument("--prefix-chars", type=int, default=3000, help="plain template only")
    p.add_argument("--suffix-chars", type=int, default=600)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--files", nargs="*", help="source files to cut prompts from (default: the held-out split)")
    p.add_argument("--out", default=None, help="output path without extension (default: a new folder "
                   "bench/results/speculation-<UTC time>/speculation, so committed results are never overwritten)")
    args = p.parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    import os
    load_before = os.getloadavg()[0]
    res = asyncio.run(run(args))
    res["machine"]["load_average_1m_before"] = load_before
    if args.out is None:
        from datetime import datetime, timezone
        args.out = str(RESULTS / f"speculation-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}" / "speculation")
    out = Path(args.out)
    paths = record.write(out.parent, out.name, res, markdown(res), lambda path: plot(res, path))
    print(markdown(res))
    print("wrote " + ", ".join(map(str, paths.values())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
