"""Small shipped weights: group-wise int8 / int4 storage of a model folder, dequantised once into the cache.

    python -m completer.models.quant pack SRC_FOLDER DST_FOLDER [--bits 4] [--embed-bits 8] [--group 32]
                                          [--tokenizer-from ../target]

A packed folder holds ``model.quant`` (safetensors format under another name, so no loader mistakes it for plain
weights) and a ``config.json`` with ``"completer_quant": {...}``. Each 2-D weight is stored symmetric per group of
``group`` input columns (int8: one scale per row): ``w ~= q * scale``, ``q`` in -127..127 (int8) or -7..7 (int4,
two values per byte); 1-D weights (norms) stay bf16. ``completer.models.resolve_model`` turns such a folder into an
ordinary one (float32 ``model.safetensors``, the same tokenizer and config) under the cache
(``completer.models.gguf.cache_root()``, ``$COMPLETER_CACHE``), once per file version, so both engines, vLLM and
``transformers`` load it unchanged.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
from pathlib import Path

import torch

QUANT_FILE = "model.quant"
KEY = "completer_quant"


def _quantise(w: torch.Tensor, bits: int, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    rows, cols = w.shape
    g = cols if bits == 8 else group
    if cols % g:
        raise ValueError(f"{cols} columns do not split into groups of {g}")
    qmax = 2 ** (bits - 1) - 1
    x = w.float().reshape(rows, cols // g, g)
    scale = (x.abs().amax(-1, keepdim=True) / qmax).clamp_min(1e-12)
    q = torch.round(x / scale).clamp(-qmax, qmax).to(torch.int8).reshape(rows, cols)
    scale = scale.squeeze(-1).to(torch.float16)
    if bits == 4:
        u = (q + 8).to(torch.uint8)                       # 1..15
        q = (u[:, 0::2] | (u[:, 1::2] << 4)).contiguous()
    return q, scale


def _dequantise(q: torch.Tensor, scale: torch.Tensor, bits: int, cols: int) -> torch.Tensor:
    if bits == 4:
        lo, hi = (q & 0x0F).to(torch.int16) - 8, (q >> 4).to(torch.int16) - 8
        q = torch.stack((lo, hi), -1).reshape(q.shape[0], cols)
    rows = q.shape[0]
    groups = scale.shape[1]
    return (q.float().reshape(rows, groups, cols // groups) * scale.float().unsqueeze(-1)).reshape(rows, cols)


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def pack(src: str | Path, dst: str | Path, bits: int = 4, embed_bits: int = 8, group: int = 32,
         tokenizer_from: str | None = None) -> dict:
    """Write the packed copy of model folder ``src`` into ``dst``; returns the config's quant entry.

    ``tokenizer_from`` (a folder relative to ``dst``, e.g. ``../target``, or a model spec such as ``gguf:smollm2``
    that ``resolve_model`` turns into a folder): leave the tokenizer files out and take them from there when the
    folder is dequantised (the pair shares one tokenizer; half a MB saved for house v2, 3.5 MB for SmolLM2's)."""
    from safetensors.torch import load_file, save_file

    src, dst = Path(src), Path(dst)
    if bits not in (4, 8) or embed_bits not in (4, 8):
        raise ValueError("bits must be 4 or 8")
    state: dict[str, torch.Tensor] = {}
    for f in sorted(src.glob("*.safetensors")):
        state.update(load_file(str(f)))
    out: dict[str, torch.Tensor] = {}
    layout: dict[str, list] = {}
    for name, w in state.items():
        if w.ndim == 2 and w.is_floating_point():
            b = embed_bits if "embed_tokens" in name or "lm_head" in name else bits
            q, s = _quantise(w, b, group)
            out[name], out[name + ".scale"] = q, s
            layout[name] = [b, w.shape[1]]
        else:
            out[name] = w.to(torch.bfloat16) if w.is_floating_point() else w
    dst.mkdir(parents=True, exist_ok=True)
    save_file(out, str(dst / QUANT_FILE), metadata={"format": "completer-quant", "layout": json.dumps(layout)})
    entry = {"file": QUANT_FILE, "bits": bits, "embed_bits": embed_bits, "group": group,
             "scheme": "symmetric per group of input columns (int8: per row), fp16 scales; 1-D weights bf16"}
    if tokenizer_from:
        entry["tokenizer_from"] = tokenizer_from
    for p in src.iterdir():
        if p.is_file() and p.suffix != ".safetensors" and p.name != "config.json" and not (
                tokenizer_from and p.name in TOKENIZER_FILES):
            shutil.copy2(p, dst / p.name)
    cfg = json.loads((src / "config.json").read_text())
    cfg[KEY] = entry
    (dst / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return entry


def is_packed(folder: str | Path) -> bool:
    cfg = Path(folder) / "config.json"
    return cfg.is_file() and (Path(folder) / QUANT_FILE).is_file() and KEY in json.loads(cfg.read_text())


def dequantised_state(folder: str | Path) -> dict[str, torch.Tensor]:
    from safetensors import safe_open

    path = Path(folder) / QUANT_FILE
    with safe_open(str(path), "pt") as fh:
        layout = json.loads(fh.metadata()["layout"])
        state = {}
        for name in fh.keys():
            if name.endswith(".scale"):
                continue
            t = fh.get_tensor(name)
            if name in layout:
                bits, cols = layout[name]
                state[name] = _dequantise(t, fh.get_tensor(name + ".scale"), bits, cols)
            else:
                state[name] = t.float() if t.is_floating_point() else t
    return state


def materialise(folder: str | Path, root: str | Path | None = None, resolve=None) -> Path:
    """The ordinary model folder (float32 ``model.safetensors``) for packed ``folder``, made once in the cache.
    ``resolve`` turns a model spec into a folder (``completer.models.resolve_model``, which calls this: passed in
    rather than imported, so the two modules do not import each other) for a ``tokenizer_from`` that names one."""
    from .gguf import building, cache_root

    folder = Path(folder)
    tokenizer = _tokenizer_source(folder, resolve)          # resolved first: a missing target is an error, not a half folder
    h = hashlib.sha1((folder / QUANT_FILE).read_bytes())
    if tokenizer is not None and not tokenizer.resolve().is_relative_to(folder.parent.resolve()):
        h.update(str(tokenizer.resolve()).encode())   # another model's tokenizer (its cache folder names its version)
    digest = h.hexdigest()[:16]
    out = Path(root or cache_root()) / f"quant-{folder.parent.name}-{folder.name}-{digest}"
    if (out / "config.json").is_file() and (out / "model.safetensors").is_file():
        return out
    with building(out, f"the dequantised model for {folder}", FileNotFoundError) as tmp:
        _write_dequantised(folder, tmp, tokenizer)
    return out


def _tokenizer_source(folder: Path, resolve=None) -> Path | None:
    """Where packed ``folder`` takes its tokenizer files from (``tokenizer_from``): a folder relative to it, or the
    folder of a model spec (``gguf:smollm2``: FileNotFoundError naming the package when it is not installed)."""
    shared = json.loads((folder / "config.json").read_text())[KEY].get("tokenizer_from")
    if not shared:
        return None
    if ":" in shared:
        if resolve is None:
            raise FileNotFoundError(f"{folder} takes its tokenizer from {shared!r}: resolve it with "
                                    f"completer.models.resolve_model")
        return resolve(shared)
    return folder / shared


def _write_dequantised(folder: Path, tmp: Path, tokenizer: Path | None = None) -> None:
    """The files of packed ``folder`` as an ordinary model folder in ``tmp``: float32 weights, its other files, the
    tokenizer files from ``tokenizer`` (see ``_tokenizer_source``)."""
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in dequantised_state(folder).items()}, str(tmp / "model.safetensors"),
              metadata={"format": "pt"})
    for p in folder.iterdir():
        if p.is_file() and p.name not in (QUANT_FILE, "config.json"):
            shutil.copy2(p, tmp / p.name)
    cfg = json.loads((folder / "config.json").read_text())
    if tokenizer is not None:
        for name in TOKENIZER_FILES:
            if (tokenizer / name).is_file() and not (tmp / name).exists():
                shutil.copy2(tokenizer / name, tmp / name)
    cfg["completer_dequantised_from"] = {"folder": str(folder.resolve()), **cfg.pop(KEY)}
    cfg["torch_dtype"] = "float32"
    if "completer_template" not in cfg:    # the cache folder is no longer under HOUSE_DIR: keep the house template
        cfg["completer_house"] = True
    (tmp / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m completer.models.quant", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack", help="write a packed copy of a model folder")
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--bits", type=int, default=4, choices=(4, 8))
    p.add_argument("--embed-bits", type=int, default=8, choices=(4, 8))
    p.add_argument("--group", type=int, default=32)
    p.add_argument("--tokenizer-from", help="ship no tokenizer files; take them from this folder (relative to DST, "
                                            "e.g. ../target) when dequantising")
    args = ap.parse_args(argv)
    print(json.dumps(pack(args.src, args.dst, args.bits, args.embed_bits, args.group, args.tokenizer_from),
                     indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
