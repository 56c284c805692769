"""speculation="auto" (the default): the setting `completer tune` saved for these models here, else none."""

import asyncio
import json
import logging

import pytest

from completer.engine import EngineConfig
from completer.engine.choice import choice_path, measured_for, resolve
from completer.engine.torch.engine import TorchEngine
from completer.tune import main as tune_main


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.delenv("COMPLETER_TUNE_DIR", raising=False)          # the cache folder's own place
    monkeypatch.setenv("COMPLETER_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def save(config: EngineConfig, settings: dict, **extra) -> None:
    path = choice_path(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"measured_for": measured_for(config), "winner": "x", "date": "d",
                                "settings": settings, **extra}))


def test_the_default_is_auto_and_nothing_measured_means_no_speculation(cache):
    config = EngineConfig()
    assert config.speculation == "auto"
    resolved, why = resolve(config)
    assert resolved.speculation == "none" and "nothing measured" in why
    assert str(choice_path(config)).startswith(str(cache / "tune"))
    assert resolve(EngineConfig(speculation="draft"))[0].speculation == "draft"     # a set value is kept


def test_a_dflash_choice_brings_its_drafter_folder(cache, tmp_path):
    """tune --dflash measures a DFlash folder beside the EAGLE-3 drafter that ships: when it wins, the engine with
    speculation="auto" runs it with that folder (without it, the shipped EAGLE-3 folder would be refused for dflash
    and the choice ignored)."""
    base = EngineConfig(backend="vllm")                       # house v2 with its shipped house:v2/eagle3
    save(base, {"backend": "vllm", "model": base.model, "draft": base.draft, "device": "auto",
                "drafter": str(tmp_path / "df"), "speculation": "dflash", "num_speculative_tokens": 4})
    resolved, why = resolve(base)
    assert (resolved.speculation, resolved.num_speculative_tokens, resolved.drafter) == \
        ("dflash", 4, str(tmp_path / "df")) and "completer tune" in why
    save(base, {"backend": "vllm", "drafter": base.drafter, "speculation": "eagle3", "num_speculative_tokens": 2})
    assert resolve(base)[0].drafter == "house:v2/eagle3"


def test_a_saved_choice_for_the_same_models_is_taken_and_for_others_not(cache):
    save(EngineConfig(device="cpu"), {"speculation": "ngram", "num_speculative_tokens": 4})
    resolved, why = resolve(EngineConfig(device="cpu"))
    assert (resolved.speculation, resolved.num_speculative_tokens) == ("ngram", 4) and "completer tune" in why
    assert resolve(EngineConfig(device="cpu", model="house:target", draft="house:draft"))[0].speculation == "none"
    assert resolve(EngineConfig(device="cuda"))[0].speculation == "none"


@pytest.mark.parametrize("text", ["{not json", json.dumps({"measured_for": {}, "settings": {}}),
                                  json.dumps({"settings": {"speculation": "magic"}})])
def test_an_unreadable_or_foreign_choice_is_ignored_with_a_warning(cache, caplog, text):
    config = EngineConfig(device="cpu")
    path = choice_path(config)
    path.parent.mkdir(parents=True)
    path.write_text(text)
    if "magic" in text:                                   # right key, a setting the engine does not have
        save(config, {"speculation": "magic"})
    with caplog.at_level(logging.WARNING, logger="completer.engine.choice"):
        assert resolve(config)[0].speculation == "none"
    assert str(path) in caplog.text


def test_tune_saves_what_an_auto_engine_then_runs(cache, tiny_pair, capsys):
    target, draft = map(str, tiny_pair)
    assert tune_main(["--model", target, "--draft", draft, "--device", "cpu", "--ks", "2", "--only", "ngram k=2",
                      "--n", "2", "--max-new-tokens", "8", "--min-gain", "0.01"]) == 0
    out = capsys.readouterr().out
    config = EngineConfig(model=target, draft=draft, device="cpu")
    saved = json.loads(choice_path(config).read_text())
    assert str(choice_path(config)) in out and saved["winner"] in ("none", "ngram k=2")
    engine = TorchEngine(config)                          # built directly, as benchmarks do: resolves too
    try:
        assert engine.config.speculation == saved["settings"]["speculation"] != "auto"
        assert "completer tune" in engine.speculation_choice
    finally:
        asyncio.run(engine.close())


def test_tune_measures_editor_and_fixed_requests_on_the_same_engines(cache, tiny_pair, capsys, tmp_path):
    """--requests editor,fixed: one set of engines and rounds, a table and a best configuration per shape (on
    vLLM engine starts are the cost); the saved choice is the first shape's."""
    target, draft = map(str, tiny_pair)
    out = tmp_path / "t.json"
    assert tune_main(["--model", target, "--draft", draft, "--device", "cpu", "--ks", "2", "--only", "ngram k=2",
                      "--n", "2", "--max-new-tokens", "8", "--min-gain", "0.01", "--rounds", "2",
                      "--requests", "editor,fixed", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())
    assert result["requests"] == result["chosen_on"] == "editor" and set(result["by_requests"]) == {"editor", "fixed"}
    assert result["table"] == result["by_requests"]["editor"]["table"]
    assert result["winner"] == result["by_requests"]["editor"]["winner"]
    fixed = result["by_requests"]["fixed"]["table"]
    assert set(fixed) == {"none", "ngram k=2"} and all(r["rounds"] == 2 for r in fixed.values())
    assert result["by_requests"]["fixed"]["max_new_tokens"] == 8
    assert "fixed requests" in printed and "editor requests (the choice is made on these)" in printed
    with pytest.raises(SystemExit):
        tune_main(["--requests", "editor,blocks", "--n", "1"])


def test_fresh_rounds_give_every_round_prompts_of_its_own(tiny_pair):
    """--fresh-rounds (on whenever suffix decoding is a candidate, which drafts from the answers it served): round r
    runs the r-th share of the requests, so no engine sees a prompt twice; medians are over every request."""
    from completer.engine.base import Request
    from completer.tune import measure

    target, draft = map(str, tiny_pair)
    config = EngineConfig(model=target, draft=draft, device="cpu", speculation="none")
    qs = [Request("p", f"def f{i}(x{i}, y):\n    return x{i} +", max_new_tokens=4) for i in range(4)]
    once = asyncio.run(measure({"none": config}, {"fixed": qs}, 1, lambda *a: None))["none"]["fixed"]
    fresh = asyncio.run(measure({"none": config}, {"fixed": qs}, 2, lambda *a: None, fresh=True))["none"]["fixed"]
    assert fresh["outputs"] == [once["outputs"][0][:2], once["outputs"][0][2:]]
    assert fresh["rounds"] == 2 and fresh["same_output_every_round"] is None
