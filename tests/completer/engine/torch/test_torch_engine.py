"""The embedded engine's own behaviour: prefix-cache reuse, stop strings, streaming UTF-8, sampling, errors."""

import asyncio

import pytest
import torch

from completer.engine import EngineConfig, EngineError, Request, create_engine
from completer.engine.torch.engine import TorchEngine
from completer.engine.torch.input import Running
from completer.models.llama import LlamaForCausalLM
from completer.speculative import DraftProposer, Sampling, speculative_step

from tests.helpers import engine_contract as contract
from tests.helpers.tiny_models import random_lm
collect = contract.collect

DOC = "import os\n\nclass Cache:\n    def __init__(self, size):\n        self.size = size\n"


async def test_prefix_cache_reuse_counts_and_keeps_outputs(make_engine):
    on, off = make_engine(prefix_cache=True), make_engine(prefix_cache=False)
    prompts = [DOC, DOC + "    def get", DOC + "    def get(self, key):\n        ", DOC + "    def get(self, key):\n        "]
    outs = {}
    for name, eng in (("on", on), ("off", off)):
        res = []
        for i, p in enumerate(prompts):
            before = eng.counters()["cached_prompt_tokens"]
            text, ids, _ = await collect(eng, Request(f"{name}{i}", p, max_new_tokens=12, cache_key="file:///a.py"))
            res.append((ids, eng.counters()["cached_prompt_tokens"] - before))
        outs[name] = res
    n_doc = on.count_tokens(DOC)
    n_last = on.count_tokens(prompts[-1])
    reused = [r for _, r in outs["on"]]
    assert reused[0] == 0
    assert reused[1] >= n_doc - 2 and reused[2] >= n_doc - 2       # all but the retokenized boundary
    assert reused[3] == n_last - 1                                 # same prompt: recompute only the last token
    assert all(r == 0 for _, r in outs["off"])
    assert [ids for ids, _ in outs["on"]] == [ids for ids, _ in outs["off"]]
    # another document does not reuse this one's cache
    before = on.counters()["cached_prompt_tokens"]
    await collect(on, Request("other", DOC, max_new_tokens=4, cache_key="file:///b.py"))
    assert on.counters()["cached_prompt_tokens"] == before
    await on.close(), await off.close()


async def test_stop_strings_cut_and_never_stream_partially(make_engine):
    eng = make_engine(speculation="draft", num_speculative_tokens=4)
    text, _, _ = await collect(eng, Request("a", contract.PROMPTS[4], max_new_tokens=40))
    assert len(text) > 12, text
    stop = text[6:9]
    cut = text.find(stop)
    chunks = []
    async for c in eng.generate(Request("b", contract.PROMPTS[4], max_new_tokens=40, stop=("\x00never", stop))):
        chunks.append(c)
    streamed = "".join(c.text for c in chunks)
    assert streamed == text[:cut]
    assert chunks[-1].finish_reason == "stop"
    acc = ""
    for c in chunks:                    # no prefix of the stream ends with a partial stop string beyond the cut
        acc += c.text
        assert stop not in acc
    await eng.close()


async def test_a_stop_string_ends_the_burst_no_tokens_past_it(make_engine):
    """Steps run in bursts of up to BURST_S in the model thread; the stop string must end the burst at the step
    that wrote it (before, the request's last chunk waited out the burst, generating tokens nobody sees, a number
    that varied with timing)."""
    import completer.engine.torch.scheduling as te

    eng = make_engine(speculation="none")
    text, ids, _ = await collect(eng, Request("a", contract.PROMPTS[4], max_new_tokens=40))
    assert len(ids) >= 12, text
    # the stop: the text of tokens 8-9, so that the 10th token completes it
    before_stop = eng.tokenizer.decode(ids[:8])
    stop = eng.tokenizer.decode(ids[:10])[len(before_stop):]
    assert stop and stop not in before_stop
    old = te.BURST_S
    te.BURST_S = 10.0                   # one burst for the whole request unless something ends it
    try:
        gen0 = eng.counters()["generated_tokens"]
        streamed, _, reason = await collect(eng, Request("b", contract.PROMPTS[4], max_new_tokens=40, stop=(stop,)))
    finally:
        te.BURST_S = old
    assert reason == "stop" and streamed == text[:text.find(stop)]
    assert eng.counters()["generated_tokens"] - gen0 == 10          # not one token past the one that wrote it
    await eng.close()


