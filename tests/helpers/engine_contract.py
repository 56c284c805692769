"""The contract every engine backend passes (embedded torch engine, vLLM engine): reusable async checks.

Each backend's test folder imports it and runs the checks on its own ``make_engine`` fixture (tests/completer/engine
for the torch engine, tests/vllm for vLLM)::

    from tests.helpers import engine_contract as contract

    async def test_lossless(make_engine):            # make_engine(**EngineConfig overrides) -> Engine
        await contract.check_greedy_speculation_lossless(make_engine, speculation="draft", k=4)

``make_engine`` is a factory taking ``EngineConfig`` field overrides (``speculation=``, ``num_speculative_tokens=``,
``prefix_cache=`` ...) and returning a started engine of the backend under test, configured with the model pair
under test. Every check closes the engines it makes. Checks raise AssertionError with a message that says what
differed.
"""

from __future__ import annotations

import asyncio
from typing import Callable

from completer.engine.base import Engine, Request

PROMPTS = [
    "def add(a, b):\n    return",
    "import os\nimport sys\n\ndef main():\n    ",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n        ",
    "for i in range(10):\n    print(",
    "def fib(n):\n    if n < 2:\n        return n\n    return",
    "x = [1, 2, 3]\ny = [v * 2 for v in",
    "with open(path) as f:\n    data =",
    "try:\n    value = int(text)\nexcept ValueError:\n    ",
    "def is_even(n):\n    return n % 2 ==",
    "result = {}\nfor key, value in items:\n    result[key] =",
    "import json\n\ndef load(path):\n    with open(path) as f:\n        return json.",
    "def greet(name):\n    print(f\"Hello, {",
    "if __name__ == \"__main__\":\n    ",
    "def area(r):\n    import math\n    return math.pi *",
    "numbers = sorted(data, key=lambda",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y =",
    "def read_lines(path):\n    lines = []\n    for line in open(path):\n        lines.append(",
    "while queue:\n    node = queue.pop(0)\n    for child in node.children:\n        ",
    "def clamp(x, lo, hi):\n    return max(lo, min(",
    "parser.add_argument(\"--verbose\", action=",
    "def mean(xs):\n    return sum(xs) /",
    "self.assertEqual(result,",
    "def tokenize(text):\n    return text.split(",
    "counts = {}\nfor word in words:\n    counts[word] = counts.get(word,",
]

Factory = Callable[..., Engine]


async def collect(engine: Engine, request: Request) -> tuple[str, list[int], str | None]:
    """(text, token ids, finish_reason) of one request."""
    text, ids, reason = "", [], None
    async for chunk in engine.generate(request):
        assert chunk.request_id == request.request_id
        text += chunk.text
        ids.extend(chunk.token_ids)
        if chunk.finished:
            reason = chunk.finish_reason
    return text, ids, reason


async def greedy_outputs(engine: Engine, prompts, max_new_tokens: int) -> list[tuple[str, list[int]]]:
    out = []
    for i, p in enumerate(prompts):
        text, ids, reason = await collect(engine, Request(f"g{i}", p, max_new_tokens=max_new_tokens))
        assert reason in ("stop", "length"), f"prompt {i}: finish_reason {reason!r}"
        out.append((text, ids))
    return out


async def check_greedy_speculation_lossless(make_engine: Factory, speculation: str = "draft",
                                            k: int | str = 4, prompts=PROMPTS, max_new_tokens: int = 24) -> dict:
    """Greedy output with speculation is token-identical to the target alone, on every prompt (>= 20)."""
    assert len(prompts) >= 20
    plain = make_engine(speculation="none")
    try:
        want = await greedy_outputs(plain, prompts, max_new_tokens)
    finally:
        await plain.close()
    spec = make_engine(speculation=speculation, num_speculative_tokens=k)
    try:
        got = await greedy_outputs(spec, prompts, max_new_tokens)
        counters = spec.counters()
    finally:
        await spec.close()
    for i, (w, g) in enumerate(zip(want, got)):
        assert g == w, f"prompt {i} ({prompts[i]!r}): speculation={speculation} k={k} gave {g!r}, target alone {w!r}"
    assert counters["draft_tokens"] > 0, f"speculation={speculation} proposed no draft tokens at all"
    assert sum(len(ids) for _, ids in want) > 0
    return counters


