import pytest

from pathlib import Path

from completer.engine import EngineConfig
from completer.engine.config import EMBEDDED_MODEL, HOUSE_DRAFT, HOUSE_MODEL, default_model
from lsp.config import ConfigError, ServerConfig


def test_defaults_and_overrides():
    cfg = ServerConfig.from_options(None)
    assert cfg.max_tokens == 32 and cfg.cancel_stale_requests and cfg.engine == EngineConfig()
    # chosen by bench.replay (bench/results/replay/): the learned debounce and 64 tokens lost under load
    assert not cfg.adaptive_debounce and cfg.debounce_ms == 0 and cfg.reuse_in_flight and not cfg.early_answer
    cfg = ServerConfig.from_options({"maxTokens": 8, "debounceMs": 0, "cancelStaleRequests": False,
                                     "engine": {"prefix_cache": False, "speculation": "ngram"}})
    assert (cfg.max_tokens, cfg.debounce_ms, cfg.cancel_stale_requests) == (8, 0.0, False)
    assert cfg.engine.prefix_cache is False and cfg.engine.speculation == "ngram"
    assert cfg.engine.model == default_model()         # untouched engine fields keep their values (the default)
    again = cfg.updated({"completer": {"maxTokens": 9}}, "settings")
    assert again.max_tokens == 9 and again.engine == cfg.engine


def test_a_default_model_follows_the_backend(monkeypatch):
    """The model left to its default is the backend's: a later change of backend picks that backend's default
    (vLLM: the house pair) instead of keeping the embedded one's; a model the user named stays."""
    monkeypatch.setattr("completer.models.smollm2_path", lambda: Path("/x/SmolLM2-135M-Instruct.Q4_1.gguf"))
    cfg = ServerConfig.from_options({"engine": {"speculation": "none"}})
    assert (cfg.engine.model, cfg.engine.draft) == (EMBEDDED_MODEL, "house:smollm2/draft")
    vllm = cfg.updated({"engine": {"backend": "vllm"}}, "settings").engine
    assert (vllm.model, vllm.draft, vllm.speculation) == (HOUSE_MODEL, HOUSE_DRAFT, "none")
    named = ServerConfig.from_options({"engine": {"model": "house:target"}})
    assert named.updated({"engine": {"threads": 1}}, "settings").engine.model == "house:target"


@pytest.mark.parametrize("options, match", [
    ({"maxTokens": "many"}, r"initializationOptions\.maxTokens: expected an integer"),
    ({"maxTokens": 0}, r"maxTokens: must be in 1\.\.4096"),
    ({"debounceMs": True}, r"debounceMs: expected a number"),
    ({"cancelStaleRequests": 1}, r"cancelStaleRequests: expected true or false"),
    ({"nope": 1}, r"unknown setting\(s\) \['nope'\]"),
    ({"engine": {"speculation": "magic"}}, r"initializationOptions\.engine: speculation must be one of"),
    ({"engine": {"colour": 1}}, r"engine: unknown engine setting\(s\) \['colour'\]"),
    ({"engine": []}, r"engine: expected an object"),
    ([1, 2], r"expected an object, got list"),
    ({"template": "gpt"}, r"template: must be 'auto' or one of house"),
])
def test_bad_options_name_the_field(options, match):
    with pytest.raises(ConfigError, match=match):
        ServerConfig.from_options(options)


def test_to_json_round_trips():
    cfg = ServerConfig.from_options({"maxTokens": 5, "engine": {"num_speculative_tokens": 3}})
    assert ServerConfig.from_options(cfg.to_json()) == cfg


def test_token_healing_reaches_the_pipeline_settings():
    assert ServerConfig.from_options(None).settings().token_healing is True
    assert ServerConfig.from_options({"tokenHealing": False}).settings().token_healing is False
    with pytest.raises(ConfigError, match=r"tokenHealing: expected true or false"):
        ServerConfig.from_options({"tokenHealing": "no"})


def test_cold_prompt_ms_reaches_the_pipeline_settings():
    from completer.pipeline import COLD_PROMPT_MS
    assert ServerConfig.from_options(None).settings().cold_prompt_ms == COLD_PROMPT_MS > 0
    assert ServerConfig.from_options({"coldPromptMs": 0}).settings().cold_prompt_ms == 0
    with pytest.raises(ConfigError, match=r"coldPromptMs: must be in 0"):
        ServerConfig.from_options({"coldPromptMs": -5})