async def test_eos_and_length_finish_reasons(make_engine):
    eng = make_engine(speculation="none")
    _, ids, reason = await collect(eng, Request("len", contract.PROMPTS[0], max_new_tokens=5))
    assert reason == "length" and len(ids) <= 5
    _, ids, reason = await collect(eng, Request("zero", contract.PROMPTS[0], max_new_tokens=0))
    assert reason == "length" and ids == []
    eos = eng.tokenizer.token_to_id("<|endoftext|>")
    assert eos in eng.stop_ids
    await eng.close()


def test_streaming_never_emits_broken_utf8(make_engine):
    """Feed the tokens of multi-byte text one byte-level token at a time through the engine's commit path."""
    eng = make_engine(speculation="none")
    text = "x = 'é😀ß' # ünïcødé ✓"
    ids = eng.tokenizer.encode(text, add_special_tokens=False).ids
    # force byte-split tokens: re-encode each UTF-8 byte on its own where the tokenizer has single-byte tokens
    byte_ids = []
    for ch in text:
        for b in ch.encode("utf-8"):
            sym = bytes_to_unicode()[b]
            t = eng.tokenizer.token_to_id(sym)
            byte_ids.append(t if t is not None else ids[0])
    run = Running(Request("u", "x", max_new_tokens=1000), asyncio.Queue())
    run.prompt = eng.tokenizer.encode("# file\n", add_special_tokens=False).ids
    run.tokens = list(run.prompt)
    for t in byte_ids:
        eng._commit(run, [t])
    out = ""
    while not run.queue.empty():
        c = run.queue.get_nowait()
        assert "\ufffd" not in c.text, c
        out += c.text
    assert out == text[: len(out)] and len(out) >= len(text) - 1
    eng._commit(run, [eng.tokenizer.token_to_id("<|endoftext|>")])
    last = run.queue.get_nowait()
    assert last.finished and last.finish_reason == "stop"
    assert out + last.text == text


