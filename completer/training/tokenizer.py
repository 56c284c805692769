"""Training the house tokenizer: byte-level BPE on the corpus archive, with Qwen2.5-Coder's FIM special tokens
(ids 0..5), saved so that the embedded engine (``tokenizers``) and ``transformers.AutoTokenizer`` (thus vLLM) load the
same folder. Loading is ``completer.models.tokenizer.load_tokenizer``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from ..models.tokenizer import EOS, SPECIAL_TOKENS


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


def main(argv: list[str] | None = None) -> int:
    """``python -m completer.training.tokenizer ARCHIVE OUT [--mb 30] [--vocab 8192]``: train the tokenizer on the first
    MB of a corpus archive (``python -m completer.training.corpus build``; its train files are shuffled across
    languages, so the first MB are a sample of the whole mix) and save it in OUT."""
    import argparse

    from .corpus import read_archive

    ap = argparse.ArgumentParser(prog="python -m completer.training.tokenizer", description=main.__doc__)
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
