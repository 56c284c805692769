"""At the cross-file positions whose name the prompt's context block holds (imports + similar at the default share),
does the model write the name? The same positions and engine, the snippets left out ("none"), written as comment
lines (the shipped form, "comment") and as plain code lines under a comment header ("code").

    PYTHONPATH=. python bench/crossfile_name_in_context.py MODEL [LIMIT]     # e.g. house:v2/target 60
"""
import asyncio, json, sys, time, re
from completer.context import builder
from bench.quality import crossfile_positions, context_snippets
from completer.context import SourceFile
from completer.engine import EngineConfig, create_engine
from completer import pipeline

orig = builder._snippet_block
def code_block(snippets, budget, count, comment):
    b = orig(snippets, budget, count, comment)
    # keep the "from X:" headers as comments, the lines as code
    out = []
    for line in b.split("\n"):
        if line.startswith(comment + " from "):
            out.append(line)
        elif line.startswith(comment + " "):
            out.append(line[len(comment) + 1:])
        elif line == comment:
            out.append("")
        else:
            out.append(line)
    return "\n".join(out)

async def main():
    model = sys.argv[1] if len(sys.argv) > 1 else "house:v2/target"
    limit = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    pos, _, _ = crossfile_positions(None, 0, None)
    eng = create_engine(EngineConfig(device="cpu", speculation="none", model=model))
    ws = {}
    sel = []
    for p in pos:
        sn, uri = context_snippets(p, ["imports", "similar"], ws)
        plan = pipeline.plan(SourceFile(uri, p.language, p.document), p.offset, eng, pipeline.Settings(max_tokens=24), snippets=sn)
        if p.name in plan.context:
            sel.append((p, sn, uri))
    sel = sel[:limit]
    print(len(sel), "positions with the name in the context", flush=True)
    res = {}
    for variant in ("none", "comment", "code"):
        builder._snippet_block = code_block if variant == "code" else orig
        hit = ex = 0
        for i, (p, sn, uri) in enumerate(sel):
            s = pipeline.Settings(max_tokens=24)
            plan = pipeline.plan(SourceFile(uri, p.language, p.document), p.offset, eng, s, snippets=[] if variant == "none" else sn)
            g = pipeline.Generation(eng, plan, f"{variant}{i}", s)
            await g.run()
            first = g.ghost().split("\n")[0]
            rest = p.expected[:len(p.name) - (0 if p.kind == "at_name" else 2)]
            hit += first.startswith(rest); ex += first.rstrip() == p.expected.rstrip() and bool(first)
        res[variant] = (hit, ex, len(sel))
        print(variant, "name hits", hit, "exact", ex, "of", len(sel), flush=True)
    await eng.close()

asyncio.run(main())