def bytes_to_unicode():
    """GPT-2's byte -> printable character table (what ByteLevel uses)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


async def test_seeded_sampling_is_reproducible(make_engine):
    eng = make_engine(speculation="draft", num_speculative_tokens=3)
    req = dict(prompt=contract.PROMPTS[1], max_new_tokens=16, temperature=1.0, top_p=0.95)
    a = await collect(eng, Request("a", seed=7, **req))
    b = await collect(eng, Request("b", seed=7, **req))
    outs = {tuple((await collect(eng, Request(f"s{s}", seed=s, **req)))[1]) for s in range(4)}
    assert a == b
    assert len(outs) > 1
    await eng.close()


async def test_bad_requests_get_clear_errors_and_engine_keeps_serving(make_engine):
    eng = make_engine(speculation="none")
    with pytest.raises(EngineError, match="out of range"):
        await collect(eng, Request("bad", [10**6], max_new_tokens=2))
    with pytest.raises(EngineError, match="exceeds the model's context"):
        await collect(eng, Request("long", "x " * 2000, max_new_tokens=2))
    with pytest.raises(EngineError, match="empty prompt"):
        await collect(eng, Request("empty", [], max_new_tokens=2))
    _, ids, reason = await collect(eng, Request("ok", contract.PROMPTS[0], max_new_tokens=3))
    assert reason in ("length", "stop")
    await eng.close()


def test_draft_with_other_vocabulary_is_rejected(tiny_pair, other_vocab_draft):
    with pytest.raises(EngineError, match="different vocabulary"):
        TorchEngine(EngineConfig(model=str(tiny_pair[0]), draft=str(other_vocab_draft), speculation="draft",
                                 device="cpu"))


def test_missing_model_is_a_clear_error(tmp_path):
    with pytest.raises(EngineError, match="not a model folder|not found"):
        TorchEngine(EngineConfig(model=str(tmp_path), speculation="none", device="cpu"))
    with pytest.raises(EngineError, match="no shipped model"):
        TorchEngine(EngineConfig(model="house:nope", speculation="none", device="cpu"))


def test_create_engine_dispatches_to_torch(tiny_pair):
    eng = create_engine(EngineConfig(model=str(tiny_pair[0]), draft=str(tiny_pair[1]), device="cpu"))
    assert isinstance(eng, TorchEngine) and eng.device.type == "cpu" and eng.dtype == torch.float32
    eng._pool.shutdown()


def tiny_lm(vocab: int, layers: int, seed: int, sharp: float) -> LlamaForCausalLM:
    return random_lm(seed, sharp, vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                     max_position_embeddings=64).eval()


def test_speculative_sampling_end_to_end_matches_target_distribution():
    """(Expected sampling TV over 25 cells at N=1500 is about 0.04.) Tiny models over 5 tokens at temperature 1: the first two tokens produced by speculative steps (draft
    k=3, an unrelated draft model) follow the target's exact joint distribution (computed by enumeration)."""
    V, N = 5, 1500
    target, draft = tiny_lm(V, 2, seed=3, sharp=3.0), tiny_lm(V, 1, seed=11, sharp=3.0)
    prompt = [1, 4, 2, 0, 3]
    with torch.inference_mode():
        p1 = torch.softmax(target(torch.tensor([prompt]))[0, -1], -1)
        exact = torch.stack([p1[a] * torch.softmax(target(torch.tensor([prompt + [a]]))[0, -1], -1)
                             for a in range(V)])                                      # [V, V] joint
        q1 = torch.softmax(draft(torch.tensor([prompt]))[0, -1], -1)
        draft_joint = torch.stack([q1[a] * torch.softmax(draft(torch.tensor([prompt + [a]]))[0, -1], -1)
                                   for a in range(V)])
    g = torch.Generator().manual_seed(99)
    s = Sampling(temperature=1.0, generator=g)
    proposer = DraftProposer(draft, V)
    tc, dc = target.new_cache(), draft.new_cache()
    with torch.inference_mode():
        target(torch.tensor([prompt[:-1]]), cache=tc)          # the target cache holds all but the last token
    counts = torch.zeros(V, V)
    for _ in range(N):
        out: list[int] = []
        while len(out) < 2:                                    # the step rolls the caches back by itself
            r = speculative_step(target, tc, prompt + out, lambda t, k, ss: proposer.propose(dc, t, k, ss), 3, s, V)
            out += r.tokens
        counts[out[0], out[1]] += 1
    emp = counts / N
    tv = 0.5 * float((emp - exact).abs().sum())
    tv_draft = 0.5 * float((draft_joint - exact).abs().sum())
    assert tv < 0.08, f"TV {tv:.3f} between speculative samples and the target's joint distribution"
    assert tv_draft > 0.15, f"draft too close to target ({tv_draft:.3f}) for the test to mean anything"


