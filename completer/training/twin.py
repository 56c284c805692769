"""Cost twins: a house model zero-padded to a large model's shape, computing the same function.

    completer twin --target house:v2/target --drafter house:v2/eagle3 --draft house:v2/draft --shape 7b --out DIR

writes ``DIR/target`` (Qwen2.5-Coder-7B's shape: hidden 3584, 28 layers, 28 query heads and 4 KV heads of 128, MLP
18944), ``DIR/eagle3`` (the EAGLE-3 drafter at that width) and ``DIR/draft`` (``--draft-shape``, default
Qwen2.5-Coder-0.5B's: hidden 896, 24 layers, 14 heads and 2 KV heads of 64, MLP 4864) as ordinary Hugging Face
folders (config.json, safetensors shards, tokenizer) that vLLM and transformers load. Every matmul of a twin runs at
the large shape, so a step costs what a 7B step costs, while its tokens are the house model's up to rounding: the
house drafters are accepted on the twin as often as on the house model. Why each part keeps the function
(``../shared/cost-twin.md``):

- residual stream d -> D: embedding (and an untied head) get zero columns; the new dimensions stay zero everywhere;
- RMSNorm: weight x sqrt(d/D) and eps x d/D (the mean of squares over D dims is d/D of the mean over d);
- head dim h -> h': q/k dims i < h/2 stay at i, dims h/2 + i go to h'/2 + i (rotate-half pairs stay pairs), rope
  theta -> theta^(h'/h) (so theta'^(-2i/h') = theta^(-2i/h)), q x sqrt(h'/h) (the 1/sqrt(head dim) scale);
  v's h real dims are the first h of h', o_proj reads them back;
- query heads: source head j of KV group g goes to twin head g * r' + j (r' = twin heads per KV head), KV head g to g;
  all other heads are zero (they attend uniformly, but their o_proj columns are zero);
- MLP: new gate/up rows and down columns zero (SiLU(0) * 0 = 0); new layers: zero but their norms, appended after
  the last real one (so an EAGLE-3 drafter's aux layer ids still name the same residual streams);
- EAGLE-3 drafter: its fc reads 3 x D target features (each real block in the first d columns of its D), its layer
  2 x D inputs (embedding | fc output), padded like a target layer; d2t/t2d as they were.

Not padded: the vocabulary (8192 for house v2, ~152k for the real 7B, whose head is ~7% of its weights): a padded
head would need the new logits kept from winning, which zero rows do not guarantee. Figures measured on a twin say so.
bf16 rounds the scaled norms and q differently and sums over more (zero) terms in another order, so bf16 output can
drift from the house model's after many tokens; in fp32 the twin equals it to rounding (tests/completer/test_twin.py).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json")
MAX_SHARD_BYTES = 4 << 30


@dataclass(frozen=True)
class Shape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    mlp: int

    def params(self, vocab: int, tied: bool = True) -> int:
        attn = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        return vocab * self.hidden * (1 if tied else 2) + self.layers * (attn + 3 * self.hidden * self.mlp
                                                                         + 2 * self.hidden) + self.hidden


# Qwen2.5-Coder-7B and -0.5B (config.json of Qwen/Qwen2.5-Coder-7B and -0.5B), less their q/k/v biases and vocabulary
PRESETS = {"7b": Shape(hidden=3584, layers=28, heads=28, kv_heads=4, head_dim=128, mlp=18944),
           "0.5b": Shape(hidden=896, layers=24, heads=14, kv_heads=2, head_dim=64, mlp=4864)}
KEYS = {"hidden": "hidden_size", "layers": "num_hidden_layers", "heads": "num_attention_heads",
        "kv_heads": "num_key_value_heads", "head_dim": "head_dim", "mlp": "intermediate_size"}


def source_shape(cfg: dict) -> Shape:
    return Shape(hidden=cfg["hidden_size"], layers=cfg.get("num_hidden_layers", 1), heads=cfg["num_attention_heads"],
                 kv_heads=cfg.get("num_key_value_heads", cfg["num_attention_heads"]),
                 head_dim=cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"],
                 mlp=cfg["intermediate_size"])


def parse_shape(spec: str, src: Shape) -> Shape:
    """``7b`` | ``0.5b`` | ``WxL`` (hidden W, L layers; head dim and KV heads as the source's, heads W / head dim,
    MLP scaled with the width) | ``hidden=..,layers=..,heads=..,kv_heads=..,head_dim=..,mlp=..`` (any subset; the
    rest as ``WxL`` derives it)."""
    spec = spec.strip().lower()
    if spec in PRESETS:
        return PRESETS[spec]
    kw: dict[str, int] = {}
    try:
        if "=" in spec:
            for part in spec.split(","):
                k, v = part.split("=")
                if k.strip() not in KEYS:
                    raise ValueError(f"unknown key {k.strip()!r} (keys: {', '.join(KEYS)})")
                kw[k.strip()] = int(v)
        else:
            w, l = spec.split("x")
            kw = {"hidden": int(w), "layers": int(l)}
    except ValueError as e:
        raise ValueError(f"--shape {spec!r}: expected 7b, 0.5b, WxL or key=value,...: {e}") from None
    hidden = kw.get("hidden", src.hidden)
    hd = kw.get("head_dim", src.head_dim)
    return Shape(hidden=hidden, layers=kw.get("layers", src.layers), heads=kw.get("heads", hidden // hd),
                 kv_heads=kw.get("kv_heads", src.kv_heads), head_dim=hd,
                 mlp=kw.get("mlp", src.mlp * hidden // src.hidden))


def check_fits(src: Shape, dst: Shape, what: str) -> None:
    r, r2 = src.heads // src.kv_heads, dst.heads // max(dst.kv_heads, 1)
    problems = [f"{k} {getattr(dst, k)} < the source's {getattr(src, k)}"
                for k in ("hidden", "layers", "head_dim", "mlp", "kv_heads") if getattr(dst, k) < getattr(src, k)]
    if dst.kv_heads < 1 or dst.heads % dst.kv_heads:
        problems.append(f"{dst.heads} query heads do not split into {dst.kv_heads} KV groups")
    elif r2 < r:
        problems.append(f"{r2} query heads per KV head < the source's {r}")
    if dst.head_dim % 2:
        problems.append(f"head dim {dst.head_dim} is odd")
    if problems:
        raise ValueError(f"{what}: cannot pad {src} to {dst}: " + "; ".join(problems))


class Padder:
    """Index maps and scales from a source shape to a twin shape (the table of ``../shared/cost-twin.md``)."""

    def __init__(self, src: Shape, dst: Shape):
        check_fits(src, dst, "shape")
        self.src, self.dst = src, dst
        self.norm_scale = math.sqrt(src.hidden / dst.hidden)
        self.q_scale = math.sqrt(dst.head_dim / src.head_dim)
        h, h2 = src.head_dim, dst.head_dim
        i = torch.arange(h)
        rot = torch.where(i < h // 2, i, i - h // 2 + h2 // 2)      # q/k: rotate-half pairs stay pairs
        r, r2 = src.heads // src.kv_heads, dst.heads // dst.kv_heads
        qheads = torch.tensor([(j // r) * r2 + j % r for j in range(src.heads)])
        self.q_rows = (qheads[:, None] * h2 + rot[None, :]).reshape(-1)           # source q rows -> twin rows
        self.k_rows = (torch.arange(src.kv_heads)[:, None] * h2 + rot[None, :]).reshape(-1)
        self.v_rows = (torch.arange(src.kv_heads)[:, None] * h2 + i[None, :]).reshape(-1)
        self.o_cols = (qheads[:, None] * h2 + i[None, :]).reshape(-1)             # v's dims, read back by o_proj

    def place(self, w: torch.Tensor, shape: tuple[int, ...], rows=None, cols=None, scale: float = 1.0) -> torch.Tensor:
        """A zero tensor of ``shape`` holding ``w`` (× scale) at rows ``rows`` (default the first ones) and columns
        ``cols`` (an index tensor, or default the first ones)."""
        out = torch.zeros(shape, dtype=torch.float32)
        w = w.float() * scale
        if w.ndim == 1:
            out[: w.shape[0]] = w
            return out
        rows = torch.arange(w.shape[0]) if rows is None else rows
        cols = torch.arange(w.shape[1]) if cols is None else cols
        out[rows[:, None], cols[None, :]] = w
        return out

    def norm(self, w: torch.Tensor | None, dim: int | None = None) -> torch.Tensor:
        """RMSNorm weight: the real dims × sqrt(d/D); the new ones the same scale (they multiply zeros)."""
        out = torch.full((dim or self.dst.hidden,), self.norm_scale)
        if w is not None:
            out[: w.shape[0]] = w.float() * self.norm_scale
        return out

    def attention(self, get, prefix: str, in_cols: torch.Tensor | None, in_dim: int) -> dict[str, torch.Tensor]:
        """q/k/v/o of one attention block (``get(name)`` reads a source tensor or None); inputs at ``in_cols`` of
        ``in_dim`` (default the first columns of the twin's hidden size)."""
        s, d = self.src, self.dst
        out = {}
        for name, rows, n, scale in (("q", self.q_rows, d.heads, self.q_scale), ("k", self.k_rows, d.kv_heads, 1.0),
                                     ("v", self.v_rows, d.kv_heads, 1.0)):
            out[f"{prefix}.{name}_proj.weight"] = self.place(get(f"{prefix}.{name}_proj.weight"),
                                                             (n * d.head_dim, in_dim), rows, in_cols, scale)
            b = get(f"{prefix}.{name}_proj.bias")                      # Qwen2
            if b is not None:
                t = torch.zeros(n * d.head_dim)
                t[rows] = b.float() * scale
                out[f"{prefix}.{name}_proj.bias"] = t
        out[f"{prefix}.o_proj.weight"] = self.place(get(f"{prefix}.o_proj.weight"), (d.hidden, d.heads * d.head_dim),
                                                    None, self.o_cols)
        return out

    def mlp(self, get, prefix: str) -> dict[str, torch.Tensor]:
        d = self.dst
        return {f"{prefix}.gate_proj.weight": self.place(get(f"{prefix}.gate_proj.weight"), (d.mlp, d.hidden)),
                f"{prefix}.up_proj.weight": self.place(get(f"{prefix}.up_proj.weight"), (d.mlp, d.hidden)),
                f"{prefix}.down_proj.weight": self.place(get(f"{prefix}.down_proj.weight"), (d.hidden, d.mlp))}

    def config(self, cfg: dict) -> dict:
        """The source config.json at the twin's shape: sizes, eps × d/D, rope theta^(h'/h)."""
        s, d = self.src, self.dst
        out = {k: v for k, v in cfg.items() if k not in ("completer_quant", "completer_dequantised_from")}
        for field, key in KEYS.items():
            out[key] = getattr(d, field)
        out["rms_norm_eps"] = cfg.get("rms_norm_eps", 1e-6) * s.hidden / d.hidden
        theta = cfg.get("rope_theta") or (cfg.get("rope_parameters") or {}).get("rope_theta", 10000.0)
        theta2 = float(theta) ** (d.head_dim / s.head_dim)
        out["rope_theta"] = theta2
        out["rope_parameters"] = {**(cfg.get("rope_parameters") or {"rope_type": "default"}), "rope_theta": theta2}
        return out


def _reader(state: dict[str, torch.Tensor]):
    return lambda name: state.get(name)


def twin_model_tensors(state: dict[str, torch.Tensor], cfg: dict, p: Padder, dtype: torch.dtype = torch.float32):
    """(name, tensor) of a padded causal LM, one layer at a time (float32, the new layers' zeros in ``dtype``; the
    caller casts and writes)."""
    get = _reader(state)
    s, d = p.src, p.dst
    vocab = cfg["vocab_size"]
    yield "model.embed_tokens.weight", p.place(state["model.embed_tokens.weight"], (vocab, d.hidden))
    if not cfg.get("tie_word_embeddings", False) and "lm_head.weight" in state:
        yield "lm_head.weight", p.place(state["lm_head.weight"], (vocab, d.hidden))
    yield "model.norm.weight", p.norm(state["model.norm.weight"])
    for i in range(d.layers):
        pre = f"model.layers.{i}"
        if i < s.layers:
            g = get
        else:                                             # a new layer: zero but its norms
            g = lambda name: None  # noqa: E731
        tensors = {f"{pre}.input_layernorm.weight": p.norm(g(f"{pre}.input_layernorm.weight")),
                   f"{pre}.post_attention_layernorm.weight": p.norm(g(f"{pre}.post_attention_layernorm.weight"))}
        if i < s.layers:
            tensors |= p.attention(g, f"{pre}.self_attn", None, d.hidden) | p.mlp(g, f"{pre}.mlp")
        else:
            tensors |= _zero_layer(p, pre, any(f"model.layers.0.self_attn.{x}_proj.bias" in state for x in "qkv"),
                                   dtype)
        yield from tensors.items()


def _zero_layer(p: Padder, pre: str, bias: bool, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    d = p.dst

    def z(*shape):
        return torch.zeros(shape, dtype=dtype)
    out = {f"{pre}.self_attn.q_proj.weight": z(d.heads * d.head_dim, d.hidden),
           f"{pre}.self_attn.k_proj.weight": z(d.kv_heads * d.head_dim, d.hidden),
           f"{pre}.self_attn.v_proj.weight": z(d.kv_heads * d.head_dim, d.hidden),
           f"{pre}.self_attn.o_proj.weight": z(d.hidden, d.heads * d.head_dim),
           f"{pre}.mlp.gate_proj.weight": z(d.mlp, d.hidden),
           f"{pre}.mlp.up_proj.weight": z(d.mlp, d.hidden),
           f"{pre}.mlp.down_proj.weight": z(d.hidden, d.mlp)}
    if bias:
        for x, n in (("q", d.heads), ("k", d.kv_heads), ("v", d.kv_heads)):
            out[f"{pre}.self_attn.{x}_proj.bias"] = z(n * d.head_dim)
    return out


def twin_drafter_tensors(state: dict[str, torch.Tensor], cfg: dict, p: Padder, target_src: int, target_dst: int):
    """(name, tensor) of an EAGLE-3 drafter (``completer.training.drafter`` / vLLM's ``LlamaForCausalLMEagle3``
    layout) padded to the twin target's width: fc over len(aux) × ``target_dst`` features, the layer over
    2 × hidden inputs (embedding | fc output)."""
    get = _reader(state)
    s, d = p.src, p.dst
    n_aux = state["fc.weight"].shape[1] // target_src
    fc_cols = torch.cat([b * target_dst + torch.arange(target_src) for b in range(n_aux)])
    yield "fc.weight", p.place(state["fc.weight"], (d.hidden, n_aux * target_dst), None, fc_cols)
    in_cols = torch.cat([torch.arange(s.hidden), d.hidden + torch.arange(s.hidden)])
    m = "midlayer"
    for name in ("input_layernorm", "hidden_norm", "post_attention_layernorm"):
        yield f"{m}.{name}.weight", p.norm(state[f"{m}.{name}.weight"])
    yield from p.attention(get, f"{m}.self_attn", in_cols, 2 * d.hidden).items()
    yield from p.mlp(get, f"{m}.mlp").items()
    yield "norm.weight", p.norm(state["norm.weight"])
    yield "lm_head.weight", p.place(state["lm_head.weight"], (state["lm_head.weight"].shape[0], d.hidden))
    for name in ("d2t", "t2d"):
        if name in state:
            yield name, state[name]


def write_tensors(folder: Path, tensors, dtype: torch.dtype, max_shard: int = MAX_SHARD_BYTES) -> int:
    """Stream (name, tensor) into safetensors shards of at most ``max_shard`` bytes (one ``model.safetensors`` when
    it all fits; else ``model-0000i-of-0000n.safetensors`` and the index Hugging Face and vLLM read), so that memory
    holds one shard at a time. Float tensors are cast to ``dtype``. Returns the bytes written."""
    from safetensors.torch import save_file

    shard: dict[str, torch.Tensor] = {}
    files: list[Path] = []
    owner: dict[str, int] = {}
    size = written = 0

    def flush() -> None:
        nonlocal shard, size
        files.append(folder / f".shard-{len(files):05d}.tmp")
        save_file(shard, str(files[-1]), metadata={"format": "pt"})
        shard, size = {}, 0

    for name, t in tensors:
        t = (t.to(dtype) if t.is_floating_point() else t).contiguous()
        b = t.numel() * t.element_size()
        if shard and size + b > max_shard:
            flush()
        shard[name] = t
        owner[name] = len(files)
        size += b
        written += b
    if shard:
        flush()
    n = len(files)
    names = ["model.safetensors"] if n == 1 else [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]
    for f, name in zip(files, names):
        f.replace(folder / name)
    if n > 1:
        (folder / "model.safetensors.index.json").write_text(json.dumps(
            {"metadata": {"total_size": written}, "weight_map": {k: names[i] for k, i in owner.items()}}, indent=1)
            + "\n")
    return written


def _load_state(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    state: dict[str, torch.Tensor] = {}
    for f in sorted(folder.glob("*.safetensors")):
        state.update(load_file(str(f)))
    if not state:
        raise FileNotFoundError(f"no *.safetensors weights in {folder}")
    return state


def _dtype(name: str) -> torch.dtype:
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


def build_model(spec: str, shape: str, out: Path, dtype: str = "bf16", max_shard: int = MAX_SHARD_BYTES) -> dict:
    """The twin of causal LM ``spec`` (a ``resolve_model`` spec) at ``shape`` in folder ``out``."""
    from completer.models import resolve_model

    src_dir = resolve_model(spec)
    cfg = json.loads((src_dir / "config.json").read_text())
    if (cfg.get("architectures") or ["LlamaForCausalLM"])[0] not in ("LlamaForCausalLM", "Qwen2ForCausalLM"):
        raise ValueError(f"{spec}: a twin needs a Llama or Qwen2 causal LM, got {cfg.get('architectures')}")
    src = source_shape(cfg)
    p = Padder(src, parse_shape(shape, src))
    state = _load_state(src_dir)
    out.mkdir(parents=True, exist_ok=True)
    tied = cfg.get("tie_word_embeddings", False)
    tdtype = _dtype(dtype)
    for old in out.glob("model*.safetensors*"):          # a rebuild with another shard count leaves no stale shards
        old.unlink()
    t0 = time.time()
    written = write_tensors(out, twin_model_tensors(state, cfg, p, tdtype), tdtype, max_shard)
    tcfg = p.config(cfg)
    tcfg["torch_dtype"] = str(tdtype).removeprefix("torch.")
    info = {"source": spec, "source_folder": str(src_dir), "source_shape": asdict(src), "shape": asdict(p.dst),
            "preset": shape if shape in PRESETS else None, "dtype": dtype, "vocab_padded": False,
            "params": p.dst.params(cfg["vocab_size"], tied), "bytes": written, "seconds": round(time.time() - t0, 1)}
    tcfg["completer_twin"] = info
    if "completer_template" not in tcfg and ("completer_house" in cfg or _is_house(spec)):
        tcfg["completer_house"] = True                   # the house FIM template (see completer.prompt)
    (out / "config.json").write_text(json.dumps(tcfg, indent=2) + "\n")
    for name in TOKENIZER_FILES:
        if (src_dir / name).is_file():
            shutil.copy2(src_dir / name, out / name)
    return info


def _is_house(spec: str) -> bool:
    from completer.models import HOUSE_DIR
    return spec.startswith("house:") or Path(spec).resolve().is_relative_to(HOUSE_DIR.resolve())


def build_drafter(spec: str, target_cfg: dict, target_twin_cfg: dict, out: Path, dtype: str = "bf16") -> dict:
    """The EAGLE-3 drafter folder ``spec`` padded to the twin target's width and heads (its MLP to the target's)."""
    from completer.models import HOUSE_DIR

    folder = HOUSE_DIR / spec.split(":", 1)[1] if spec.startswith("house:") else Path(spec).expanduser()
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"drafter {spec!r}: no config.json at {folder}")
    cfg = json.loads((folder / "config.json").read_text())
    if "LlamaForCausalLMEagle3" not in (cfg.get("architectures") or []):
        raise ValueError(f"drafter {spec!r} is not an EAGLE-3 drafter ({cfg.get('architectures')})")
    if cfg.get("target_hidden_size", cfg["hidden_size"]) != target_cfg["hidden_size"]:
        raise ValueError(f"drafter {spec!r} reads {cfg.get('target_hidden_size')}-wide features, the target is "
                         f"{target_cfg['hidden_size']} wide")
    aux = cfg.get("eagle_aux_hidden_state_layer_ids") or []
    if aux and max(aux) > target_cfg["num_hidden_layers"]:
        raise ValueError(f"drafter aux layer ids {aux} exceed the target's {target_cfg['num_hidden_layers']} layers")
    src = source_shape(cfg)
    t = source_shape(target_twin_cfg)
    dst = Shape(hidden=t.hidden, layers=1, heads=t.heads, kv_heads=t.kv_heads, head_dim=t.head_dim,
                mlp=max(t.mlp, src.mlp))
    p = Padder(src, dst)
    state = _load_state(folder)
    out.mkdir(parents=True, exist_ok=True)
    tdtype = _dtype(dtype)
    t0 = time.time()
    written = write_tensors(out, twin_drafter_tensors(state, cfg, p, target_cfg["hidden_size"], t.hidden), tdtype,
                            1 << 62)
    dcfg = p.config(cfg)
    dcfg["num_hidden_layers"] = 1
    dcfg["target_hidden_size"] = t.hidden
    dcfg["max_position_embeddings"] = target_twin_cfg.get("max_position_embeddings", cfg["max_position_embeddings"])
    dcfg["torch_dtype"] = str(tdtype).removeprefix("torch.")
    info = {"source": spec, "source_shape": asdict(src), "shape": asdict(dst), "target_hidden": t.hidden,
            "aux_layer_ids": aux, "dtype": dtype, "bytes": written, "seconds": round(time.time() - t0, 1)}
    dcfg["completer_twin"] = info
    (out / "config.json").write_text(json.dumps(dcfg, indent=2) + "\n")
    return info


def build(target: str, shape: str, out: Path, drafter: str | None = None, draft: str | None = None,
          draft_shape: str = "0.5b", dtype: str = "bf16", max_shard: int = MAX_SHARD_BYTES) -> dict:
    """Target twin in ``out/target``, drafter twin in ``out/eagle3``, draft twin in ``out/draft``; ``out/twin.json``
    records what was built."""
    from completer.models import resolve_model

    out = Path(out)
    report = {"target": build_model(target, shape, out / "target", dtype, max_shard)}
    print(f"twin: target {report['target']['params'] / 1e9:.2f}B parameters, {report['target']['bytes'] / 1e9:.2f} GB "
          f"in {report['target']['seconds']} s -> {out / 'target'}", file=sys.stderr)
    if drafter:
        tcfg = json.loads((resolve_model(target) / "config.json").read_text())
        twin_cfg = json.loads((out / "target" / "config.json").read_text())
        report["eagle3"] = build_drafter(drafter, tcfg, twin_cfg, out / "eagle3", dtype)
        print(f"twin: drafter {report['eagle3']['bytes'] / 1e9:.2f} GB -> {out / 'eagle3'}", file=sys.stderr)
    if draft:
        report["draft"] = build_model(draft, draft_shape, out / "draft", dtype, max_shard)
        print(f"twin: draft {report['draft']['params'] / 1e9:.2f}B parameters -> {out / 'draft'}", file=sys.stderr)
    (out / "twin.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="completer twin", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="house:v2/target", help="causal LM to pad (model spec; default house:v2/target)")
    ap.add_argument("--drafter", default=None, help="its EAGLE-3 drafter folder or house:<name> (e.g. house:v2/eagle3)")
    ap.add_argument("--draft", default=None, help="a draft model to pad as well (e.g. house:v2/draft)")
    ap.add_argument("--shape", default="7b", help="7b | 0.5b | WxL | hidden=..,layers=..,heads=..,kv_heads=..,"
                                                  "head_dim=..,mlp=.. (default 7b)")
    ap.add_argument("--draft-shape", default="0.5b", help="the draft's shape, same forms (default 0.5b)")
    ap.add_argument("--out", required=True, help="folder: target/, eagle3/, draft/, twin.json")
    ap.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default="bf16")
    args = ap.parse_args(argv)
    try:
        report = build(args.target, args.shape, Path(args.out), args.drafter, args.draft, args.draft_shape, args.dtype)
    except (ValueError, FileNotFoundError) as e:
        print(f"completer twin: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
