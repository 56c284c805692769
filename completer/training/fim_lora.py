"""Teach SmolLM2-135M fill-in-the-middle: continued training of the GGUF base with a LoRA delta.

    python -m completer.training.fim_lora --base gguf:smollm2 --corpus CORPUS/train.jsonl.xz \\
        --heldout CORPUS/heldout.jsonl.xz --rank 16 --minutes 8 --out runs/smollm2-fim

Objective: the house models' (``completer.training.fim``): each chunk of a file becomes prefix-suffix-middle (0.5),
suffix-prefix-middle (0.4) or plain left-to-right (0.1) text, cross-entropy on every token. SmolLM2's tokenizer has
no FIM tokens, so three of its own special tokens play their parts (``completer.prompt.FIM_TOKENS``, template
``smollm2-fim``); their three embedding rows are trained in full (the embedding is tied to the LM head).

What is trained: a LoRA of rank ``--rank`` on every linear layer of every block (q, k, v, o, gate, up, down; the
base stays frozen, float32 as dequantised from the GGUF, so the delta is exact against the base users load) and
those three rows. Progress bar with ETA, a time-based cosine schedule (``completer.training.train.lr_at``), and
``--checkpoint-minutes`` saves, as ``completer train``. The output folder is what ships
(``completer/models/house/smollm2/fim/``): ``config.json`` (``completer_delta``: the base spec and the template),
``model.delta`` (fp16 LoRA factors + fp32 embedding rows, ``completer.models.delta``), ``probe.safetensors`` (token ids
and the trained model's own logits on them, which the test compares with the loaded model's) and
``train_meta.json`` (command, steps, losses, held-out loss per language before and after).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.utils.parametrize as P
from tqdm import tqdm

from completer.models import resolve_model
from completer.models.delta import DELTA_FILE
from completer.training.fim import PAD, encode_samples, inputs_targets, pack, pack_samples
from completer.models.llama import LlamaForCausalLM, ModelConfig
from completer.training.train import lr_at
from completer.prompt import FIM_TOKENS

TEMPLATE = "smollm2-fim"
TARGETS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
           "mlp.up_proj", "mlp.down_proj")


class LoRA(nn.Module):
    """``W -> W + (B @ A) * scale`` as a parametrization of a frozen weight: every use of ``.weight`` (the layers'
    own addmm calls included) sees the adapted matrix, and only A and B get gradients. B starts at zero."""

    def __init__(self, out_f: int, in_f: int, rank: int, scale: float, gen: torch.Generator):
        super().__init__()
        self.A = nn.Parameter(torch.randn(rank, in_f, generator=gen) / math.sqrt(in_f))
        self.B = nn.Parameter(torch.zeros(out_f, rank))
        self.scale = scale

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return w + (self.B @ self.A).to(w.dtype) * self.scale


class RowDelta(nn.Module):
    """Adds a trained delta to a few rows (the FIM tokens' embeddings)."""

    def __init__(self, rows: list[int], hidden: int):
        super().__init__()
        self.register_buffer("rows", torch.tensor(rows, dtype=torch.long))
        self.delta = nn.Parameter(torch.zeros(len(rows), hidden))

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return w.index_add(0, self.rows, self.delta.to(w.dtype))


def load_base(spec: str) -> tuple[LlamaForCausalLM, Path]:
    """The base model, float32, unfused (training needs the parameters themselves), and its folder."""
    from completer.models.gguf import read_state_dict
    folder = resolve_model(spec)
    config = ModelConfig.from_hf(json.loads((folder / "config.json").read_text()))
    model = LlamaForCausalLM(config)
    state = read_state_dict(folder / "model.gguf", config)
    state.pop("lm_head.weight", None)
    model.load_state_dict(state, strict=False)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    for p in model.parameters():
        p.requires_grad_(False)
    return model, folder


def add_lora(model: LlamaForCausalLM, rank: int, alpha: float, fim_rows: list[int], seed: int) -> list[nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    params: list[nn.Parameter] = []
    for i, layer in enumerate(model.model.layers):
        for t in TARGETS:
            mod = layer.get_submodule(t)
            out_f, in_f = mod.weight.shape
            lora = LoRA(out_f, in_f, rank, alpha / rank, gen).to(mod.weight.device)
            P.register_parametrization(mod, "weight", lora)
            params += [lora.A, lora.B]
    rows = RowDelta(fim_rows, model.config.hidden_size).to(model.model.embed_tokens.weight.device)
    P.register_parametrization(model.model.embed_tokens, "weight", rows)
    if model.config.tie_word_embeddings:       # the head shares the embedding: the same rows change in both
        P.register_parametrization(model.lm_head, "weight", rows)
    params.append(rows.delta)
    return params


def load_delta_into(model: LlamaForCausalLM, path: str | Path) -> None:
    """Start from a shipped delta (``model.delta``, or its folder): its LoRA factors and embedding rows become the
    trainable parameters' values (same rank, same rows and scale, or ValueError), so training continues from it."""
    from completer.models.delta import read_delta
    path = Path(path)
    tensors, meta = read_delta(path / DELTA_FILE if path.is_dir() else path)
    with torch.no_grad():
        for i, layer in enumerate(model.model.layers):
            for t in TARGETS:
                lora = layer.get_submodule(t).parametrizations.weight[0]
                name = f"model.layers.{i}.{t}.weight"
                a, b = tensors[name + ".lora_A"], tensors[name + ".lora_B"]
                if a.shape != lora.A.shape or b.shape != lora.B.shape:
                    raise ValueError(f"{path}: {name} has rank {a.shape[0]}, training rank {lora.A.shape[0]}")
                lora.A.copy_(a.float()), lora.B.copy_(b.float())
        if abs(float(meta.get("scale", lora.scale)) - lora.scale) > 1e-6:
            raise ValueError(f"{path}: scale {meta.get('scale')} (alpha / rank), training {lora.scale}")
        rows = model.model.embed_tokens.parametrizations.weight[0]
        if tensors["model.embed_tokens.rows"].tolist() != rows.rows.tolist():
            raise ValueError(f"{path}: other embedding rows than the FIM tokens'")
        rows.delta.copy_(tensors["model.embed_tokens.delta"].float())


def delta_tensors(model: LlamaForCausalLM) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The delta as shipped: fp16 LoRA factors, fp32 embedding rows, and the metadata ``apply_delta`` reads."""
    out: dict[str, torch.Tensor] = {}
    scale = None
    for i, layer in enumerate(model.model.layers):
        for t in TARGETS:
            lora = layer.get_submodule(t).parametrizations.weight[0]
            name = f"model.layers.{i}.{t}.weight"
            out[name + ".lora_A"] = lora.A.detach().cpu().to(torch.float16).contiguous()
            out[name + ".lora_B"] = lora.B.detach().cpu().to(torch.float16).contiguous()
            scale = lora.scale
    rows = model.model.embed_tokens.parametrizations.weight[0]
    out["model.embed_tokens.rows"] = rows.rows.cpu().clone()
    out["model.embed_tokens.delta"] = rows.delta.detach().cpu().float().contiguous()
    meta = {"scale": repr(scale), "n_adapted": str(len(model.model.layers) * len(TARGETS)),
            "tied": "1" if model.config.tie_word_embeddings else "0", "template": TEMPLATE}
    return out, meta


def probe_ids(tok, seed: int = 0) -> list[int]:
    """A fixed FIM prompt (PSM over a small Python function) whose logits the shipped test compares."""
    t = FIM_TOKENS[TEMPLATE]
    text = (f"{t['<|fim_suffix|>']}\n    return total / len(values)\n{t['<|fim_prefix|>']}def mean(values):\n"
            f"    total = 0\n    for v in values:\n{t['<|fim_middle|>']}")
    return tok.encode(text, add_special_tokens=False).ids


def save(out: Path, model: LlamaForCausalLM, tok, base_spec: str, meta: dict, device) -> None:
    from safetensors.torch import save_file
    out.mkdir(parents=True, exist_ok=True)
    tensors, smeta = delta_tensors(model)
    save_file(tensors, str(out / DELTA_FILE), metadata=smeta)
    ids = probe_ids(tok)
    was = model.training
    model.eval()
    with torch.no_grad():
        logits = model(torch.tensor([ids], device=device))[0, -4:].float().cpu()
    model.train(was)
    save_file({"ids": torch.tensor(ids, dtype=torch.long), "logits": logits.to(torch.float16)},
              str(out / "probe.safetensors"), metadata={"positions": "last 4", "dtype": "trained model, float32"})
    cfg = {"completer_delta": {"base": base_spec, "template": TEMPLATE, "file": DELTA_FILE},
           "name": "SmolLM2-135M taught fill-in-the-middle (LoRA delta)"}
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (out / "train_meta.json").write_text(json.dumps(meta, indent=1) + "\n")


def heldout_loss(model, data: dict[str, torch.Tensor], device, batch: int = 8) -> dict[str, float]:
    was = model.training
    model.eval()
    out = {}
    with torch.no_grad():
        for lang, w in sorted(data.items()):
            tot = n = 0.0
            for i in range(0, len(w), batch):
                x = w[i:i + batch].to(device)
                logits = model(x[:, :-1]).float()
                tot += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1),
                                       reduction="sum").item()
                n += x[:, 1:].numel()
            out[lang] = round(tot / max(1, n), 4)
    model.train(was)
    return out


def sample_loss(model, path: str, device, limit: int | None = None) -> float:
    """Mean cross-entropy of the targets (what the file has at the cursor, healed characters and end token
    included) of the samples of a ``completer.training.crossfile`` file (the first ``limit``; all by default: the
    file is in project order, so a prefix would leave its last projects out), each after its prompt."""
    d = np.load(path)
    ids, starts, targets = d["ids"], d["starts"], d["targets"]
    bounds = list(starts) + [len(ids)]
    was = model.training
    model.eval()
    tot = n = 0.0
    with torch.no_grad():
        for i in range(len(starts) if limit is None else min(limit, len(starts))):
            x = torch.from_numpy(ids[bounds[i]:bounds[i + 1]].astype(np.int64))[None].to(device)
            t = int(targets[i])
            logits = model(x[:, :-1]).float()[0, -t:]
            tot += F.cross_entropy(logits, x[0, -t:], reduction="sum").item()
            n += t
    model.train(was)
    return round(tot / max(1, n), 4)


def read_texts(archives: list[str], max_bytes: int, seed: int) -> list[tuple[str, str]]:
    """(language, text) from each archive, languages interleaved in the archive's order, up to ``max_bytes``."""
    from completer.training.corpus import read_archive
    out = []
    for a in archives:
        try:
            for _, lang, text in read_archive(a, max_bytes):
                out.append((lang, text))
        except (EOFError, ValueError) as e:   # an archive cut short (a subset taken while the corpus was built)
            print(f"{a}: read {len(out)} files, then {type(e).__name__}: {e} (the rest is not used)", flush=True)
    random.Random(seed).shuffle(out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m completer.training.fim_lora", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="gguf:smollm2", help="the base model spec (what users have)")
    ap.add_argument("--base-name", help="the base spec written into the shipped config.json (default: --base; "
                                        "e.g. gguf:smollm2 when --base is a copy of that file on a device)")
    ap.add_argument("--corpus", action="append", required=True, help="train archive(s) (JSON lines, xz)")
    ap.add_argument("--heldout", help="held-out archive: loss per language before and after training")
    ap.add_argument("--heldout-windows", type=int, default=16, help="windows per language for the held-out loss")
    ap.add_argument("--corpus-mb", type=float, default=20, help="MB of text to encode")
    ap.add_argument("--init-delta", help="continue from this delta (a shipped folder, e.g. "
                                          "completer/models/house/smollm2/fim, or its model.delta)")
    ap.add_argument("--samples", action="append", default=[],
                    help="prepared samples (.npz of completer.training.crossfile: the server's prompts with their "
                         "targets), packed whole into windows that are mixed into each batch")
    ap.add_argument("--samples-share", type=float, default=0.5, help="share of each batch taken from --samples")
    ap.add_argument("--heldout-samples", action="append", default=[],
                    help="held-out prepared samples (NAME=FILE.npz): the loss of their targets before and after")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--minutes", type=float, default=8, help="wall-clock training budget")
    ap.add_argument("--max-steps", type=int)
    ap.add_argument("--checkpoint-minutes", type=float, help="save the delta every this many minutes")
    ap.add_argument("--out", default="runs/smollm2-fim")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--threads", type=int, help="CPU threads (torch.set_num_threads)")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args(argv)
    t0 = time.time()
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    if args.threads:
        torch.set_num_threads(args.threads)
    random.seed(args.seed), np.random.seed(args.seed), torch.manual_seed(args.seed)
    out = Path(args.out).resolve()
    from tokenizers import Tokenizer

    model, folder = load_base(args.base)
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    names = FIM_TOKENS[TEMPLATE]
    fim_rows = [tok.token_to_id(names[k]) for k in ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")]
    names = {**names, "<|endoftext|>": "<|endoftext|>"}
    eos_id = tok.token_to_id("<|endoftext|>")
    print(f"base {args.base}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters; FIM tokens "
          f"{dict(zip(('prefix', 'suffix', 'middle'), fim_rows))} ({time.time() - t0:.0f}s)", flush=True)

    texts = read_texts(args.corpus, int(args.corpus_mb * 1e6), args.seed)
    stream = encode_samples([t for _, t in texts], tok, seed=args.seed, names=names)
    data = torch.from_numpy(pack(stream, args.seq_len).astype(np.int64))
    if len(data) == 0:
        raise SystemExit(f"corpus too small: {len(stream)} tokens do not fill one {args.seq_len}-token window")
    by_lang: dict[str, int] = {}
    for lang, t in texts:
        by_lang[lang] = by_lang.get(lang, 0) + len(t)
    print(f"{len(texts)} files ({', '.join(f'{k} {v / 1e6:.1f} MB' for k, v in sorted(by_lang.items()))}), "
          f"{len(stream) / 1e6:.1f}M tokens, {len(data)} windows of {args.seq_len} ({time.time() - t0:.0f}s)",
          flush=True)
    extra = torch.zeros((0, args.seq_len + 1), dtype=torch.int64)
    if args.samples:
        parts = [np.load(f) for f in args.samples]
        extra = torch.from_numpy(np.concatenate([pack_samples(p["ids"], p["starts"], args.seq_len) for p in parts]))
        print(f"{len(extra)} windows of prepared samples ({', '.join(args.samples)}), {args.samples_share:.0%} of "
              f"each batch", flush=True)
    n_extra = round(args.batch * args.samples_share) if len(extra) else 0
    held: dict[str, torch.Tensor] = {}
    if args.heldout:
        from completer.training.corpus import read_archive
        per: dict[str, list[str]] = {}
        for _, lang, text in read_archive(args.heldout):
            if sum(map(len, per.get(lang, []))) < args.heldout_windows * args.seq_len * 4:
                per.setdefault(lang, []).append(text)
        for lang, ts in per.items():
            s = encode_samples(ts, tok, seed=args.seed + 1, names=names)
            held[lang] = torch.from_numpy(pack(s, args.seq_len).astype(np.int64))[:args.heldout_windows]

    model.to(device)
    params = add_lora(model, args.rank, args.alpha, fim_rows, args.seed)
    if args.init_delta:
        load_delta_into(model, args.init_delta)
        print(f"continuing from {args.init_delta}", flush=True)
    model.train()
    n_train = sum(p.numel() for p in params)
    held_samples = dict(a.split("=", 1) for a in args.heldout_samples)

    def samples_loss() -> dict:
        return {name: sample_loss(model, path, device) for name, path in held_samples.items()}
    loss_before = {**(heldout_loss(model, held, device) if held else {}), **samples_loss()}
    if loss_before:
        print(f"held-out loss before: {loss_before} ({time.time() - t0:.0f}s)", flush=True)
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.99), weight_decay=0.0)
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else torch.autocast("cpu", enabled=False)
    if device.type == "cuda":
        data, extra = data.to(device), extra.to(device)
        torch.backends.cuda.matmul.allow_tf32 = True
    gen = torch.Generator().manual_seed(args.seed)
    argv_s = " ".join(argv if argv is not None else sys.argv[1:])

    def meta(step, tokens, first, last, interrupted=False, checkpoint=False, after=None) -> dict:
        return {"command": "python -m completer.training.fim_lora " + argv_s, "base": args.base,
                "template": TEMPLATE, "fim_tokens": FIM_TOKENS[TEMPLATE], "rank": args.rank, "alpha": args.alpha,
                "lr": args.lr, "batch": args.batch, "seq_len": args.seq_len, "minutes": args.minutes,
                "seed": args.seed, "trainable_params": n_train, "steps": step, "tokens_seen": tokens,
                "train_tokens": int(len(stream)), "train_files": len(texts),
                "train_mb_by_language": {k: round(v / 1e6, 2) for k, v in sorted(by_lang.items())},
                "corpus": args.corpus, "init_delta": args.init_delta, "samples": args.samples,
                "samples_windows": len(extra), "samples_share": args.samples_share if n_extra else 0,
                "loss_first": first, "loss_last": last,
                "heldout_loss_before": loss_before, "heldout_loss_after": after, "interrupted": interrupted,
                "checkpoint": checkpoint, "device": (torch.cuda.get_device_name(0) if device.type == "cuda"
                                                     else platform.processor() or "cpu"),
                "torch": torch.__version__, "seconds_total": round(time.time() - t0, 1)}

    budget = args.minutes * 60
    start = time.time()
    every = (args.checkpoint_minutes or 0) * 60
    next_save = every if every > 0 else float("inf")
    bar = tqdm(total=int(budget), unit="s", desc="train", bar_format="{l_bar}{bar}| {n}/{total}s {postfix}")
    step = tokens = 0
    counted = torch.zeros((), dtype=torch.int64, device=device)     # target tokens seen (padding not counted)
    first = last = None
    win, win_n = torch.zeros((), device=device), 0
    interrupted = False
    try:
        while (el := time.time() - start) < budget and (args.max_steps is None or step < args.max_steps):
            frac = el / budget if args.max_steps is None else max(el / budget, step / args.max_steps)
            for g in opt.param_groups:
                g["lr"] = lr_at(frac, args.lr)
            idx = torch.randint(len(data), (args.batch - n_extra,), generator=gen).to(data.device)
            w = data[idx].to(device, non_blocking=True)
            if n_extra:
                idx = torch.randint(len(extra), (n_extra,), generator=gen).to(extra.device)
                w = torch.cat([w, extra[idx].to(device, non_blocking=True)])
            x, y = inputs_targets(w, eos_id)
            with amp:
                logits = model(x)
                loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=PAD)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            step += 1
            counted = counted + (y != PAD).sum()        # read (a sync) only where it is shown or saved
            win, win_n = win + loss.detach(), win_n + 1
            if step % 10 == 0 or step == 1:
                last = (win / win_n).item()
                tokens = int(counted)
                win, win_n = torch.zeros((), device=device), 0
                first = last if first is None else first
                now = time.time() - start
                left = budget - now
                if args.max_steps:
                    left = min(left, (args.max_steps - step) * now / step)
                bar.n = int(now)
                bar.set_postfix_str(f"step {step} loss {last:.3f} tok {tokens / 1e6:.1f}M "
                                    f"ETA {int(left) // 60}:{int(left) % 60:02d}")
            if time.time() - start >= next_save:
                tokens = int(counted)
                save(out, model, tok, args.base_name or args.base, meta(step, tokens, first, last, checkpoint=True), device)
                tqdm.write(f"checkpoint at step {step} ({time.time() - start:.0f}s): {out}"
                           + (f"; held-out samples' target loss {samples_loss()}" if held_samples else ""))
                next_save += every
    except KeyboardInterrupt:
        interrupted = True
    if win_n:
        last = (win / win_n).item()
    tokens = int(counted)
    bar.close()
    after = {**(heldout_loss(model, held, device) if held else {}), **samples_loss()}
    m = meta(step, tokens, first, last, interrupted, after=after)
    save(out, model, tok, args.base_name or args.base, m, device)
    print(json.dumps(m, indent=1), flush=True)
    print(f"saved {out} (use it with --model {out} once copied under completer/models/house/smollm2/fim: "
          f"house:smollm2/fim)", flush=True)
    return 130 if interrupted else 0


if __name__ == "__main__":
    raise SystemExit(main())
