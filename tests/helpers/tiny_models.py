"""The model pairs tests run: a tiny random-weight pair built on the fly, and the shipped house pair.

The tiny tokenizer is a byte-level BPE trained in a second on a few standard-library files, with the house
special tokens. The tiny models get a sharp final norm so that their greedy choices are not near-ties (a random
model with flat logits would make "identical with and without speculation" a test of float rounding). The tiny
draft is the target with its later layers dropped, so that it agrees with the target part of the time.

The house pair's folder comes from ``completer.models.HOUSE_DIR`` (the one place the package looks), never from a
path worked out relative to this file: such a path once pointed outside the repository, and every test that
"ran the house pair when shipped" silently ran the tiny pair instead.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

import torch

from completer.engine import EngineConfig
from completer.engine.torch.engine import TorchEngine
from completer.models import HOUSE_DIR
from completer.models.llama import LlamaForCausalLM, ModelConfig

SPECIAL = ["<|endoftext|>", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>", "<|file_sep|>"]
HOUSE_NAMES = ("target", "draft")


def house_missing() -> list[str]:
    """The files of the shipped house pairs (v1: target, draft; v2, the default: v2/target, v2/draft, packed) that
    are not there (empty when both are complete)."""
    v1 = [HOUSE_DIR / n / f for n in HOUSE_NAMES for f in ("config.json", "model.safetensors", "tokenizer.json")]
    v2 = [HOUSE_DIR / "v2" / n / f for n in HOUSE_NAMES for f in ("config.json", "model.quant")]
    return [str(f) for f in v1 + v2 + [HOUSE_DIR / "v2" / "target" / "tokenizer.json"] if not f.is_file()]


def house_available() -> bool:
    return not house_missing()


def house_options() -> dict:
    """``initializationOptions.engine`` for the shipped house pair (house v2) on CPU: the tests' model (the embedded
    default is SmolLM2 where it is installed, ~10x the house target's compute per token)."""
    from completer.engine.config import HOUSE_DRAFT, HOUSE_MODEL

    return {"model": HOUSE_MODEL, "draft": HOUSE_DRAFT, "device": "cpu"}


def house_v1_options() -> dict:
    """The same for house v1 (``house:target`` + ``house:draft``), for tests whose expectations are v1's."""
    return {"model": "house:target", "draft": "house:draft", "device": "cpu"}


def house_tokenizer():
    """The shipped house tokenizer (``tokenizers.Tokenizer``); the pair shares it."""
    from tokenizers import Tokenizer

    path = HOUSE_DIR / "target" / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"the shipped house tokenizer is missing: {path}")
    return Tokenizer.from_file(str(path))


def train_tokenizer(path: Path, vocab_size: int = 400) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = [str(stdlib / n) for n in ("textwrap.py", "bisect.py", "heapq.py", "fnmatch.py")]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train(files, trainer)
    path.mkdir(parents=True, exist_ok=True)
    tok.save(str(path / "tokenizer.json"))


def random_lm(seed: int, sharp: float | None = None, **config) -> LlamaForCausalLM:
    """A random-weight model (``config``: ModelConfig fields over 4 query / 2 key-value heads, untied embeddings);
    ``sharp`` fills the final norm so that greedy choices are not near-ties."""
    model = LlamaForCausalLM(ModelConfig(**{"num_attention_heads": 4, "num_key_value_heads": 2,
                                            "tie_word_embeddings": False, **config}))
    model.init_weights(seed)
    if sharp is not None:
        with torch.no_grad():
            model.model.norm.weight.fill_(sharp)
    return model


def build_model(path: Path, tokenizer_dir: Path, *, hidden: int, layers: int, seed: int, sharp: float = 12.0,
                vocab: int = 400, max_positions: int = 1024) -> Path:
    model = random_lm(seed, sharp, vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 2,
                      num_hidden_layers=layers, max_position_embeddings=max_positions, eos_token_id=0)
    save(model, path, tokenizer_dir)
    return path


def save(model: LlamaForCausalLM, path: Path, tokenizer_dir: Path) -> None:
    model.save_pretrained(path, dtype=torch.float32)
    (path / "tokenizer.json").write_bytes((tokenizer_dir / "tokenizer.json").read_bytes())


def build_draft(path: Path, target_dir: Path, tokenizer_dir: Path, keep_layers: int = 1) -> Path:
    """A draft that agrees with the target part of the time: the target with its later layers dropped."""
    target = LlamaForCausalLM.from_pretrained(target_dir)
    cfg = ModelConfig(**{**target.config.__dict__, "num_hidden_layers": keep_layers})
    draft = LlamaForCausalLM(cfg)
    state = {k: v for k, v in target.state_dict().items()
             if not k.startswith("model.layers.") or int(k.split(".")[2]) < keep_layers}
    draft.load_state_dict(state, strict=False)
    save(draft, path, tokenizer_dir)
    return path


def tiny_pair(root: Path) -> tuple[Path, Path]:
    """Build the tiny (target, draft) pair under ``root`` (about a second on one core)."""
    train_tokenizer(root)
    target = build_model(root / "target", root, hidden=64, layers=2, seed=1)
    draft = build_draft(root / "draft", target, root)
    return target, draft


def tiny_options(root: Path) -> dict:
    """``initializationOptions.engine`` for a tiny pair built under ``root``."""
    target, draft = tiny_pair(root)
    return {"model": str(target), "draft": str(draft), "device": "cpu"}


def engine_factory(defaults: dict):
    """A factory of TorchEngines with ``defaults`` under the caller's overrides, and the closer for after the test."""
    made = []

    def factory(**kw) -> TorchEngine:
        eng = TorchEngine(EngineConfig(**{**defaults, **kw}))
        made.append(eng)
        return eng

    def close() -> None:
        for eng in made:
            eng._closed = True
            eng._pool.shutdown(wait=False)

    return factory, close
