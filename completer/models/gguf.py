"""GGUF files (what Ollama, LM Studio and llama.cpp users have on disk) in the embedded engine.

Why a folder: everything downstream of ``resolve_model`` (the engines, the FIM template guess, the draft/target
vocabulary check, the benchmarks) reads a Hugging Face-style folder. ``materialise(path)`` writes a small one into
the cache -- ``config.json`` (with the template the model needs), ``tokenizer.json`` built from the GGUF metadata,
``tokenizer_config.json``, and ``model.gguf``, a symlink to the file -- so no dequantised copy of the weights is
ever written; ``LlamaForCausalLM.from_pretrained`` reads the weights through ``read_state_dict`` when the folder has
no safetensors.

Weights: dequantised with the ``gguf`` package (any type it knows: F32/F16/BF16, Q4_0/Q4_1/Q5_x/Q8_0, K-quants) to
float32, under Hugging Face parameter names. llama.cpp's converter permutes the rows of ``attn_q``/``attn_k`` of
Llama-architecture models for its interleaved RoPE; ``_unpermute`` undoes that so the rotate-half RoPE of
``llama.py`` applies (Qwen2 files are not permuted). Tokenizer: byte-level BPE (``tokenizer.ggml.model == "gpt2"``)
from ``tokenizer.ggml.tokens``/``merges``, with the pre-tokenizer split that llama.cpp uses for the file's
``tokenizer.ggml.pre`` (e.g. SmolLM/StarCoder split digits one by one); an unknown ``pre`` is a clear error rather
than a silently different tokenisation.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from ..prompt import FIM_PREFIX
from .config import ModelConfig

# llama.cpp's pre-tokenizer regexes (llama-vocab.cpp) by ``tokenizer.ggml.pre``; None = GPT-2's own (ByteLevel).
_GPT2 = None
_LLAMA3 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_DIGITS_THEN_GPT2 = "digits"
PRE_TOKENIZERS = {
    "default": _GPT2, "gpt-2": _GPT2, "gpt2": _GPT2, "phi-2": _GPT2, "jina-es": _GPT2, "jina-de": _GPT2,
    "llama3": _LLAMA3, "llama-v3": _LLAMA3, "llama-bpe": _LLAMA3, "smaug-bpe": _LLAMA3, "dbrx": _LLAMA3,
    "falcon3": _LLAMA3,
    "qwen2": _QWEN2, "deepseek-r1-qwen": _QWEN2,
    "smollm": _DIGITS_THEN_GPT2, "starcoder": _DIGITS_THEN_GPT2, "refact": _DIGITS_THEN_GPT2,
    "codeshell": _DIGITS_THEN_GPT2, "command-r": _DIGITS_THEN_GPT2,
}
ARCHITECTURES = {"llama": "llama", "qwen2": "qwen2"}       # GGUF general.architecture -> llama.py model_type
FIM_MARKERS = (FIM_PREFIX, "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>")
TOKEN_CONTROL, TOKEN_USER_DEFINED = 3, 4                   # tokenizer.ggml.token_type values


class GGUFError(ValueError):
    """The file is not a GGUF model this engine can run (architecture, tokenizer or tensor layout)."""


def _reader(path: str | Path):
    try:
        import gguf
    except ImportError as e:  # a declared dependency; only a broken install lacks it
        raise GGUFError("reading GGUF files needs the 'gguf' package (pip install gguf)") from e
    try:
        return gguf.GGUFReader(str(path))
    except Exception as e:  # truncated file, not GGUF at all
        raise GGUFError(f"{path} is not a readable GGUF file: {type(e).__name__}: {e}") from e


def _meta(reader) -> dict:
    """Scalar and string metadata as Python values; the long token arrays stay in the reader."""
    out = {}
    for key, field in reader.fields.items():
        if key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type",
                   "tokenizer.ggml.scores"):
            continue
        try:
            out[key] = field.contents()
        except Exception:  # noqa: BLE001 -- exotic field types are not needed here
            pass
    return out


def config_from_gguf(reader, meta: dict | None = None) -> ModelConfig:
    meta = meta if meta is not None else _meta(reader)
    arch = meta.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise GGUFError(f"GGUF architecture {arch!r} is not supported by the embedded engine "
                        f"(supported: {', '.join(ARCHITECTURES)})")
    scaling = meta.get(f"{arch}.rope.scaling.type")
    if scaling not in (None, "none"):
        raise GGUFError(f"GGUF rope scaling {scaling!r} is not supported by the embedded engine")
    g = lambda k, default=None: meta.get(f"{arch}.{k}", default)  # noqa: E731
    hidden, heads = int(g("embedding_length")), int(g("attention.head_count"))
    names = {t.name for t in reader.tensors}
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    vocab = g("vocab_size") or (len(tokens.data) if tokens is not None else None)
    if vocab is None:
        raise GGUFError("GGUF file names no vocabulary size and has no tokenizer.ggml.tokens")
    head_dim = g("attention.key_length") or g("rope.dimension_count") or hidden // heads
    eos = meta.get("tokenizer.ggml.eos_token_id")
    return ModelConfig(
        vocab_size=int(vocab), hidden_size=hidden, intermediate_size=int(g("feed_forward_length")),
        num_hidden_layers=int(g("block_count")), num_attention_heads=heads,
        num_key_value_heads=int(g("attention.head_count_kv", heads)), head_dim=int(head_dim),
        max_position_embeddings=int(g("context_length", 2048)),
        rms_norm_eps=float(g("attention.layer_norm_rms_epsilon", 1e-5)),
        rope_theta=float(g("rope.freq_base", 10000.0)),
        tie_word_embeddings="output.weight" not in names,
        attention_bias=ARCHITECTURES[arch] == "qwen2", model_type=ARCHITECTURES[arch],
        bos_token_id=meta.get("tokenizer.ggml.bos_token_id"), eos_token_id=None if eos is None else int(eos))


_LAYER_NAMES = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
}
_TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}


def hf_name(name: str) -> str | None:
    """GGUF tensor name -> Hugging Face parameter name (None for tensors the model does not use, e.g. rope_freqs)."""
    base, _, kind = name.rpartition(".")                      # kind: weight | bias
    if base.startswith("blk."):
        _, layer, part = base.split(".", 2)
        return f"model.layers.{layer}.{_LAYER_NAMES[part]}.{kind}" if part in _LAYER_NAMES else None
    return f"{_TOP_NAMES[base]}.{kind}" if base in _TOP_NAMES else None


def _unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's ``permute`` of q/k rows (interleaved RoPE pairs -> Hugging Face's rotate-half halves)."""
    dim = w.shape[0] // n_head // 2
    return w.reshape(n_head, dim, 2, *w.shape[1:]).swapaxes(2, 1).reshape(w.shape)


