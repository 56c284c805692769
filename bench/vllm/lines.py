"""Time to the first line and to the full block, per keystroke, at a real shape with random weights (issue 13 item 6).

A model with random weights never ends a line where code would, so a replay through the language server can only
time completions of a fixed length (``lsp_device.py``'s ``lsp-7b-*`` stages: keystroke to a 32-token answer). Here
the lengths come from the code instead: for every keystroke of the typing traces, the server's own pipeline
(``completer.pipeline.plan``: prompt, line or block mode, token healing) builds the request, and the text the user
really types next (the trace's final document after the cursor) gives how many tokens the first line and the block
take (the block at the cursor as ``completer.postprocess.blocks.cut_at_block_end`` cuts it, capped at the server's
maxTokens). The request then generates exactly that many tokens, no stop strings, and the stream's timestamps give
TTFT, the time until the first line's tokens have arrived, and the time until the block's have.

One request at a time, in typing order, on one warm engine (its prefix cache holds the previous keystroke's prompt,
as after a real keystroke); no debounce and no server in the path, so this is the engine's part of keystroke to
ghost text (the server's own cost per keystroke is in the house-scale replays: a few ms).

    python bench/vllm/lines.py --out $OUT/lines --model /tmp/completer-dummy-models/target-7b [--quantization fp8]
    python bench/vllm/lines.py --out /tmp/lines --engine-json '{"backend": "torch", "device": "cpu"}' \\
        --model house:v2/target --limit 20          # a CPU dry run of the same flow

Writes ``lines.json`` (every keystroke with the first line and block the user then typed, then the summary) after
each trace, and ``lines.png``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parent)]

from lsp import trace as tr  # noqa: E402
from completer.context import SourceFile  # noqa: E402
from completer.engine import Request  # noqa: E402
from completer.pipeline import Settings, plan  # noqa: E402
from completer.postprocess.blocks import cut_at_block_end  # noqa: E402
from completer.postprocess.context import Context  # noqa: E402
from completer.stats import nearest_rank  # noqa: E402

TRACES = Path(__file__).resolve().parents[1] / "traces"


def truth(final: str, before: str, after: str, ctx: Context) -> tuple[str, str] | None:
    """What the user really types next at a cursor with ``before``/``after`` it, as (first line, block): the final
    document's text between them, read on to the end of its line (the rest already after the cursor left out), and
    on to where ``cut_at_block_end`` ends the block at the cursor (in block mode whatever the plan's mode: after a
    line-mode answer the rest of the block is what the server's early answer leaves to the background). None when the final document does not
    keep ``before`` and ``after`` (the user deletes or rewrites what is around the cursor later)."""
    if not final.startswith(before) or not final.endswith(after) or len(before) + len(after) > len(final):
        return None
    ahead = final[len(before):]
    rest = after.split("\n", 1)[0]
    first, nl, more = ahead.partition("\n")
    if rest and first.endswith(rest):           # the rest of the line is already after the cursor: not typed again
        first = first[: len(first) - len(rest)]
    block = cut_at_block_end(first + nl + more[:8000], dataclasses.replace(ctx, mode="block")).rstrip()
    line = first
    return line, block


def keystroke_cases(traces: list[tuple[str, tr.Trace]], engine, settings: Settings = Settings(),
                    limit: int | None = None) -> tuple[list[dict], dict]:
    """One case per keystroke (``edit`` event) of ``traces`` whose next text is known: the plan's request and the
    token counts of its first line and block (each + 1 for the token that ends it: the newline or the end). Also the
    counts of keystrokes left out and why."""
    cases: list[dict] = []
    skipped = {"rewritten_later": 0, "nothing_left_to_type": 0}
    for name, t in traces:
        docs = {t.header.uri: t.header.text}
        langs = {t.header.uri: t.header.language_id}
        finals = {uri: tr.final_text(t, uri) for uri in docs}
        for ev in t.events:
            if ev.open is not None:
                docs[ev.uri], langs[ev.uri] = ev.open["text"], ev.open["languageId"]
                finals[ev.uri] = tr.final_text(t, ev.uri)
                continue
            if ev.edit is None:
                continue
            docs[ev.uri], off = tr.apply_edit(docs[ev.uri], ev.edit)
            text = docs[ev.uri]
            if ev.cursor is not None:
                off = tr.offset_of(text, ev.cursor)
            p = plan(SourceFile(ev.uri, langs[ev.uri], text), off, engine, settings)
            tt = truth(finals[ev.uri], text[:off], text[off:], Context.from_plan(p))
            if tt is None:
                skipped["rewritten_later"] += 1
                continue
            line, block = tt
            if not block.strip():
                skipped["nothing_left_to_type"] += 1
                continue
            cap = max(1, settings.max_tokens)
            n_line = min(cap, p.max_tokens, engine.count_tokens(line) + 1)
            n_block = max(n_line, min(cap, engine.count_tokens(block) + 1))
            cases.append({"trace": name, "uri": ev.uri, "offset": off, "mode": p.mode, "prompt": p.prompt,
                          "heal": p.heal, "line": line, "block": block, "line_chars": len(line),
                          "block_chars": len(block),
                          "n_line": n_line, "n_block": n_block, "capped": n_block == cap})
            if limit is not None and len(cases) >= limit:
                return cases, skipped
    return cases, skipped


async def time_case(engine, case: dict, request_id: str) -> dict:
    """Generate the case's block length (no stop strings): TTFT, time to the first line's tokens, to the block's."""
    req = Request(request_id, case["prompt"], max_new_tokens=case["n_block"], heal=case["heal"],
                  cache_key=case["uri"])
    t0 = time.perf_counter()
    n, first, line_at = 0, None, None
    async for chunk in engine.generate(req):
        if chunk.token_ids:
            n += len(chunk.token_ids)
            now = time.perf_counter()
            first = first if first is not None else now
            if line_at is None and n >= case["n_line"]:
                line_at = now
    end = time.perf_counter()
    ms = lambda t: None if t is None else round((t - t0) * 1000, 2)  # noqa: E731
    return {"ttft_ms": ms(first), "line_ms": ms(line_at), "block_ms": ms(end), "tokens": n}


def summarize(records: list[dict]) -> dict:
    def q(key, sel=lambda r: True):
        xs = [r[key] for r in records if sel(r) and r.get(key) is not None]
        return {"p50": nearest_rank(xs, 50), "p95": nearest_rank(xs, 95), "n": len(xs)}

    block = lambda r: r["mode"] == "block"  # noqa: E731
    return {"keystrokes": len(records), "block_mode": sum(map(block, records)),
            "ttft_ms": q("ttft_ms"), "first_line_ms": q("line_ms"), "full_block_ms": q("block_ms"),
            "full_block_ms_block_mode": q("block_ms", block),
            "tokens_first_line": q("n_line"), "tokens_block": q("n_block"),
            "block_capped": sum(1 for r in records if r["capped"])}


def plot(records: list[dict], path: Path, title: str) -> None:
    try:
        import matplotlib
    except ImportError:
        print(f"matplotlib is not installed: no {path.name} (the figures are in lines.json)", flush=True)
        return

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for key, label in (("ttft_ms", "first token"), ("line_ms", "first line"), ("block_ms", "full block")):
        xs = sorted(r[key] for r in records if r.get(key) is not None)
        if xs:
            ax.plot(xs, [(i + 1) / len(xs) for i in range(len(xs))], label=f"{label} (p50 {nearest_rank(xs, 50):.0f}"
                    f" ms)")
    ax.set_xlabel("ms after the request (engine only)")
    ax.set_ylabel("share of keystrokes")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def make_engine(args):
    """The engine ``lsp_device.py``'s ``lsp-7b-*`` stages serve (``load_format="dummy"`` for a folder made by
    ``dummy.write_model``), with ``--engine-json`` over it (a null removes a setting)."""
    from completer.engine import EngineConfig, create_engine

    over = json.loads(args.engine_json)
    cfg = {"backend": "vllm", "model": args.model, "speculation": "none"}
    if over.get("backend", "vllm") == "vllm":       # vLLM's own settings (the embedded backend refuses them)
        cfg.update(dtype="bfloat16", gpu_memory_utilization=args.gpu_memory_utilization)
        if Path(args.model, "config.json").is_file() and not Path(args.model, "model.safetensors").exists():
            cfg["load_format"] = "dummy"
    if args.quantization:
        cfg["quantization"] = args.quantization
    cfg = {k: v for k, v in {**cfg, **over}.items() if v is not None}
    config = EngineConfig(**cfg)
    if config.backend != "vllm":
        return create_engine(config)
    from common import engine_overrides
    from completer.engine.vllm.engine import VLLMEngine

    return VLLMEngine(config, **engine_overrides(max_model_len=4096))


async def amain(args) -> dict:
    args.out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    engine = make_engine(args)
    try:
        started_s = time.perf_counter() - t_start
        traces = tr.load_all([args.traces] if args.traces.is_file() else sorted(args.traces.glob("*.jsonl")))
        settings = Settings(max_tokens=args.max_tokens)
        cases, skipped = keystroke_cases(traces, engine, settings, args.limit)
        print(f"{len(cases)} keystrokes ({skipped} left out), engine ready in {started_s:.0f} s", flush=True)
        for i in range(args.warmup if cases else 0):        # the first requests compile kernels
            await time_case(engine, cases[i % len(cases)], f"warm-{i}")
        records: list[dict] = []
        res = {"argv": sys.argv, "engine_start_s": started_s, "skipped": skipped, "records": records}
        t0 = time.perf_counter()
        for i, case in enumerate(cases):
            r = time_case(engine, case, f"k{i}")
            rec = {k: v for k, v in case.items() if k not in ("prompt", "heal")}
            rec.update(await r)
            records.append(rec)
            if (i + 1) % 25 == 0 or i + 1 == len(cases):
                el = time.perf_counter() - t0
                print(f"  {i + 1}/{len(cases)} keystrokes, {el:.0f} s, ETA {el / (i + 1) * (len(cases) - i - 1):.0f}"
                      f" s", flush=True)
                res["summary"] = summarize(records)
                (args.out / "lines.json").write_text(json.dumps(res, indent=1))
        s = res["summary"] = summarize(records)
        (args.out / "lines.json").write_text(json.dumps(res, indent=1))
        plot(records, args.out / "lines.png", f"{args.model} {args.quantization or ''}: engine time per keystroke")
        print(json.dumps({k: v for k, v in s.items()}), flush=True)
        return res
    finally:
        await engine.close()


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--quantization", default=None, help="vLLM quantization of the target, e.g. fp8")
    ap.add_argument("--traces", type=Path, default=TRACES, help="a trace file or a folder of them")
    ap.add_argument("--max-tokens", type=int, default=Settings.max_tokens,
                    help="the server's maxTokens: the block is capped there")
    ap.add_argument("--limit", type=int, default=None, help="at most this many keystrokes")
    ap.add_argument("--warmup", type=int, default=6)
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.4)
    ap.add_argument("--engine-json", default="{}", help="engine settings over the defaults, null removes one")
    return ap


if __name__ == "__main__":
    asyncio.run(amain(build_parser().parse_args()))
