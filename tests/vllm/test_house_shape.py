"""The 7B-shaped random-weight model served with the house tokenizer (bench/vllm/dummy.py --tokenizer house; CPU)."""

import json
import random

from tokenizers import Tokenizer

from bench.vllm import dummy
from completer.models import HOUSE_DIR
from completer.prompt import template_for_model

SHAPE = dict(dummy.SHAPES["target-7b"])


def test_padded_house_tokenizer_encodes_as_house_and_decodes_every_id(tmp_path):
    folder = dummy.write_model(tmp_path / "t", SHAPE, "house")
    house = Tokenizer.from_file(str(HOUSE_DIR / "target" / "tokenizer.json"))
    padded = Tokenizer.from_file(str(folder / "tokenizer.json"))
    n = house.get_vocab_size()
    assert padded.get_vocab_size() == SHAPE["vocab_size"] == json.loads((folder / "config.json").read_text())["vocab_size"]
    text = "def f(x):\n    return {'a': x}  # über\n"
    assert padded.encode(text).ids == house.encode(text).ids            # padding tokens are never produced
    ids = [random.Random(0).randrange(SHAPE["vocab_size"]) for _ in range(300)]
    same = [i if i < n else 6 + (i - n) % (n - 6) for i in ids]
    assert padded.decode(ids) == house.decode(same)                     # every id decodes to house text
    assert "\u2983" not in padded.decode(ids)
    assert padded.decode([n, n + 1]) == house.decode([6, 7])            # never a special token


def test_house_shape_folder_uses_the_house_template(tmp_path):
    folder = dummy.write_model(tmp_path / "t", SHAPE, "house")
    cfg = json.loads((folder / "config.json").read_text())
    assert template_for_model(folder) == "house"
    assert cfg["model_type"] == "llama" and cfg["hidden_size"] == 3584 and cfg["num_hidden_layers"] == 28
    assert dummy.write_model(tmp_path / "w", SHAPE).joinpath("tokenizer.json").is_file()   # default: word tokens


def test_unknown_tokenizer_kind_is_refused(tmp_path):
    import pytest

    with pytest.raises(ValueError, match="tokenizer"):
        dummy.write_model(tmp_path / "x", SHAPE, "bpe")
