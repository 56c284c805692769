"""Write a Hugging Face Llama or Qwen2 folder (the house pair) as a GGUF file, so llama.cpp can run the same model.

The project's one GGUF writer: ``bench/peer.py`` puts the embedded engine next to llama.cpp with it, and
tests/completer/models/test_gguf.py writes its tiny Llama and Qwen2 files with it (per-part quantisation). The
converter that ships with llama.cpp (``convert_hf_to_gguf.py``) is not installed by ``pip install llama-cpp-python``
and refuses the house tokenizer's pre-tokenizer hash, so this writes the few things llama.cpp needs directly with
PyPI's ``gguf``: the architecture metadata, a byte-level BPE vocabulary (``gpt2`` model, GPT-2 pre-tokenizer, which
is what the house tokenizer's ``ByteLevel(use_regex=True)`` splits like), and the tensors under llama.cpp's names,
with Llama's q/k rows permuted to llama.cpp's interleaved RoPE layout (the inverse of
``completer.models.gguf._unpermute``).
Types: ``f32`` or ``q8_0`` (llama.cpp's 8-bit blocks; 1-D tensors and tensors whose rows are not a multiple of
32 stay f32, as llama.cpp's converter does), or a type per tensor part (``{"attn_q": Q8_0, "ffn_up": Q4_1, ...}``).

    python -m completer.training.gguf_write completer/models/house/target /tmp/target-f32.gguf --type f32
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


def tensor_type(quant: "str | dict", gname: str, a: np.ndarray):
    """The GGML type of tensor ``gname``: ``quant`` is ``"f32"``, ``"q8_0"`` (every matrix) or ``{part: type}`` by
    the name's part (``attn_q``, ``ffn_up``, ``output``, ...; the rest f32). Vectors, and matrices whose rows do not
    fill the type's blocks, stay f32 (as llama.cpp's converter does)."""
    import gguf

    Q = gguf.GGMLQuantizationType
    if isinstance(quant, dict):
        qtype = quant.get(gname.split(".")[-2], Q.F32)
    else:
        qtype = {"f32": Q.F32, "q8_0": Q.Q8_0}[quant]
    if a.ndim != 2 or a.shape[1] % gguf.GGML_QUANT_SIZES[qtype][0]:
        return Q.F32
    return qtype


def write_gguf(folder: str | Path, out: str | Path, quant: "str | dict" = "f32", model=None,
               pre: str = "gpt-2") -> Path:
    """The checkpoint in ``folder`` (or ``model``, a ``LlamaForCausalLM``, with that folder's tokenizer) as a GGUF
    file quantised as ``quant`` says (:func:`tensor_type`). Llama or Qwen2 (q/k/v biases, no row permutation);
    ``pre``: the pre-tokenizer name llama.cpp splits with (``gpt-2``, ``qwen2``)."""
    import gguf
    import torch

    Q = gguf.GGMLQuantizationType
    folder, out = Path(folder), Path(out)
    if isinstance(quant, str) and quant not in ("f32", "q8_0"):
        raise ValueError(f"type must be f32 or q8_0, got {quant!r}")
    cfg_json = json.loads((folder / "config.json").read_text())
    if model is None:
        from safetensors.torch import load_file

        config = ModelConfig.from_hf(cfg_json)
        state: dict[str, torch.Tensor] = {}
        for f in sorted(folder.glob("*.safetensors")):
            state.update(load_file(str(f)))
    else:
        config, state = model.config, model.state_dict()
    arch = config.model_type
    if arch not in ("llama", "qwen2"):
        raise ValueError(f"only Llama and Qwen2 models are written, not {arch!r}")
    tok = json.loads((folder / "tokenizer.json").read_text())
    if tok["model"]["type"] != "BPE" or tok.get("pre_tokenizer", {}).get("type") != "ByteLevel":
        raise ValueError("only byte-level BPE tokenizers are written")

    w = gguf.GGUFWriter(str(out), arch)
    w.add_name(folder.name)
    for key, field in (("context_length", "max_position_embeddings"), ("embedding_length", "hidden_size"),
                       ("block_count", "num_hidden_layers"), ("feed_forward_length", "intermediate_size"),
                       ("head_count", "num_attention_heads"), ("head_count_kv", "num_key_value_heads"),
                       ("rope_dimension_count", "head_dim"), ("key_length", "head_dim"), ("value_length", "head_dim"),
                       ("rope_freq_base", "rope_theta"), ("layer_norm_rms_eps", "rms_norm_eps"),
                       ("vocab_size", "vocab_size")):
        getattr(w, f"add_{key}")(getattr(config, field))      # the architecture's metadata, llama.cpp's keys
    w.add_file_type({"f32": gguf.LlamaFileType.ALL_F32, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}.get(
        quant, gguf.LlamaFileType.MOSTLY_F16) if isinstance(quant, str) else gguf.LlamaFileType.MOSTLY_F16)

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
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types([TOKEN_CONTROL if i in special else TOKEN_NORMAL for i in range(len(tokens))])
    w.add_token_merges(merges)
    for key, add in (("bos_token_id", w.add_bos_token_id), ("eos_token_id", w.add_eos_token_id)):
        if isinstance(cfg_json.get(key), int):
            add(cfg_json[key])
    w.add_add_bos_token(False)

    for name, t in state.items():
        if config.tie_word_embeddings and name == "lm_head.weight":
            continue
        a = t.detach().float().numpy()
        if arch == "llama" and name.endswith("self_attn.q_proj.weight"):
            a = permute(a, config.num_attention_heads)
        elif arch == "llama" and name.endswith("self_attn.k_proj.weight"):
            a = permute(a, config.num_key_value_heads)
        gname = gguf_name(name)
        qtype = tensor_type(quant, gname, a)
        if qtype == Q.F32:
            w.add_tensor(gname, np.ascontiguousarray(a, dtype=np.float32))
        elif qtype == Q.F16:
            w.add_tensor(gname, a.astype(np.float16))
        else:
            w.add_tensor(gname, gguf.quants.quantize(a, qtype), raw_dtype=qtype)
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
