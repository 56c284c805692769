"""The engine runs a checkpoint folder written by transformers (Qwen2 architecture, like Qwen2.5-Coder) and its
greedy output equals transformers' own greedy generation."""

import pytest
import torch

from completer.engine import EngineConfig, Request
from completer.engine.torch.engine import TorchEngine

transformers = pytest.importorskip("transformers")


async def test_transformers_qwen2_checkpoint_greedy_matches(tiny_pair, tmp_path):
    cfg = transformers.Qwen2Config(vocab_size=400, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                   tie_word_embeddings=False, eos_token_id=0)
    torch.manual_seed(0)
    hf = transformers.Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():
        hf.model.norm.weight.fill_(8.0)                     # peaked logits: no near-ties
    hf.save_pretrained(tmp_path, safe_serialization=True)
    (tmp_path / "tokenizer.json").write_bytes((tiny_pair[0] / "tokenizer.json").read_bytes())
    eng = TorchEngine(EngineConfig(model=str(tmp_path), speculation="ngram", num_speculative_tokens=3, device="cpu"))
    prompt = eng.encode("def add(a, b):\n    return a + b\n\ndef add(")
    ids = []
    async for c in eng.generate(Request("q", prompt, max_new_tokens=12)):
        ids.extend(c.token_ids)
    await eng.close()
    with torch.no_grad():
        out = hf.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False, eos_token_id=0,
                          pad_token_id=0)[0, len(prompt):].tolist()
    if 0 in out:
        out = out[:out.index(0)]
    assert ids == out
