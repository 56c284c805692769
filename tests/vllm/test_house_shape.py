"""The 7B-shaped random-weight model served with the house tokenizer (bench/vllm/dummy.py --tokenizer house, run as a
program with --write-only: the model folders, no engine; CPU)."""

import json
import random

from tokenizers import Tokenizer

from completer.models import HOUSE_DIR
from completer.prompt import template_for_model
from tests.helpers.programs import run_program


def _write(tmp_path, tokenizer: str):
    run_program("bench.vllm.dummy", "--write-only", "--only", "target-7b", "--tokenizer", tokenizer,
                "--models-dir", tmp_path / tokenizer)
    folder = tmp_path / tokenizer / "target-7b"
    return folder, json.loads((folder / "config.json").read_text())


def test_padded_house_tokenizer_encodes_as_house_and_decodes_every_id(tmp_path):
    folder, cfg = _write(tmp_path, "house")
    house = Tokenizer.from_file(str(HOUSE_DIR / "target" / "tokenizer.json"))
    padded = Tokenizer.from_file(str(folder / "tokenizer.json"))
    n, vocab = house.get_vocab_size(), cfg["vocab_size"]
    assert padded.get_vocab_size() == vocab > n
    text = "def f(x):\n    return {'a': x}  # über\n"
    assert padded.encode(text).ids == house.encode(text).ids            # padding tokens are never produced
    ids = [random.Random(0).randrange(vocab) for _ in range(300)]
    same = [i if i < n else 6 + (i - n) % (n - 6) for i in ids]
    assert padded.decode(ids) == house.decode(same)                     # every id decodes to house text
    assert "\u2983" not in padded.decode(ids)
    assert padded.decode([n, n + 1]) == house.decode([6, 7])            # never a special token


def test_house_shape_folder_uses_the_house_template(tmp_path):
    folder, cfg = _write(tmp_path, "house")
    assert template_for_model(folder) == "house"
    assert cfg["model_type"] == "llama" and cfg["hidden_size"] == 3584 and cfg["num_hidden_layers"] == 28
    words, _ = _write(tmp_path, "words")                                # the default: word tokens
    assert (words / "tokenizer.json").is_file()


def test_unknown_tokenizer_kind_is_refused(tmp_path):
    proc = run_program("bench.vllm.dummy", "--write-only", "--tokenizer", "bpe", "--models-dir", tmp_path,
                       check=False)
    assert proc.returncode != 0 and "--tokenizer" in proc.stderr and not any(tmp_path.iterdir())