async def check_abort_within_one_step(make_engine: Factory, prompt: str = PROMPTS[2], max_step_tokens: int = 33,
                                      **config) -> None:
    """abort() stops a running request within one step: at most one more chunk, then finish_reason 'abort';
    the aborted counter rises, its tokens count as wasted, and no more tokens are generated for it."""
    engine = make_engine(**config)
    try:
        before = engine.counters()
        req = Request("long", prompt, max_new_tokens=10_000 if engine.name not in ("vllm", "remote") else 2000)
        gen = engine.generate(req).__aiter__()
        first = await gen.__anext__()
        while not first.text and not first.finished:
            first = await gen.__anext__()
        assert not first.finished, "request finished before it could be aborted; use a longer prompt/limit"
        await engine.abort("long")
        at_abort = engine.counters()["generated_tokens"]
        rest = [c async for c in gen]
        assert len(rest) == 1 and rest[0].finished and rest[0].finish_reason == "abort", f"after abort: {rest!r}"
        after = engine.counters()
        assert after["generated_tokens"] - at_abort <= max_step_tokens, (
            f"{after['generated_tokens'] - at_abort} tokens generated after abort (more than one step)")
        assert after["requests_aborted"] == before["requests_aborted"] + 1
        assert after["wasted_tokens"] > before["wasted_tokens"]
        await asyncio.sleep(0.3)
        assert engine.counters()["generated_tokens"] == after["generated_tokens"], "still generating after abort"

        # closing the consumer (as a cancelled LSP request does) aborts too
        gen2 = engine.generate(Request("closed", prompt, max_new_tokens=10_000 if engine.name not in ("vllm", "remote") else 2000))
        async for chunk in gen2:
            if chunk.text:
                break
        await gen2.aclose()
        for _ in range(100):
            if engine.counters()["requests_aborted"] == before["requests_aborted"] + 2:
                break
            await asyncio.sleep(0.05)
        assert engine.counters()["requests_aborted"] == before["requests_aborted"] + 2, "closing did not abort"
        await engine.abort("no-such-request")                    # unknown ids are ignored
    finally:
        await engine.close()


async def check_concurrent_requests(make_engine: Factory, n: int = 8, max_new_tokens: int = 16,
                                    prompts=PROMPTS, **config) -> None:
    """Many concurrent requests all complete, each with the output it gets when run alone (greedy)."""
    engine = make_engine(**config)
    try:
        alone = await greedy_outputs(engine, prompts[:n], max_new_tokens)
        order: list[str] = []

        async def one(i: int):
            text, ids, reason = "", [], None
            async for chunk in engine.generate(Request(f"c{i}", prompts[i], max_new_tokens=max_new_tokens)):
                order.append(chunk.request_id)
                text += chunk.text
                ids.extend(chunk.token_ids)
                reason = chunk.finish_reason if chunk.finished else reason
            return text, ids, reason

        results = await asyncio.gather(*(one(i) for i in range(n)))
        for i, (text, ids, reason) in enumerate(results):
            assert reason in ("stop", "length"), f"request {i} ended with {reason!r}"
            assert (text, ids) == alone[i], f"request {i}: concurrent output {text!r} != alone {alone[i][0]!r}"
        firsts = {rid: order.index(rid) for rid in set(order)}
        last_done = max(len(order) - 1 - order[::-1].index(rid) for rid in firsts)
        assert max(firsts.values()) < last_done, "requests ran one after another, not interleaved"
        c = engine.counters()
        assert c["requests_finished"] >= 2 * n and c["requests_aborted"] == 0
    finally:
        await engine.close()


HEAL_PROMPTS = ["def add(a, b):\n    ret", "import os\nimport sys\n\ndef main():\n    pri",
                "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n"
                "        self.items.app", "for i in range(10):\n    print(i", "x = [1, 2, 3]\ny = sor"]


async def check_token_healing(make_engine: Factory, prompts=HEAL_PROMPTS, max_new_tokens: int = 12,
                              speculations=("none", "draft"), **config) -> None:
    """A request with ``heal`` (the prompt backed up by its last token, as ``completer.healing`` does it): the
    first tokens re-type the removed characters (each healing token is allowed by ``healing.allowed_tokens``),
    the streamed text is what the tokens say after those characters, and speculation does not change it
    (``speculations``: the settings compared; the remote backend's is the server's, one)."""
    from completer import healing
    outs = {}
    for speculation in speculations:
        engine = make_engine(speculation=speculation, **config)
        try:
            tok = engine.tokenizer
            for i, p in enumerate(prompts):
                heal = healing.heal_point(p, tok)
                assert heal and p.endswith(heal), f"prompt {i}: nothing to heal at {p[-12:]!r}"
                req = Request(f"h{i}", p[: len(p) - len(heal)], max_new_tokens=max_new_tokens, heal=heal)
                text, ids, reason = await collect(engine, req)
                assert reason in ("stop", "length"), f"prompt {i}: finish_reason {reason!r}"
                left = heal
                for t in ids:
                    if not left:
                        break
                    assert t in healing.allowed_tokens(tok, left), \
                        f"prompt {i}: token {tok.decode([t])!r} while re-typing {left!r}"
                    left = healing.advance(left, tok.decode([t], skip_special_tokens=False))
                full = tok.decode(ids, skip_special_tokens=True)
                assert full.startswith(heal) and text == full[len(heal):], \
                    f"prompt {i}: tokens say {full!r}, streamed {text!r} after healing {heal!r}"
                outs.setdefault(i, []).append(ids)
        finally:
            await engine.close()
    for i, (plain, *spec) in outs.items():
        assert all(s == plain for s in spec), f"prompt {i}: healed output differs with speculation: {plain} vs {spec}"
