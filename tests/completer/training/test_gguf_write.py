"""completer/training/gguf_write.py: the GGUF written for llama.cpp (bench/peer.py) holds the model's own weights and
config (read back with the project's GGUF loader)."""

from __future__ import annotations

import pytest
import torch

from completer.training.gguf_write import write_gguf
from completer.models.llama import LlamaForCausalLM


@pytest.mark.parametrize("qtype,tol", [("f32", 0.0), ("q8_0", 0.02)])
def test_gguf_written_for_llama_cpp_reads_back_as_the_same_model(tiny_pair, tmp_path, qtype, tol):
    pytest.importorskip("gguf")
    from completer.models.gguf import _reader, config_from_gguf, read_state_dict

    target = tiny_pair[0]
    path = write_gguf(target, tmp_path / f"t-{qtype}.gguf", qtype)
    model = LlamaForCausalLM.from_pretrained(target)
    cfg = config_from_gguf(_reader(path))
    for f in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "head_dim", "rope_theta", "tie_word_embeddings"):
        assert getattr(cfg, f) == getattr(model.config, f), f
    state = read_state_dict(path, cfg)                       # un-permutes q/k: the writer's permutation inverted
    for name, p in model.state_dict().items():
        if name == "lm_head.weight" and model.config.tie_word_embeddings:
            continue
        torch.testing.assert_close(state[name], p.float(), atol=tol * float(p.abs().max()), rtol=0)
