"""FIM template formats and template guessing from a model folder."""

from __future__ import annotations

import json

import pytest

from completer.prompt import fim_prompt, template_for_model


@pytest.mark.parametrize("template,expected", [
    ("house", "<|fim_suffix|>S<|fim_prefix|># c\nP<|fim_middle|>"),
    ("qwen", "<|fim_prefix|># c\nP<|fim_suffix|>S<|fim_middle|>"),
    ("starcoder", "<fim_prefix># c\nP<fim_suffix>S<fim_middle>"),
    ("codellama", "<PRE> # c\nP <SUF>S <MID>"),
    ("deepseek", "<｜fim▁begin｜># c\nP<｜fim▁hole｜>S<｜fim▁end｜>"),
    ("plain", "# c\nP"),                       # left-to-right model: no suffix in the prompt
])
def test_template_formats(template, expected):
    assert fim_prompt("P", "S", template, context="# c") == expected


def test_unknown_template_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown FIM template 'gpt'.*house"):
        fim_prompt("a", "b", "gpt")


def test_build_prompt_rejects_unknown_template(count_tokens):
    from completer.context import SourceFile, build_prompt
    with pytest.raises(ValueError, match="unknown FIM template"):
        build_prompt(SourceFile("file:///a.py", "python", "x"), 1, count_tokens=count_tokens, template="nope")


def _folder(tmp_path, tokens, config=None):
    (tmp_path / "config.json").write_text(json.dumps(config or {"model_type": "llama"}))
    (tmp_path / "tokenizer.json").write_text(json.dumps({"added_tokens": [{"content": t} for t in tokens]}))
    return tmp_path


def test_template_guessing(tmp_path):
    (tmp_path / "a").mkdir()
    assert template_for_model(_folder(tmp_path / "a", ["<|fim_prefix|>", "<|endoftext|>"],
                                      {"model_type": "qwen2"})) == "qwen"
    (tmp_path / "b").mkdir()
    assert template_for_model(_folder(tmp_path / "b", ["<fim_prefix>", "<fim_suffix>"])) == "starcoder"
    (tmp_path / "c").mkdir()
    assert template_for_model(_folder(tmp_path / "c", ["<｜fim▁begin｜>"])) == "deepseek"
    (tmp_path / "d").mkdir()
    assert template_for_model(_folder(tmp_path / "d", ["<PRE>", "<SUF>", "<MID>"])) == "codellama"
    (tmp_path / "e").mkdir()
    assert template_for_model(_folder(tmp_path / "e", ["<|fim_prefix|>"], {"completer_house": True})) == "house"
    (tmp_path / "g").mkdir()
    assert template_for_model(_folder(tmp_path / "g", ["<|fim_prefix|>"], {"model_type": "llama"})) == "house"
    (tmp_path / "f").mkdir()
    with pytest.raises(ValueError, match="cannot tell the FIM template"):
        template_for_model(_folder(tmp_path / "f", ["<s>"]))


def test_shipped_house_models_use_the_house_template(house_options):
    from completer.models import HOUSE_DIR
    folders = [p for p in HOUSE_DIR.glob("*") if (p / "config.json").is_file()]
    assert {"target", "draft"} <= {p.name for p in folders}
    for folder in folders:
        assert template_for_model(folder) == "house"


def test_config_template_key_decides_first(tmp_path):
    """GGUF folders (completer.models.gguf) name their template; a model without FIM tokens gets "plain"."""
    folder = _folder(tmp_path, ["<|endoftext|>", "<|im_start|>"], {"model_type": "llama", "completer_template": "plain"})
    assert template_for_model(folder) == "plain"