async def test_engine_sampling_with_speculation_matches_target_marginal(make_engine):
    """Through the whole engine (tiny pair, temperature 0.25 so that few tokens matter): the marginal distribution of the second generated
    token, with draft speculation and without, against the target's exact marginal (enumerated over the first)."""
    N, T = 300, 0.25
    prompt = contract.PROMPTS[3]
    plain, spec = make_engine(speculation="none"), make_engine(speculation="draft", num_speculative_tokens=3)
    ids = plain.encode(prompt)
    V = plain.n_vocab
    with torch.inference_mode():
        logits = plain.target(torch.tensor([ids]))[0, -1, :V]
        p1 = torch.softmax(logits.float() / T, -1)
        top = torch.nonzero(p1 > 1e-4).flatten().tolist()              # the first tokens that matter
        exact = torch.zeros(V)
        for a in top:
            exact += p1[a] * torch.softmax(plain.target(torch.tensor([ids + [a]]))[0, -1, :V].float() / T, -1)
    exact = exact.clone() / exact.sum()
    result = {}
    for name, eng in (("plain", plain), ("spec", spec)):
        counts = torch.zeros(V)
        for s in range(N):
            seq = []
            async for c in eng.generate(Request(f"{name}{s}", ids, max_new_tokens=3, temperature=T, seed=s)):
                seq.extend(c.token_ids)
            if len(seq) >= 2:                                            # EOS first ends early: rare, skipped
                counts[seq[1]] += 1
        result[name] = 0.5 * float((counts / counts.sum() - exact).abs().sum())
    assert spec.counters()["draft_tokens"] > 0
    expected = 0.5 * float((2 * exact * (1 - exact) / (3.14159 * N)).sqrt().sum())   # E[TV] of N samples
    bound = 2 * expected + 0.02
    assert result["plain"] < bound, (result, bound)
    assert result["spec"] < bound, (result, bound)
    await plain.close(), await spec.close()


async def test_superseding_request_reuses_the_aborted_requests_cache(make_engine):
    """The language server's pattern: a keystroke aborts the running request and starts one with a longer prompt
    for the same document; the new one reuses the KV cache the aborted one computed."""
    eng = make_engine(speculation="draft", num_speculative_tokens=2)
    gen = eng.generate(Request("old", DOC, max_new_tokens=10_000, cache_key="doc"))
    async for chunk in gen:
        if chunk.text:
            break
    await eng.abort("old")
    newer = asyncio.create_task(collect(eng, Request("new", DOC + "    de", max_new_tokens=4, cache_key="doc")))
    await asyncio.sleep(0)                                 # the new request is registered before the old one ends
    rest = [c async for c in gen]
    assert rest[-1].finish_reason == "abort"
    await newer
    c = eng.counters()
    assert c["requests_aborted"] == 1 and c["wasted_tokens"] > 0
    assert c["cached_prompt_tokens"] >= eng.count_tokens(DOC) - 2
    await eng.close()


async def test_cache_keys_are_lru_bounded(make_engine):
    from completer.engine.torch import caches

    eng = make_engine(speculation="none")
    for i in range(caches.CACHE_KEYS + 3):
        await collect(eng, Request(f"d{i}", DOC, max_new_tokens=1, cache_key=f"doc{i}"))
    assert len(eng._caches) == caches.CACHE_KEYS
    assert "doc0" not in eng._caches and f"doc{caches.CACHE_KEYS + 2}" in eng._caches
    before = eng.counters()["cached_prompt_tokens"]
    await collect(eng, Request("again0", DOC, max_new_tokens=1, cache_key="doc0"))     # evicted: cold
    assert eng.counters()["cached_prompt_tokens"] == before
    await collect(eng, Request("again9", DOC, max_new_tokens=1, cache_key="doc9"))     # kept: warm
    assert eng.counters()["cached_prompt_tokens"] > before
    await eng.close()


async def test_concurrent_plain_requests_are_decoded_in_one_forward(make_engine):
    """Issue 13: several running requests share decode forwards (batched), and each gets what it gets alone."""
    solo = make_engine(speculation="none", batch_decode=False)
    eng = make_engine(speculation="none")
    prompts = contract.PROMPTS[:4]
    try:
        want = [(await collect(solo, Request(f"s{i}", p, max_new_tokens=12)))[1] for i, p in enumerate(prompts)]
        got = await asyncio.gather(*(collect(eng, Request(f"b{i}", p, max_new_tokens=12))
                                     for i, p in enumerate(prompts)))
        assert [ids for _, ids, _ in got] == want
        assert eng.batched_steps > 0 and solo.batched_steps == 0
    finally:
        await solo.close()
        await eng.close()


