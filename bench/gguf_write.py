"""Write a Hugging Face Llama folder (the house pair) as a GGUF file, so llama.cpp can run the same model.

Benchmark-only (``bench/peer.py`` puts the embedded engine next to llama.cpp): the converter that ships with
llama.cpp (``convert_hf_to_gguf.py``) is not installed by ``pip install llama-cpp-python`` and refuses the house
tokenizer's pre-tokenizer hash, so this writes the few things llama.cpp needs directly with PyPI's ``gguf``:
the architecture metadata, a byte-level BPE vocabulary (``gpt2`` model, GPT-2 pre-tokenizer, which is what the
house tokenizer's ``ByteLevel(use_regex=True)`` splits like), and the tensors under llama.cpp's names, with q/k
rows permuted to llama.cpp's interleaved RoPE layout (the inverse of ``completer.models.gguf._unpermute``).
Types: ``f32`` or ``q8_0`` (llama.cpp's 8-bit blocks; 1-D tensors and tensors whose rows are not a multiple of
32 stay f32, as llama.cpp's converter does).

    python bench/gguf_write.py completer/models/house/target /tmp/target-f32.gguf --type f32
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from completer.models.llama import ModelConfig

NAMES = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
         "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
         "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
TOP = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}
TOKEN_NORMAL, TOKEN_CONTROL = 1, 3


def gguf_name(hf: str) -> str:
    base, _, kind = hf.rpartition(".")
    if base.startswith("model.layers."):
        _, _, layer, part = base.split(".", 3)
        return f"blk.{layer}.{NAMES[part]}.{kind}"
    return f"{TOP[base]}.{kind}"


def permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Hugging Face rotate-half rows -> llama.cpp interleaved pairs (what llama.cpp's converter does)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(folder: str | Path, out: str | Path, qtype: str = "f32") -> Path:
    import gguf
    import torch
    from safetensors.torch import load_file

    folder, out = Path(folder), Path(out)
    if qtype not in ("f32", "q8_0"):
        raise ValueError(f"type must be f32 or q8_0, got {qtype!r}")
    cfg_json = json.loads((folder / "config.json").read_text())
    config = ModelConfig.from_hf(cfg_json)
    if config.model_type != "llama":
        raise ValueError("only Llama-architecture folders are written (the house pair)")
    tok = json.loads((folder / "tokenizer.json").read_text())
    if tok["model"]["type"] != "BPE" or tok.get("pre_tokenizer", {}).get("type") != "ByteLevel":
        raise ValueError("only byte-level BPE tokenizers are written")
    state: dict[str, torch.Tensor] = {}
    for f in sorted(folder.glob("*.safetensors")):
        state.update(load_file(str(f)))

    w = gguf.GGUFWriter(str(out), "llama")
    w.add_name(folder.name)
    w.add_context_length(config.max_position_embeddings)
    w.add_embedding_length(config.hidden_size)
    w.add_block_count(config.num_hidden_layers)
    w.add_feed_forward_length(config.intermediate_size)
    w.add_head_count(config.num_attention_heads)
    w.add_head_count_kv(config.num_key_value_heads)
    w.add_rope_dimension_count(config.head_dim)
    w.add_key_length(config.head_dim)
    w.add_value_length(config.head_dim)
    w.add_rope_freq_base(config.rope_theta)
    w.add_layer_norm_rms_eps(config.rms_norm_eps)
    w.add_vocab_size(config.vocab_size)
    w.add_file_type(gguf.LlamaFileType.ALL_F32 if qtype == "f32" else gguf.LlamaFileType.MOSTLY_Q8_0)

    vocab = tok["model"]["vocab"]
    special = {a["id"] for a in tok.get("added_tokens", []) if a.get("special")}
    for a in tok.get("added_tokens", []):
        vocab.setdefault(a["content"], a["id"])
    tokens = [""] * config.vocab_size
    for t, i in vocab.items():
        if i < config.vocab_size:
            tokens[i] = t
    for i, t in enumerate(tokens):
        if not t:
            tokens[i] = f"[PAD{i}]"
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types([TOKEN_CONTROL if i in special else TOKEN_NORMAL for i in range(len(tokens))])
    w.add_token_merges(merges)
    eos = cfg_json.get("eos_token_id")
    if isinstance(eos, int):
        w.add_eos_token_id(eos)
    w.add_add_bos_token(False)

    for name, t in state.items():
        if config.tie_word_embeddings and name == "lm_head.weight":
            continue
        a = t.float().numpy()
        if name.endswith("self_attn.q_proj.weight"):
            a = permute(a, config.num_attention_heads)
        elif name.endswith("self_attn.k_proj.weight"):
            a = permute(a, config.num_key_value_heads)
        if qtype == "q8_0" and a.ndim == 2 and a.shape[1] % 32 == 0:
            w.add_tensor(gguf_name(name), gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0),
                         raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(gguf_name(name), np.ascontiguousarray(a, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder")
    ap.add_argument("out")
    ap.add_argument("--type", default="f32", choices=["f32", "q8_0"])
    a = ap.parse_args()
    print(write_gguf(a.folder, a.out, a.type))


if __name__ == "__main__":
    main()