def read_state_dict(path: str | Path, config: ModelConfig | None = None, keep_blocks: bool = False):
    """Every weight of the GGUF file, dequantised to float32, under llama.py's (= Hugging Face's) names.

    With ``keep_blocks``: ``(state, blocks)``, where ``blocks`` holds the matmul weights as the file's own blocks
    (name -> ``(u, d, m, bits)``, see ``blocks.gguf_blocks``; q/k rows un-permuted as the float32 ones) when every
    2-D weight is of a type the engine's block kernel reads (Q4_0, Q4_1, Q8_0), else ``{}`` and all of ``state``."""
    from gguf.quants import dequantize

    from .blocks import GGUF_BLOCKS, gguf_blocks

    reader = _reader(path)
    meta = _meta(reader)
    config = config or config_from_gguf(reader, meta)
    permuted = meta.get("general.architecture") == "llama"
    state: dict[str, torch.Tensor] = {}
    blocks: dict[str, tuple] = {}
    matrices = [t for t in reader.tensors if hf_name(t.name) is not None and len(t.shape) == 2]
    keep = keep_blocks and bool(matrices) and all(t.tensor_type.name in GGUF_BLOCKS for t in matrices)
    for t in reader.tensors:
        name = hf_name(t.name)
        if name is None:
            continue
        shape = tuple(int(d) for d in reversed(t.shape))         # GGUF lists dims innermost first
        if keep and len(shape) == 2:
            u, d, m, bits = gguf_blocks(t.data, t.tensor_type.name, *shape)
            heads = (config.num_attention_heads if ".q_proj." in name
                     else config.num_key_value_heads if ".k_proj." in name else None)
            if permuted and heads:
                u, d, m = (torch.from_numpy(np.ascontiguousarray(_unpermute(a.numpy(), heads))) for a in (u, d, m))
            blocks[name] = (u, d, m, bits)
            continue
        try:
            w = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(shape)
        except (NotImplementedError, ValueError) as e:
            raise GGUFError(f"cannot dequantise {t.name} ({t.tensor_type.name}) in {path}: {e}") from e
        if permuted and ".q_proj." in name:
            w = _unpermute(w, config.num_attention_heads)
        elif permuted and ".k_proj." in name:
            w = _unpermute(w, config.num_key_value_heads)
        state[name] = torch.from_numpy(w if w.flags.writeable else w.copy())   # F32 tensors are read-only maps
    return (state, blocks) if keep_blocks else state