@pytest.mark.parametrize("speculation,own_draft,temperature", [
    ("draft", True, 0.0), ("draft", False, 0.0), ("ngram", False, 0.0), ("draft+ngram", False, 0.0),
    ("draft", True, 0.8)])
async def test_concurrent_speculative_requests_share_forwards(make_engine, tiny_pair, speculation, own_draft,
                                                               temperature):
    """Issue 13 item 5 with speculation on: the drafts of several requests and their verifications run in shared
    forwards (packed rows, each request on its own caches), and each request gets the tokens it gets when the
    engine steps it alone: greedy, and sampled with a seed (each request draws from its own generator in the same
    order). ``own_draft``: the target drafts for itself, so every draft is accepted and verification rows commit
    several tokens per step (rejection and roll-back are what the tiny pair's own draft exercises)."""
    opts = dict(speculation=speculation, num_speculative_tokens=4)
    if own_draft:
        opts["draft"] = str(tiny_pair[0])
    solo, eng = make_engine(batch_decode=False, **opts), make_engine(**opts)
    prompts = contract.PROMPTS[:4]

    def req(tag, i, p):
        return Request(f"{tag}{i}", p, max_new_tokens=20, temperature=temperature, seed=11 + i if temperature else None)
    try:
        for e in (solo, eng):
            e.stop_ids = set()                             # every request runs its 20 tokens
        want = [(await collect(solo, req("s", i, p)))[1] for i, p in enumerate(prompts)]
        got = await asyncio.gather(*(collect(eng, req("b", i, p)) for i, p in enumerate(prompts)))
        assert [ids for _, ids, _ in got] == want
        assert all(len(ids) == 20 for ids in want)
        assert eng.batched_steps > 0 and solo.batched_steps == 0
        assert eng.batched_verifications > 0 and solo.batched_verifications == 0
        if own_draft:                                      # every draft accepted
            c = eng.counters()
            assert c["accepted_tokens"] == c["draft_tokens"] > 0
    finally:
        await solo.close()
        await eng.close()


LONG = DOC + "".join(f"    def m{i}(self, x):\n        return self.size * x + {i}\n" for i in range(12))


async def test_a_long_prompt_is_prefilled_in_chunks_with_the_same_output(make_engine, monkeypatch):
    """A prompt longer than PREFILL_CHUNK runs a chunk a step (an abort or another request waits one chunk at
    most); the text is the one a single prefill gives, and the counters count the prompt once."""
    from completer.engine.torch import scheduling

    whole = make_engine(speculation="none")
    want, _, _ = await collect(whole, Request("w", LONG, max_new_tokens=12))
    monkeypatch.setattr(scheduling, "PREFILL_CHUNK", 8)
    chunked = make_engine(speculation="none")
    calls = []
    real = scheduling.catch_up
    monkeypatch.setattr(scheduling, "catch_up", lambda *a: calls.append(len(a[2])) or real(*a))
    got, _, _ = await collect(chunked, Request("c", LONG, max_new_tokens=12))
    n = chunked.count_tokens(LONG)
    assert got == want
    assert len(calls) >= (n - 12) // 8 and calls == sorted(calls) and calls[0] == 8
    assert chunked.counters()["prompt_tokens"] == n and chunked.counters()["cached_prompt_tokens"] == 0
    await whole.close(), await chunked.close()


