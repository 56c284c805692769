"""Fixtures: tiny random-weight model pairs built on the fly (fast, exhaustive checks) and the shipped house pair.

The tiny tokenizer is a byte-level BPE trained in a second on a few standard-library files, with the house
special tokens. The tiny models get a sharp final norm so that their greedy choices are not near-ties (a random
model with flat logits would make "identical with and without speculation" a test of float rounding).
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest
import torch

from completer.engine import EngineConfig
from completer.engine.torch_engine import TorchEngine
from completer.models.llama import LlamaForCausalLM, ModelConfig

SPECIAL = ["<|endoftext|>", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>", "<|file_sep|>"]
HOUSE = Path(__file__).resolve().parents[2] / "completer" / "models" / "house"


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
    tok.save(str(path / "tokenizer.json"))


def build_model(path: Path, tokenizer_dir: Path, *, hidden: int, layers: int, seed: int, sharp: float = 12.0,
                vocab: int = 400) -> Path:
    cfg = ModelConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      eos_token_id=0, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg)
    model.init_weights(seed)
    with torch.no_grad():
        model.model.norm.weight.fill_(sharp)
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


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("tiny")
    train_tokenizer(root)
    target = build_model(root / "target", root, hidden=64, layers=2, seed=1)
    draft = build_draft(root / "draft", target, root)
    return target, draft


def house_available() -> bool:
    return all((HOUSE / n / "model.safetensors").is_file() for n in ("target", "draft"))


def _engine_factory(defaults: dict):
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


@pytest.fixture
def make_engine(tiny_pair):
    """Factory: make_engine(**EngineConfig overrides) on the tiny pair, CPU; closed after the test."""
    factory, close = _engine_factory(dict(model=str(tiny_pair[0]), draft=str(tiny_pair[1]), device="cpu"))
    yield factory
    close()


@pytest.fixture
def house_engine():
    """Factory like make_engine, on the shipped house pair."""
    factory, close = _engine_factory({"device": "cpu"})
    yield factory
    close()


@pytest.fixture(scope="session")
def other_vocab_draft(tmp_path_factory) -> Path:
    """A draft whose tokenizer has another vocabulary (speculation with it must be refused)."""
    root = tmp_path_factory.mktemp("othervocab")
    train_tokenizer(root, vocab_size=300)
    return build_model(root / "draft", root, hidden=32, layers=1, seed=5, vocab=300)
