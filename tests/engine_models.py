"""The engine the end-to-end, editor and bench tests run: the shipped house pair when it is there, else a tiny random-weight pair.

The tiny pair (same recipe as tests/e2e) is built in about a second, so every client is exercised against the
real server and a real engine even before the house models land. ``engine_options(root)`` returns the
``initializationOptions.engine`` object the clients send.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

HOUSE = Path(__file__).resolve().parents[2] / "completer" / "models" / "house"
SPECIAL = ["<|endoftext|>", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>", "<|file_sep|>"]


def house_available() -> bool:
    return all((HOUSE / n / "model.safetensors").is_file() for n in ("target", "draft"))


def tiny_pair(root: Path) -> tuple[str, str]:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from completer.models.llama import LlamaForCausalLM, ModelConfig

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train([str(stdlib / n) for n in ("textwrap.py", "bisect.py")],
              trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    out = []
    for name, layers in (("target", 2), ("draft", 1)):
        cfg = ModelConfig(vocab_size=400, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                          eos_token_id=0, tie_word_embeddings=False)
        model = LlamaForCausalLM(cfg)
        model.init_weights(7)
        with torch.no_grad():
            model.model.norm.weight.fill_(12.0)
        model.save_pretrained(root / name, dtype=torch.float32)
        tok.save(str(root / name / "tokenizer.json"))
        out.append(str(root / name))
    return out[0], out[1]


def engine_options(root: Path) -> dict:
    if house_available():
        return {"model": "house:target", "draft": "house:draft", "device": "cpu"}
    target, draft = tiny_pair(root)
    return {"model": target, "draft": draft, "device": "cpu"}
