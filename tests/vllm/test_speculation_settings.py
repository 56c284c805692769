"""CPU tests: the vLLM settings of issues 15/16 (eagle3, ngram_gpu, quantization, draft placement) map to vLLM's
arguments, and a wrong value is a ValueError naming the setting before any engine starts."""

import json
from pathlib import Path

import pytest

from completer.engine import EngineConfig
from completer.engine.vllm.settings import check_quantization, engine_kwargs


def cfg(**kw):
    """vLLM settings on house v1 and its EAGLE-3 drafter (house:eagle3)."""
    return EngineConfig(backend="vllm", **{"model": "house:target", "draft": "house:draft", **kw})


@pytest.fixture
def drafter(tmp_path):
    d = tmp_path / "eagle3"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"]}))
    (d / "model.safetensors").write_bytes(b"")
    return d


def test_eagle3_maps_to_vllm_method_with_the_drafter(drafter):
    kw = engine_kwargs(cfg(speculation="eagle3", num_speculative_tokens=5), "/m/t", drafter)
    assert kw["speculative_config"] == {"method": "eagle3", "model": str(drafter), "num_speculative_tokens": 5}


def test_eagle3_rejects_a_folder_that_is_not_a_drafter(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    with pytest.raises(ValueError, match="not an EAGLE-3 drafter"):
        engine_kwargs(cfg(speculation="eagle3"), "/m/t", tmp_path)
    with pytest.raises(ValueError, match="no readable config.json"):
        engine_kwargs(cfg(speculation="eagle3"), "/m/t", tmp_path / "missing")


def test_eagle3_with_dummy_weights_needs_no_safetensors(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"]}))
    with pytest.raises(ValueError, match="no \\*.safetensors"):
        engine_kwargs(cfg(speculation="eagle3"), "/m/t", tmp_path)
    kw = engine_kwargs(cfg(speculation="eagle3", load_format="dummy"), "/m/t", tmp_path)
    assert kw["speculative_config"]["method"] == "eagle3"


def test_dflash_maps_to_vllm_method_with_a_dflash_drafter_folder(tmp_path):
    """A folder from `completer train-drafter --method dflash` (the real writer, on a tiny target) is what the
    vLLM backend hands vLLM as method "dflash"; an EAGLE-3 folder, or one without the dflash keys, is refused."""
    import torch

    from completer.training.dflash import DFlashConfig, DFlashDrafter
    from completer.models.llama import ModelConfig

    t = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
                    num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    DFlashDrafter(DFlashConfig.for_target(t, mask_token_id=4)).save(tmp_path / "df")
    kw = engine_kwargs(cfg(speculation="dflash", drafter=str(tmp_path / "df"), num_speculative_tokens=4), "/m/t",
                       tmp_path / "df")
    assert kw["speculative_config"] == {"method": "dflash", "model": str(tmp_path / "df"), "num_speculative_tokens": 4}
    eagle = tmp_path / "e"
    eagle.mkdir()
    (eagle / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"]}))
    with pytest.raises(ValueError, match="not a DFlash drafter"):
        engine_kwargs(cfg(speculation="dflash", drafter=str(eagle)), "/m/t", eagle)
    (eagle / "config.json").write_text(json.dumps({"architectures": ["DFlashDraftModel"], "dflash_config": {}}))
    with pytest.raises(ValueError, match="lacks"):
        engine_kwargs(cfg(speculation="dflash", drafter=str(eagle)), "/m/t", eagle)


def test_ngram_gpu_keeps_the_lookup_bounds():
    kw = engine_kwargs(cfg(speculation="ngram_gpu", num_speculative_tokens=4, ngram_min=2, ngram_max=5), "/m/t")
    assert kw["speculative_config"] == {"method": "ngram_gpu", "num_speculative_tokens": 4,
                                        "prompt_lookup_min": 2, "prompt_lookup_max": 5}


def test_suffix_decoding_needs_arctic_inference_before_the_engine_starts(monkeypatch, tmp_path):
    import sys

    monkeypatch.setattr(sys, "path", [p for p in sys.path if not (Path(p) / "arctic_inference").exists()])
    monkeypatch.delitem(sys.modules, "arctic_inference", raising=False)
    with pytest.raises(ValueError, match="arctic_suffix.sh"):
        engine_kwargs(cfg(speculation="suffix", num_speculative_tokens=8), "/m/t")
    # what bench/vllm/arctic_suffix.sh lays out: the package with its suffix_decoding module
    (tmp_path / "arctic_inference" / "suffix_decoding").mkdir(parents=True)
    (tmp_path / "arctic_inference" / "__init__.py").write_text("")
    (tmp_path / "arctic_inference" / "suffix_decoding" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    kw = engine_kwargs(cfg(speculation="suffix", num_speculative_tokens=8), "/m/t")
    assert kw["speculative_config"] == {"method": "suffix", "num_speculative_tokens": 8}


def test_quantization_of_target_and_draft_and_draft_placement(drafter):
    kw = engine_kwargs(cfg(speculation="eagle3", quantization="fp8", draft_quantization="fp8", tensor_parallel_size=2,
                           draft_tensor_parallel_size=1), "/m/t", drafter)
    assert kw["quantization"] == "fp8"
    assert kw["speculative_config"]["quantization"] == "fp8"
    assert kw["speculative_config"]["draft_tensor_parallel_size"] == 1
    assert "quantization" not in engine_kwargs(cfg(speculation="none"), "/m/t")


def test_fp8_on_a_gpu_without_fp8_tensor_cores_is_refused():
    with pytest.raises(ValueError, match="compute capability 8.9"):
        check_quantization("fp8", "quantization", capability=(8, 0))
    assert check_quantization("fp8", "quantization", capability=(9, 0)) == "fp8"
    assert check_quantization("awq", "quantization", capability=(7, 5)) == "awq"


@pytest.mark.parametrize("settings,match", [
    (dict(backend="torch", speculation="eagle3"), "vLLM backend's"),
    (dict(backend="torch", speculation="ngram_gpu"), "vLLM backend's"),
    (dict(backend="torch", speculation="suffix"), "vLLM backend's"),
    (dict(backend="vllm", model="/m/7b", speculation="eagle3", drafter=None), "needs drafter"),
    (dict(backend="torch", speculation="dflash"), "vLLM backend's"),
    (dict(backend="vllm", speculation="dflash"), "needs drafter .*EAGLE-3 one"),      # house v2's drafter is EAGLE-3
    (dict(backend="vllm", model="/m/7b", speculation="dflash"), "needs drafter"),
    (dict(backend="vllm", speculation="draft", tensor_parallel_size=4, draft_tensor_parallel_size=2),
     "draft_tensor_parallel_size must be 1 or tensor_parallel_size"),
    (dict(backend="vllm", speculation="ngram", draft_quantization="fp8"), "apply to speculation='draft'"),
])
def test_config_errors_name_the_setting(settings, match):
    with pytest.raises(ValueError, match=match):
        EngineConfig(**settings)


def test_prompt_ids_outside_the_vocabulary_are_a_request_error_before_vllm_sees_them():
    """Issue 15 item 4: the backend's own limits (vocabulary, max model length, read from vLLM at start) make a bad
    prompt one request's error instead of an engine-core failure and a restart."""
    import asyncio

    from completer.engine.base import Counters, Request, RequestError
    from completer.engine.vllm.engine import VLLMEngine

    class NoLLM:
        def generate(self, *a):
            raise AssertionError("vLLM must not be asked")

    e = object.__new__(VLLMEngine)
    e.tokenizer, e.llm, e.max_model_len, e.n_vocab = None, NoLLM(), 64, 100
    e._counters, e._active, e._closed = Counters(), {}, False

    async def run(prompt, n=4):
        async for _ in e.generate(Request("r", prompt, max_new_tokens=n)):
            pass

    with pytest.raises(RequestError, match="out of range 0..99"):
        asyncio.run(run([5, 100]))
    with pytest.raises(RequestError, match="exceeds the model's context of 64"):
        asyncio.run(run([5] * 61))
