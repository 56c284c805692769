"""Why a keystroke of a replay got no ghost text before the next key: one line per such keystroke, and counts.

    python -m bench.why RAW.json [--config NAME] [--round N] [--traces bench/traces] [--max-tokens 32] [--show N]

``RAW.json`` is the raw record file ``bench.replay`` writes (``<out>/tmp/<name>.raw.json``). The documents are
rebuilt from the traces exactly as the replayer built them (its accepted ghost text included). For an answer that
was empty the completion is made again in this process with the same pipeline and engine (greedy decoding gives the
same text), and the reason is the first thing that left nothing: the model wrote nothing (and what it would have
written on the next line: the same request with no line-end stop), or the post-processing filter that emptied it.
A late answer (stale) is classed by the time to the next key against the answer's time.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
from pathlib import Path

from lsp import trace as tr
from bench.replay import skip_typed_by_accept

HERE = Path(__file__).resolve().parent


def documents(trace: tr.Trace, records: list[dict]) -> list[tuple[str, int]]:
    """(document text, cursor offset) the server had for each of ``records`` (one trace's, in order), rebuilt as
    ``bench.replay.Replayer.run`` builds them."""
    h = trace.header
    docs = {h.uri: h.text}
    trace_docs = dict(docs)
    syncing: set[str] = set()
    out: list[tuple[str, int]] = []
    i = 0
    prev: dict | None = None
    for ev in trace.events:
        if skip_typed_by_accept(ev, docs, trace_docs, syncing):
            continue
        if ev.open is not None:
            docs[ev.uri] = trace_docs[ev.uri] = ev.open["text"]
        elif ev.edit is not None:
            trace_docs[ev.uri] = tr.apply_edit(trace_docs[ev.uri], ev.edit)[0]
            docs[ev.uri], off = tr.apply_edit(docs[ev.uri], ev.edit)
            rec = records[i]
            assert rec["kind"] == "key" and rec["offset"] == off, (rec, off)
            out.append((docs[ev.uri], tr.offset_of(docs[ev.uri], ev.cursor) if ev.cursor else off))
            prev, i = rec, i + 1
        elif ev.accept is not None:
            if i < len(records) and records[i]["kind"] == "accept":
                g = prev["ghost"]
                docs[ev.uri], off = tr.apply_edit(docs[ev.uri], tr.insert_edit(docs[ev.uri], prev["offset"], g))
                out.append((docs[ev.uri], off))
                prev, i = records[i], i + 1
                syncing.add(ev.uri)
    assert i == len(records), (i, len(records))
    return out


def stale_reason(rec: dict) -> str:
    """A keystroke whose answer came after the next key: cancelled by the next key while it waited (debounce or
    engine), or answered late (with or without text), or never answered."""
    gap = rec.get("gap_ms")
    if rec.get("answer_ms") is None:
        return "stale: never answered"
    fast = " (next key within 40 ms)" if gap is not None and gap < 40 else ""
    if rec.get("error") == -32800:
        return "stale: cancelled by the next key while waiting" + fast
    if rec.get("error") is not None:
        return f"stale: error {rec['error']}"
    return ("stale: late ghost text" if rec.get("late_ghost") else "stale: late empty answer") + fast


async def classify(raw: dict, cfg: dict, traces: dict[str, tr.Trace], max_tokens: int, show: int) -> list[dict]:
    from completer import pipeline
    from completer.context import SourceFile
    from completer.engine import EngineConfig, create_engine
    from completer.postprocess import trace as pp_trace

    eng_cfg = dict(cfg.get("engine_config") or {})
    engine = create_engine(EngineConfig(model=eng_cfg.get("model", "house:target"),
                                        draft=None, speculation="none"))
    import dataclasses
    fields = {f.name for f in dataclasses.fields(pipeline.Settings)}
    # the first request alone (what the reason is about); the follow-ups, where this pipeline has them, separately
    settings = pipeline.Settings(max_tokens=max_tokens, **{k: False for k in ("next_line",) if k in fields})
    full = pipeline.Settings(max_tokens=max_tokens)
    rows = []
    try:
        for t in cfg["traces"]:
            recs = t["records"]
            if not recs:
                continue
            trace = traces[recs[0]["trace"]]
            lang = trace.header.language_id
            for rec, (text, off) in zip(recs, documents(trace, recs)):
                row = {"trace": rec["trace"], "status": rec["status"], "answer_ms": rec.get("answer_ms"),
                       "gap_ms": rec.get("gap_ms"), "line": text[text.rfind("\n", 0, off) + 1:off],
                       "rest": text[off:text.find("\n", off) if "\n" in text[off:] else len(text)],
                       "ghost": rec.get("ghost"), "right": rec.get("right"), "late": rec.get("late_ghost")}
                if rec["status"] == "shown":
                    row["why"] = "shown"
                elif rec["status"] in ("stale", "cancelled", "unanswered"):
                    row["why"] = stale_reason(rec)
                if rec["status"] == "empty" or (rec["status"] != "shown" and show):
                    p = pipeline.plan(SourceFile(trace.header.uri, lang, text), off, engine, settings)
                    gen = pipeline.Generation(engine, p, f"why-{len(rows)}", settings)
                    await gen.run()
                    steps = pp_trace(gen.raw, p)
                    row.update(mode=p.mode, heal=p.heal, raw=gen.raw, final=steps[-1][1])
                    if rec["status"] == "empty":
                        if not gen.raw.strip():
                            row["why"] = f"empty: model wrote nothing ({p.mode} mode" + (
                                ", healed)" if p.heal else ")")
                        else:
                            killer = next((n for n, s in steps[1:] if not s.strip()), "?")
                            row["why"] = f"empty: filter {killer} ({p.mode} mode)"
                    if not gen.raw.strip() and p.mode == "line":
                        # what the model would write with no line-end stop (the next line)
                        p2 = dataclasses.replace(p, stop=tuple(s for s in p.stop if s != "\n"))
                        g2 = pipeline.Generation(engine, p2, f"why-next-{len(rows)}", settings)
                        await g2.run()
                        row["next_raw"] = g2.raw
                    if not row["final"].strip() and full != settings:   # what this pipeline's follow-ups give
                        g3 = pipeline.Generation(engine, p, f"why-full-{len(rows)}", full)
                        row["pipeline_ghost"] = await g3.run()
                        row["follow_up"] = getattr(g3, "follow_up", None)
                rows.append(row)
    finally:
        await engine.close()
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("raw", type=Path)
    ap.add_argument("--config", help="configuration name (default: the first)")
    ap.add_argument("--round", type=int, default=1)
    ap.add_argument("--traces", default=str(HERE / "traces"))
    ap.add_argument("--max-tokens", type=int, default=None, help="default: the configuration's maxTokens")
    ap.add_argument("--show", type=int, default=0, help="also re-run the stale keystrokes' completions")
    ap.add_argument("--json", type=Path, help="write the rows here")
    args = ap.parse_args(argv)
    raw = json.loads(args.raw.read_text())
    cfgs = [c for c in raw["configs"] if (args.config is None or c["name"] == args.config)
            and c.get("round", 1) == args.round]
    cfg = cfgs[0]
    traces = dict(tr.load_all([args.traces]))
    mt = args.max_tokens or cfg["options"].get("maxTokens", 64)
    rows = asyncio.run(classify(raw, cfg, traces, mt, args.show))
    counts = collections.Counter(r["why"] for r in rows)
    n = len(rows)
    print(f"{cfg['name']} round {args.round}: {n} keystrokes")
    for why, k in counts.most_common():
        print(f"  {k:4d} {k / n:6.1%}  {why}")
    for r in rows:
        if r["why"] != "shown":
            print(json.dumps({k: (round(v) if isinstance(v, float) and v != float("inf") else v)
                              for k, v in r.items()}, ensure_ascii=False))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main()