async def test_a_prompt_step_that_measures_another_thread_count_runs_a_short_chunk(make_engine, monkeypatch):
    """The thread chooser's first samples of one thread for the prompt phase (and its later re-tries) run
    TRIAL_CHUNK tokens, not a whole chunk: on a cold document one thread's full chunks had cost ~0.4 s more
    (issue 29); the text is the same."""
    from completer.engine.torch import scheduling
    from completer.engine.torch.threads import ThreadChooser

    monkeypatch.setattr(scheduling, "PREFILL_CHUNK", 40)
    monkeypatch.setattr(scheduling, "TRIAL_CHUNK", 20)
    whole = make_engine(speculation="none")
    want, _, _ = await collect(whole, Request("w", LONG, max_new_tokens=6))
    eng = make_engine(speculation="none")
    eng.threads = ThreadChooser(2)                         # fresh: the prompt phase measures 2, 2, then 1, 1
    real, calls = scheduling.catch_up, []
    monkeypatch.setattr(scheduling, "catch_up", lambda *a: calls.append(len(a[2])) or real(*a))
    got, _, _ = await collect(eng, Request("c", LONG, max_new_tokens=6))
    assert got == want
    assert [b - a for a, b in zip([0, *calls], calls)][:5] == [40, 40, 20, 20, 40]
    await whole.close(), await eng.close()


def test_the_engine_measures_its_cold_prompt_speed_when_first_asked(make_engine):
    """pipeline.prompt_budget sizes the prompt by it (setting coldPromptMs); the server's engine start asks
    (pipeline.prepare), the CLI never does, so building the engine does not measure."""
    from completer import pipeline

    eng = make_engine(speculation="none")
    settings = pipeline.Settings()                   # the CLI's: coldPromptMs 0, the whole budget
    assert pipeline.prompt_budget(settings, eng) == settings.budget_tokens
    assert "prompt_s_per_token" not in vars(eng)
    pipeline.prepare(eng)
    measured = vars(eng)["prompt_s_per_token"]
    assert 0 < measured < 1 and eng.prompt_s_per_token == measured        # once


async def test_a_request_for_no_tokens_fills_the_documents_cache(make_engine, monkeypatch):
    """A warm-up (max_new_tokens 0: lsp/warm.py) generates nothing and leaves the prompt in the document's cache:
    the keystroke's request after it runs only its new tokens."""
    from completer.engine.torch import scheduling

    monkeypatch.setattr(scheduling, "PREFILL_CHUNK", 8)
    eng = make_engine(speculation="none")
    text, ids, reason = await collect(eng, Request("warm", LONG, max_new_tokens=0, cache_key="doc"))
    assert (text, ids, reason) == ("", [], "length")
    assert eng.counters()["generated_tokens"] == 0
    await collect(eng, Request("key", LONG + "    de", max_new_tokens=4, cache_key="doc"))
    assert eng.counters()["cached_prompt_tokens"] >= eng.count_tokens(LONG) - 2
    cold = make_engine(speculation="none")                 # without the warm-up: nothing reused
    await collect(cold, Request("key", LONG + "    de", max_new_tokens=4, cache_key="doc"))
    assert cold.counters()["cached_prompt_tokens"] == 0
    await eng.close(), await cold.close()


async def test_an_aborted_prefill_keeps_the_chunks_it_filled(make_engine, monkeypatch):
    """A keystroke that supersedes a request still prefilling (a cold document) finds the chunks done so far in the
    document's cache, so the prompt is not started over."""
    from completer.engine.torch import scheduling

    monkeypatch.setattr(scheduling, "PREFILL_CHUNK", 8)
    eng = make_engine(speculation="none")
    real, calls = scheduling.catch_up, []

    def two_chunks_then_abort(model, cache, tokens, n_vocab):
        out = real(model, cache, tokens, n_vocab)
        calls.append(len(tokens))
        if len(calls) == 2:
            eng._running["old"].aborted = True              # as engine.abort marks it, between two chunks
        return out

    monkeypatch.setattr(scheduling, "catch_up", two_chunks_then_abort)
    _, ids, reason = await collect(eng, Request("old", LONG, max_new_tokens=8, cache_key="doc"))
    assert (ids, reason) == ([], "abort") and calls == [8, 16]
    monkeypatch.setattr(scheduling, "catch_up", real)
    await collect(eng, Request("new", LONG + "  ", max_new_tokens=2, cache_key="doc"))
    assert eng.counters()["cached_prompt_tokens"] == 16
    await eng.close()
