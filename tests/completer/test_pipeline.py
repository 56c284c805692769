"""completer.pipeline on a real (tiny) engine: the one path from a cursor to ghost text, the stream observable while
it runs, and closing it as the one abort the engine sees."""

from __future__ import annotations

import asyncio

import pytest

from completer import pipeline
from completer.context import SourceFile

DOC = "def area(width, height):\n    return width * "
SRC = SourceFile("file:///work/area.py", "python", DOC)
SETTINGS = pipeline.Settings(template="house", max_tokens=24, token_healing=False)


async def test_complete_matches_a_generation_run_by_hand(make_engine):
    engine = make_engine(speculation="none")
    text = await pipeline.complete(SRC, len(DOC), engine, SETTINGS, request_id="a")
    gen = pipeline.Generation(engine, pipeline.plan(SRC, len(DOC), engine, SETTINGS), "b", SETTINGS)
    assert await gen.run() == text == gen.ghost()          # greedy: the same text both ways
    assert gen.finished and not gen.aborted and gen.tokens > 0
    await engine.close()


async def test_the_stream_is_observable_and_closing_it_aborts_once(make_engine):
    engine = make_engine(speculation="none")
    plan = pipeline.plan(SRC, len(DOC), engine, pipeline.Settings(template="house", max_tokens=400,
                                                                 token_healing=False))
    plan = type(plan)(**{**plan.__dict__, "stop": (), "max_tokens": 400})   # long enough to be caught running
    gen = pipeline.Generation(engine, plan, "long", pipeline.Settings(template="house", max_tokens=400))
    task = asyncio.ensure_future(gen.run())
    seen = []
    while not seen or seen[-1] == "":
        await gen.changed()                                 # wakes on every chunk
        seen.append(gen.raw)
    assert not gen.done
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(500):                                    # the scheduler drops it before its next step
        if engine.counters()["requests_aborted"]:
            break
        await asyncio.sleep(0.01)
    c = engine.counters()
    assert gen.aborted and c["requests_aborted"] == 1 and c["requests_finished"] == 0
    await engine.close()


async def test_auto_template_is_the_engines_own(make_engine):
    engine = make_engine(speculation="none")
    assert pipeline.resolve_template("auto", engine) == engine.prompt_template
    with pytest.raises(ValueError, match="template"):
        pipeline.resolve_template("nonesuch", engine)
    await engine.close()