BLOCKS_FILE = "blocks-v1.pt"     # the kernel layout's version: a new layout gets a new name


def block_weights(folder: str | Path, config: ModelConfig) -> tuple[dict[str, torch.Tensor], dict[str, dict]]:
    """``(state, packed)`` for the cached folder of a GGUF file: ``packed`` the matmul weights in the layout of the
    engine's block kernel (``blocks.pack_q``), by matmul -- ``model.layers.{i}.qkv`` / ``.o`` / ``.gate_up`` /
    ``.down``, ``embed``, ``head`` (untied) -- each {"w", "wd", "wm", "bits", "rows", "cols"}; ``state`` the rest
    (norms, biases) in float32. ``packed`` is empty (and ``state`` everything) when a matrix is of another type.

    Made from the GGUF once and kept in the folder (``BLOCKS_FILE``, about the file's size), memory-mapped at later
    starts: no parse of the GGUF's metadata (its 49k-token vocabulary left ~80 MB of freed-but-fragmented heap
    behind) and no repacking, and the weights are file pages the OS shares and can drop, as llama.cpp's mmap."""
    folder = Path(folder)
    cached = folder / BLOCKS_FILE
    if cached.is_file():
        saved = torch.load(cached, mmap=True, weights_only=True)
        return saved["state"], saved["packed"]
    state, raw = read_state_dict(folder / "model.gguf", config, keep_blocks=True)
    if not raw:
        return state, {}
    packed = _pack_blocks(raw, config)
    tmp = cached.with_name(f".{cached.name}.{os.getpid()}")
    try:
        torch.save({"state": state, "packed": packed}, tmp)
        os.replace(tmp, cached)
    except OSError:                  # a read-only cache: the next start packs again
        tmp.unlink(missing_ok=True)
    return state, packed


def _pack_blocks(raw: dict[str, tuple], config: ModelConfig) -> dict[str, dict]:
    from .blocks import pack_q

    def entry(parts: list[tuple]) -> dict:
        # 4-bit values are 8-bit values too: a stack of mixed widths (a file with attn_v in Q8_0) is 8-bit
        u, d, m = (torch.cat([p[i] for p in parts]) for i in range(3))
        bits = max(p[3] for p in parts)
        w, wd, wm = pack_q(u, d, m, bits)
        return {"w": w, "wd": wd, "wm": wm, "bits": bits, "rows": u.shape[0], "cols": u.shape[1]}

    out = {}
    for i in range(config.num_hidden_layers):
        pre = f"model.layers.{i}."
        out[pre + "qkv"] = entry([raw[pre + f"self_attn.{p}_proj.weight"] for p in "qkv"])
        out[pre + "o"] = entry([raw[pre + "self_attn.o_proj.weight"]])
        out[pre + "gate_up"] = entry([raw[pre + "mlp.gate_proj.weight"], raw[pre + "mlp.up_proj.weight"]])
        out[pre + "down"] = entry([raw[pre + "mlp.down_proj.weight"]])
    out["embed"] = entry([raw["model.embed_tokens.weight"]])
    if not config.tie_word_embeddings:
        out["head"] = entry([raw["lm_head.weight"]])
    return out


