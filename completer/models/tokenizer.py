"""The house tokenizer's special tokens and the one tokenizer loader. The tokenizer is byte-level BPE trained on the
corpus (v1: Python; v2: the several-language archive; ``completer.training.tokenizer``), with Qwen2.5-Coder's FIM
special tokens.

Byte-level means every string round-trips (any whitespace, any Unicode). Saved as ``tokenizer.json`` (loaded by the
embedded engine with ``tokenizers``) plus ``tokenizer_config.json``/``special_tokens_map.json`` so that
``transformers.AutoTokenizer`` (and thus vLLM) loads the same folder.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer

from ..prompt import FIM_MIDDLE, FIM_PREFIX, FIM_SUFFIX

EOS, FIM_PAD, FILE_SEP = "<|endoftext|>", "<|fim_pad|>", "<|file_sep|>"
SPECIAL_TOKENS = [EOS, FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX, FIM_PAD, FILE_SEP]   # ids 0..5


def load_tokenizer(folder: str | Path) -> Tokenizer:
    """The ``tokenizer.json`` of a model folder (the one loader for training, evaluation and both engines);
    FileNotFoundError naming the folder when it has none."""
    path = Path(folder) / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"{folder} has no tokenizer.json")
    return Tokenizer.from_file(str(path))
