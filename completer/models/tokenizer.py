"""The house tokenizer: byte-level BPE trained on the corpus (v1: Python; v2: the several-language archive), with
Qwen2.5-Coder's FIM special tokens.

Byte-level means every string round-trips (any whitespace, any Unicode). Saved as ``tokenizer.json`` (loaded by the
embedded engine with ``tokenizers``) plus ``tokenizer_config.json``/``special_tokens_map.json`` so that
``transformers.AutoTokenizer`` (and thus vLLM) loads the same folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

EOS = "<|endoftext|>"
FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX, FIM_PAD, FILE_SEP = (
    "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|file_sep|>")
SPECIAL_TOKENS = [EOS, FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX, FIM_PAD, FILE_SEP]   # ids 0..5


def train_tokenizer(texts: Iterable[str], vocab_size: int = 8192) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=True)
    tok.train_from_iterator(texts, trainer)
    return tok


def save_tokenizer(tok: Tokenizer, folder: str | Path, model_max_length: int = 2048) -> None:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    added = {str(tok.token_to_id(t)): {"content": t, "special": True, "lstrip": False, "rstrip": False,
                                       "normalized": False, "single_word": False} for t in SPECIAL_TOKENS}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": model_max_length,
        "eos_token": EOS, "pad_token": EOS, "bos_token": None, "unk_token": None,
        "add_bos_token": False, "add_eos_token": False, "clean_up_tokenization_spaces": False,
        "additional_special_tokens": SPECIAL_TOKENS[1:], "added_tokens_decoder": added,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    (folder / "special_tokens_map.json").write_text(json.dumps(
        {"eos_token": EOS, "pad_token": EOS, "additional_special_tokens": SPECIAL_TOKENS[1:]}, indent=2) + "\n")


def load_tokenizer(folder: str | Path) -> Tokenizer:
    """The ``tokenizer.json`` of a model folder (the one loader for training, evaluation and both engines);
    FileNotFoundError naming the folder when it has none."""
    path = Path(folder) / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"{folder} has no tokenizer.json")
    return Tokenizer.from_file(str(path))


def main(argv: list[str] | None = None) -> int:
    """``python -m completer.models.tokenizer ARCHIVE OUT [--mb 30] [--vocab 8192]``: train the tokenizer on the first
    MB of a corpus archive (``python -m completer.models.corpus build``; its train files are shuffled across
    languages, so the first MB are a sample of the whole mix) and save it in OUT."""
    import argparse

    from .corpus import read_archive

    ap = argparse.ArgumentParser(prog="python -m completer.models.tokenizer", description=main.__doc__)
    ap.add_argument("archive")
    ap.add_argument("out")
    ap.add_argument("--mb", type=float, default=30.0)
    ap.add_argument("--vocab", type=int, default=8192)
    args = ap.parse_args(argv)
    tok = train_tokenizer((t for _, _, t in read_archive(args.archive, int(args.mb * 1e6))), vocab_size=args.vocab)
    save_tokenizer(tok, args.out)
    assert [tok.token_to_id(t) for t in SPECIAL_TOKENS] == list(range(len(SPECIAL_TOKENS)))
    print(f"{args.out}: {tok.get_vocab_size()} ids, specials {SPECIAL_TOKENS} = ids 0..{len(SPECIAL_TOKENS) - 1}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
