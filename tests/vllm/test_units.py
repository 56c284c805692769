"""CPU unit tests of the vLLM backend's pure parts: config -> vLLM arguments, request -> sampling, spec stats."""

import importlib.util
from types import SimpleNamespace

import pytest

from completer.engine import EngineConfig, EngineError, Request, create_engine
from completer.engine.base import Counters
from completer.engine.vllm.engine import merge_spec_stats, sampling_kwargs
from completer.engine.vllm.settings import engine_kwargs, speculative_k


def cfg(**kw):
    return EngineConfig(backend="vllm", **kw)


def test_no_speculation_maps_engine_settings():
    kw = engine_kwargs(cfg(speculation="none", tensor_parallel_size=2, gpu_memory_utilization=0.5,
                           load_format="dummy", dtype="bfloat16"), "/m/t")
    assert "speculative_config" not in kw
    assert kw["model"] == kw["tokenizer"] == "/m/t"
    assert (kw["tensor_parallel_size"], kw["gpu_memory_utilization"], kw["load_format"], kw["dtype"]) == (
        2, 0.5, "dummy", "bfloat16")
    assert kw["enable_prefix_caching"] is True and kw["enforce_eager"] is False


def test_prefix_cache_and_eager_switches():
    kw = engine_kwargs(cfg(speculation="none", prefix_cache=False, enforce_eager=True), "/m/t")
    assert kw["enable_prefix_caching"] is False and kw["enforce_eager"] is True


def test_draft_model_speculation():
    kw = engine_kwargs(cfg(speculation="draft", num_speculative_tokens=6), "/m/t", "/m/d")
    assert kw["speculative_config"] == {"method": "draft_model", "model": "/m/d", "num_speculative_tokens": 6}


def test_ngram_speculation():
    kw = engine_kwargs(cfg(speculation="ngram", num_speculative_tokens=3, ngram_min=1, ngram_max=5), "/m/t")
    assert kw["speculative_config"] == {"method": "ngram", "num_speculative_tokens": 3,
                                        "prompt_lookup_min": 1, "prompt_lookup_max": 5}


def test_adaptive_k_is_a_fixed_k_capped_by_the_maximum():
    assert speculative_k(cfg(num_speculative_tokens="adaptive")) == 4
    assert speculative_k(cfg(num_speculative_tokens="adaptive", max_speculative_tokens=2)) == 2
    assert speculative_k(cfg(num_speculative_tokens=7)) == 7


def test_overrides_win():
    kw = engine_kwargs(cfg(speculation="none"), "/m/t", max_model_len=4096, seed=3)
    assert kw["max_model_len"] == 4096 and kw["seed"] == 3


@pytest.mark.parametrize("config,match", [
    (dict(speculation="draft+ngram"), "one proposer"),
    (dict(speculation="none", device="cpu"), "CUDA"),
    (dict(speculation="none", quantization="fp4000"), "quantization='fp4000' is not a vLLM quantization"),
    (dict(speculation="draft", draft_quantization="int3"), "draft_quantization='int3'"),
])
def test_unsupported_settings_are_clear_errors(config, match):
    with pytest.raises(ValueError, match=match):
        engine_kwargs(cfg(**config), "/m/t", "/m/d")


def test_draft_needs_a_folder():
    with pytest.raises(ValueError, match="draft"):
        engine_kwargs(cfg(speculation="draft"), "/m/t", None)


def test_sampling_kwargs():
    r = Request("a", "x", max_new_tokens=12, stop=("\n\n",), temperature=0.7, top_p=0.9, seed=5)
    assert sampling_kwargs(r) == dict(max_tokens=12, temperature=0.7, top_p=0.9, stop=["\n\n"], seed=5)
    assert sampling_kwargs(Request("b", "x", top_p=0.5))["top_p"] == 1.0      # greedy ignores top_p


def stats(draft_pos, acc_pos, drafts):
    return SimpleNamespace(num_drafts=drafts, num_draft_tokens=sum(draft_pos), num_accepted_tokens=sum(acc_pos),
                           num_draft_tokens_per_pos=draft_pos, num_accepted_tokens_per_pos=acc_pos)


def test_merge_spec_stats_sums_steps_per_position():
    c = Counters()
    merge_spec_stats(c, stats([3, 3, 3, 3], [3, 2, 1, 0], 3))
    merge_spec_stats(c, stats([2, 2, 2, 2], [2, 2, 2, 1], 2))
    merge_spec_stats(c, None)
    merge_spec_stats(c, stats([0, 0, 0, 0], [0, 0, 0, 0], 0))
    snap = c.snapshot()
    assert snap["draft_per_position"] == [5, 5, 5, 5]
    assert snap["accepted_per_position"] == [5, 4, 3, 1]
    assert (snap["draft_tokens"], snap["accepted_tokens"]) == (20, 13)
    assert snap["acceptance_per_position"] == [1.0, 0.8, 0.6, 0.2]


def test_merge_matches_record_draft():
    """vLLM's per-step sums give the same counters as recording each draft the embedded way."""
    a, b = Counters(), Counters()
    drafts = [(4, 2), (4, 4), (4, 0), (4, 1)]
    for p, acc in drafts:
        a.record_draft(p, acc)
    dpos, apos = [0] * 4, [0] * 4
    for p, acc in drafts:
        for i in range(p):
            dpos[i] += 1
        for i in range(acc):
            apos[i] += 1
    merge_spec_stats(b, stats(dpos, apos, len(drafts)))
    assert a.snapshot() == b.snapshot()


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None
                    and importlib.util.find_spec("vllm").origin is not None, reason="vLLM is installed here")
def test_without_vllm_the_error_says_how_to_get_it():
    with pytest.raises(EngineError, match="completer\\[vllm\\]"):
        create_engine(cfg(speculation="none"))


def test_async_scheduling_is_vllms_choice_unless_set():
    """Unset: vLLM decides (on without speculation; 2026-12-03b's engine-core failures happened only with it on,
    so it can be switched off to compare); set: passed through."""
    assert "async_scheduling" not in engine_kwargs(cfg(speculation="none"), "/m/t")
    assert engine_kwargs(cfg(speculation="none", async_scheduling=False), "/m/t")["async_scheduling"] is False