def build_tokenizer(reader, meta: dict | None = None):
    """A ``tokenizers.Tokenizer`` equal to the model's own, from the GGUF tokenizer metadata."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

    meta = meta if meta is not None else _meta(reader)
    kind = meta.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise GGUFError(f"GGUF tokenizer model {kind!r} is not supported (only byte-level BPE, 'gpt2')")
    pre = meta.get("tokenizer.ggml.pre", "default")
    if pre not in PRE_TOKENIZERS:
        raise GGUFError(f"GGUF pre-tokenizer {pre!r} is not supported (known: {', '.join(sorted(PRE_TOKENIZERS))})")
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    merges_field = reader.fields.get("tokenizer.ggml.merges")
    if merges_field is None:
        raise GGUFError("GGUF byte-level BPE tokenizer without tokenizer.ggml.merges")
    merges = [tuple(m.split(" ", 1)) for m in merges_field.contents()]
    types_field = reader.fields.get("tokenizer.ggml.token_type")
    types = types_field.contents() if types_field is not None else [1] * len(tokens)
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges, fuse_unk=False,
                               byte_fallback=False, ignore_merges=False))
    split = PRE_TOKENIZERS[pre]
    if split is None:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    elif split == _DIGITS_THEN_GPT2:
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                     pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(split), behavior="isolated"),
                                                     pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    special = [t for t, ty in zip(tokens, types) if ty in (TOKEN_CONTROL, TOKEN_USER_DEFINED)]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    bos = meta.get("tokenizer.ggml.bos_token_id")
    if meta.get("tokenizer.ggml.add_bos_token") and bos is not None:
        tok.post_processor = processors.TemplateProcessing(single=f"{tokens[bos]} $A", pair=f"{tokens[bos]} $A $B",
                                                           special_tokens=[(tokens[bos], int(bos))])
    return tok


def _fingerprint(path: Path) -> str:
    st = path.stat()
    return hashlib.sha1(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|v1".encode()).hexdigest()[:12]


def cache_root() -> Path:
    env = os.environ.get("COMPLETER_CACHE")
    base = Path(env) if env else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "completer"
    return base / "gguf"


@contextlib.contextmanager
def building(folder: Path, what: str, error: type[Exception]) -> Iterator[Path]:
    """Fill a temporary sibling of cache folder ``folder`` (the ``with`` body), then move it into place at once, so
    that no process ever sees a half-written folder; when another process made ``folder`` first, theirs is kept (it
    is the same). An unwritable cache is ``error`` naming ``what`` and the COMPLETER_CACHE setting."""
    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
    try:
        tmp.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise error(f"cannot write {what} under {tmp.parent} ({e.strerror}); "
                    f"set COMPLETER_CACHE to a writable folder") from e
    yield tmp
    try:
        tmp.rename(folder)
    except OSError:  # another process made it first: theirs is the same
        shutil.rmtree(tmp, ignore_errors=True)


def materialise(path: str | Path, root: str | Path | None = None) -> Path:
    """The model folder for a GGUF file (made once per file version in the cache, a few MB: no weights)."""
    path = Path(path).expanduser()
    folder = Path(root or cache_root()) / f"{path.stem}-{_fingerprint(path)}"
    if (folder / "config.json").is_file() and (folder / "model.gguf").exists():
        return folder
    reader = _reader(path)
    meta = _meta(reader)
    config = config_from_gguf(reader, meta)
    tok = build_tokenizer(reader, meta)
    with building(folder, f"the model folder for {path.name}", GGUFError) as tmp:
        _write_folder(tmp, path, reader, meta, config, tok)
    return folder


def _write_folder(tmp: Path, path: Path, reader, meta: dict, config: ModelConfig, tok) -> None:
    """The cached folder's files for GGUF ``path``: tokenizer, configs and a link to the file (no weights)."""
    tok.save(str(tmp / "tokenizer.json"))
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    names = {t.content for t in tok.get_added_tokens_decoder().values()}
    cfg = config.to_hf()
    cfg.update(torch_dtype="float32", completer_gguf=str(path.resolve()), name=meta.get("general.name"),
               completer_template=None if any(m in names for m in FIM_MARKERS) else "plain")
    if cfg["completer_template"] is None:
        del cfg["completer_template"]                          # FIM tokens present: let the template guess decide
    (tmp / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    tid = lambda k: tokens[meta[k]] if meta.get(k) is not None else None  # noqa: E731
    (tmp / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": config.max_position_embeddings,
        "bos_token": tid("tokenizer.ggml.bos_token_id"), "eos_token": tid("tokenizer.ggml.eos_token_id"),
        "unk_token": tid("tokenizer.ggml.unknown_token_id"), "pad_token": tid("tokenizer.ggml.padding_token_id"),
        "add_bos_token": bool(meta.get("tokenizer.ggml.add_bos_token")), "add_eos_token": False,
        "clean_up_tokenization_spaces": False}, indent=2) + "\n")
    (tmp / "model.gguf").symlink_to(path.resolve())
