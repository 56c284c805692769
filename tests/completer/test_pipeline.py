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


# --- follow-ups when the model wrote nothing (bench/results/replay-*/README: the empty answers of the CPU replay) ---
def _plan(prefix: str, suffix: str = "\n", mode: str = "line", heal: str = "", language: str = "javascript"):
    from completer.context import PromptPlan
    from completer.prompt import fim_prompt
    return PromptPlan(prompt=fim_prompt(prefix[: len(prefix) - len(heal)], suffix, "house"), prefix=prefix,
                      suffix=suffix, mode=mode, stop=("\n",) if mode == "line" else ("\n\n\n",), indent="",
                      language=language, max_tokens=16, heal=heal)


ON = {"next_line": True}


class _NoEngine:
    """What ``next_request`` may read of an engine: its tokenizer (none here, so nothing is healed)."""
    tokenizer = None


@pytest.mark.parametrize("prefix,suffix,mode,heal,settings,want", [
    ("    Z_OK: 0,", "\n}", "line", ",", ON, "next_line"),                     # end of a finished line
    ("    Z_OK", "\n}", "line", "OK", ON, "next_line"),                        # the model ended after a word too
    ("    Z_OK: 0,", "\n}", "line", ",", {}, None),                            # off by default
    ("    Z_OK: 0,", " // x\n}", "line", ",", ON, None),                       # text after the cursor: no next line
    ("    ", "\n}", "line", "", ON, None),                                     # a blank line: nothing to follow
    ("    Z_OK: 0,", "\n}", "block", ",", ON, None),                           # block mode has its own newlines
])
def test_follow_up_request_when_the_model_wrote_nothing(prefix, suffix, mode, heal, settings, want):
    s = pipeline.Settings(template="house", **settings)
    gen = pipeline.Generation(_NoEngine(), _plan(prefix, suffix, mode, heal), "r", s)
    got = gen.next_request()
    assert (got and got[0]) == want
    if want == "next_line":
        from completer.prompt import fim_prompt
        kind, plan, lead = got
        assert lead == "\n    " and plan.prefix == prefix + "\n    " and plan.heal == ""
        assert plan.prompt == fim_prompt(prefix + "\n    ", suffix, "house") and plan.mode == "line"
        gen.follow_up = kind
        assert gen.next_request() is None                                       # one follow-up at most
    gen2 = pipeline.Generation(_NoEngine(), _plan(prefix, suffix, mode, heal), "r", s)
    gen2._ended_by_model = False                                                # out of tokens: no follow-up
    assert gen2.next_request() is None


def test_next_line_ghost_starts_with_the_newline_and_must_look_like_code():
    gen = pipeline.Generation(_NoEngine(), _plan("    Z_OK: 0,"), "r",
                              pipeline.Settings(template="house", next_line=True))
    kind, plan, lead = gen.next_request()
    gen.plan, gen._lead = plan, lead
    assert gen.ghost("Z_BLOCK: 5,") == "\n    Z_BLOCK: 5,"
    assert gen.ghost("Z_OK: 0,") == ""                       # the line just written, again (drop_previous_line_copy)
    assert gen.ghost("{{{{{{{{{{{{") == ""                   # a run of punctuation is no next line
    assert gen.ghost("}") == "\n    }"                       # a short closer is
    assert gen.ghost("") == ""


def _trace_document(name: str, line_end: str) -> tuple[str, int]:
    """(document, cursor) of the replay trace ``name`` at the first keystroke after which the cursor's line ends in
    ``line_end``, as ``bench.replay`` sends it."""
    from pathlib import Path

    from lsp import trace as tr
    t = tr.load(Path(__file__).parents[2] / "bench" / "traces" / f"{name}.jsonl")
    text = t.header.text
    for ev in t.events:
        if ev.edit is not None:
            text, off = tr.apply_edit(text, ev.edit)
            if text[text.rfind("\n", 0, off) + 1:off].endswith(line_end):
                return text, off
    raise AssertionError(f"{line_end!r} never typed in {name}")


@pytest.mark.parametrize("trace,line_end,want", [
    ("javascript-constants", "Z_OK: 0,", "\n    Z_"),         # the next constant (greedy: Z_FINISH: 3,)
    ("javascript-constants", "Z_FINISH: 4,", ""),             # the next line it writes is Z_FINISH: 4, again: none
])
async def test_house_model_at_a_finished_line_end_shows_the_next_line(house_engine, trace, line_end, want):
    """Keystrokes of the javascript-constants trace where the house model (v1) ends the line at once: the follow-up
    asks for the next line, whose ghost text starts with the newline and the line's indentation; a copy of the line
    just written is no next line."""
    engine = house_engine(model="house:target", draft=None, speculation="none")
    doc, off = _trace_document(trace, line_end)
    src = SourceFile("file:///bench/constants.js", "javascript", doc)
    s = pipeline.Settings(max_tokens=32, next_line=True)
    alone = pipeline.Generation(engine, pipeline.plan(src, off, engine, s), "a",
                                pipeline.Settings(max_tokens=32, next_line=False))
    assert await alone.run() == "" and alone.finished and alone.follow_up is None   # the model ends the line
    gen = pipeline.Generation(engine, pipeline.plan(src, off, engine, s), "b", s)
    text = await gen.run()
    assert gen.follow_up == "next_line" and gen.finished and not gen.aborted
    assert text.startswith(want) and "\n" not in text[1:]
    if want:
        assert text[len(want):].strip()
    await engine.close()


class _Measured:
    """An engine's cold-prompt speed, the one thing prompt_budget reads of it."""

    def __init__(self, per_token):
        self.prompt_s_per_token = per_token


@pytest.mark.parametrize("budget, cold_ms, per_token, want", [
    (1024, 0, 0.0017, 1024),          # off
    (1024, 1000, None, 1024),         # nothing measured (vLLM, remote): the whole budget
    (1024, 1000, 0.0003, 1024),       # house v2 on 2 cores: 3,333 tokens fit
    (1024, 1000, 0.00174, 512),       # SmolLM2 on 2 cores: 574 fit, down to a step of 128
    (1024, 1000, 0.0015, 640),
    (1024, 1000, 0.05, 384),          # never below MIN_COLD_BUDGET
    (200, 1000, 0.05, 200),           # nor above the budget asked for
])
def test_prompt_budget_is_cut_to_what_the_engine_prefills_in_time(budget, cold_ms, per_token, want):
    settings = pipeline.Settings(budget_tokens=budget, cold_prompt_ms=cold_ms)
    assert pipeline.prompt_budget(settings, _Measured(per_token)) == want


async def test_a_plan_keeps_to_the_cut_budget(make_engine):
    """The prompt of a long document stays within what the engine's measured speed allows in cold_prompt_ms."""
    engine = make_engine(speculation="none")
    doc = "".join(f"def f{i}(x):\n    return x * {i} + {i * 7}\n\n" for i in range(300))
    src = SourceFile("file:///work/long.py", "python", doc)
    whole = pipeline.plan(src, len(doc), engine, pipeline.Settings(template="house", budget_tokens=1024))
    engine.prompt_s_per_token = 0.001                           # as a model ~3x slower than this one would measure
    cut = pipeline.plan(src, len(doc), engine, pipeline.Settings(template="house", budget_tokens=1024,
                                                                 cold_prompt_ms=300))
    n_whole, n_cut = engine.count_tokens(whole.prompt), engine.count_tokens(cut.prompt)
    assert n_cut <= 384 < n_whole <= 1024
    assert whole.prefix.endswith(cut.prefix) and len(cut.prefix) < len(whole.prefix)   # less of the file before
    await engine.close()
