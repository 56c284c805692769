"""``completer train-drafter``: train a drafter for a target, EAGLE-3 (``completer.training.drafter``, the default)
or DFlash (``--method dflash``, ``completer.training.dflash``), and write its held-out acceptance report. The
command's description is the EAGLE-3 module's (``completer train-drafter --help``).
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from ..models.llama import LlamaForCausalLM
from . import drafter as eagle3
from .drafter import (DrafterConfig, Eagle3Drafter, _report, choose_draft_vocab, init_weights, train_for, ttt_loss)


def main(argv: list[str] | None = None) -> int:
    from .fim import encode_samples, pack
    from ..models.tokenizer import EOS, load_tokenizer
    from .train import corpus_texts                # the archive reader `completer train --corpus` uses

    ap = argparse.ArgumentParser(prog="completer train-drafter", description=eagle3.__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", required=True, help="target model folder (Llama or Qwen2, Hugging Face layout) "
                    "or house:<name> (house:v2/target)")
    ap.add_argument("--out", required=True, help="folder for the drafter (config.json, model.safetensors, report)")
    ap.add_argument("--minutes", type=float, default=5.0, help="wall-clock training budget")
    ap.add_argument("--steps-ahead", type=int, default=6, help="unrolled draft steps in training (TTT)")
    ap.add_argument("--batch", type=int, default=None, help="windows per step (default 32 on a GPU, 4 on CPU)")
    ap.add_argument("--seq-len", type=int, default=None, help="tokens per window (default 1024 GPU / 256 CPU)")
    ap.add_argument("--corpus-mb", type=float, default=None, help="MB of train-split text (default 60 GPU / 5 CPU), "
                    "from each --corpus")
    ap.add_argument("--corpus", action="append",
                    help="train on this corpus archive (python -m completer.training.corpus build: the mix the target "
                         "was trained on) instead of this machine's Python files; repeat for several (each up to "
                         "--corpus-mb; 'python' = this machine's Python train split)")
    ap.add_argument("--heldout", help="held-out corpus archive: the acceptance report's prompts come from it, "
                    "--eval-prompts per language, with a report per language (default: this machine's Python "
                    "held-out split)")
    ap.add_argument("--draft-vocab", type=int, default=None,
                    help="draft vocabulary size (most frequent ids); default: the target's whole vocabulary if it "
                         "is at most 32768, else 32000")
    ap.add_argument("--aux-layers", default=None, help="comma-separated target depths (eagle3: id k = after k "
                    "layers; dflash: id i = the output of layer i, 0-based, as its config.json counts them)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--eval-prompts", type=int, default=None, help="held-out prompts for the acceptance report, "
                    "per language with --heldout (default 100 GPU / 20 CPU)")
    ap.add_argument("--eval-tokens", type=int, default=48, help="greedy target tokens per held-out prompt")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--max-steps", type=int, default=None, help="stop after this many steps (smoke tests)")
    ap.add_argument("--report-only", action="store_true",
                    help="no training: write the held-out acceptance report of the drafter already in --out")
    ap.add_argument("--method", choices=("eagle3", "dflash"), default="eagle3", help="eagle3: one layer drafting "
                    "token by token (vLLM method eagle3); dflash: a small decoder drafting all k tokens in one "
                    "forward (vLLM method dflash; completer.training.dflash)")
    ap.add_argument("--layers", type=int, default=2, help="dflash: drafter layers")
    ap.add_argument("--block", type=int, default=5, help="dflash: block length trained = k + 1 for the k served")
    ap.add_argument("--causal", action="store_true", help="dflash: causal attention inside the block")
    ap.add_argument("--dflash-data", choices=("text", "continuations"), default="text", help="dflash: train on "
                    "corpus windows, each block labelled with the target's own greedy chain where the text follows "
                    "it (text), or on the target's greedy continuations of FIM prompts, generated first "
                    "(continuations: --sequences, --gen-tokens)")
    ap.add_argument("--dflash-init", choices=("random", "first", "last"), default="last", help="dflash: start "
                    "the drafter's layers as copies of the target's last layers (default: held-out acceptance 0.25 "
                    "against 0.20 from random after the same steps, bench/results/vllm/2026-12-05), its first, or random")
    ap.add_argument("--sequences", type=int, default=None, help="dflash continuations: FIM prompts the target "
                    "continues greedily for training (default 4000 GPU / 200 CPU)")
    ap.add_argument("--gen-tokens", type=int, default=64, help="dflash: greedy target tokens per training prompt")
    ap.add_argument("--anchors", type=int, default=None, help="dflash: blocks per sequence per step (32 GPU / 16 CPU)")
    ap.add_argument("--gen-batch", type=int, default=64, help="dflash on a GPU: prompts continued together")
    args = ap.parse_args(argv)
    for a in [x for x in args.corpus or () if x != "python"] + ([args.heldout] if args.heldout else []):
        if not Path(a).is_file():                  # before minutes of loading and training, not after
            raise SystemExit(f"completer train-drafter: no corpus archive {a} (python -m completer.training.corpus "
                             f"build DIR writes DIR/train.jsonl.xz and DIR/heldout.jsonl.xz)")
    t0 = time.time()
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    gpu = device.type == "cuda"
    batch, seq_len = args.batch or (32 if gpu else 4), args.seq_len or (1024 if gpu else 256)
    corpus_mb = args.corpus_mb or (60 if gpu else 5)
    n_eval = args.eval_prompts if args.eval_prompts is not None else (100 if gpu else 20)
    random.seed(args.seed), np.random.seed(args.seed), torch.manual_seed(args.seed)
    from ..models import resolve_model

    try:   # house:<name> or a folder; packed weights (house:v2/target's int4) dequantised as vLLM is given them
        target_dir = resolve_model(args.target)
    except FileNotFoundError as e:
        raise SystemExit(f"completer train-drafter: {e}")
    if not (target_dir / "tokenizer.json").is_file():
        raise SystemExit(f"completer train-drafter: {target_dir} has no tokenizer.json")
    dtype = torch.bfloat16 if gpu else torch.float32
    try:
        target = LlamaForCausalLM.from_pretrained(target_dir, device=device, dtype=dtype)
    except (FileNotFoundError, ValueError) as e:
        raise SystemExit(f"completer train-drafter: cannot load the target: {e}")
    for p in target.parameters():
        p.requires_grad_(False)
    tc = target.config
    seq_len = min(seq_len, tc.max_position_embeddings - args.steps_ahead - 1)
    tok = load_tokenizer(target_dir)
    eos = tok.token_to_id(EOS)
    if eos is None:
        eos = tc.eos_token_id if isinstance(tc.eos_token_id, int) else None
    if args.method == "dflash":
        from .dflash import train as train_dflash

        args.n_eval = n_eval
        try:
            return train_dflash(args, target, tok, eos, device, Path(args.out), t0,
                                argv if argv is not None else sys.argv[1:])
        except ValueError as e:
            raise SystemExit(f"completer train-drafter: {e}")
    aux = [int(x) for x in args.aux_layers.split(",")] if args.aux_layers else None
    dv = args.draft_vocab or (tc.vocab_size if tc.vocab_size <= 32768 else 32000)
    cfg = DrafterConfig.for_target(tc, aux, dv)
    print(f"target {target_dir}: {tc.num_hidden_layers} layers, hidden {tc.hidden_size}, vocab {tc.vocab_size}; "
          f"drafter: aux layers {cfg.aux_layer_ids}, draft vocab {dv}, device {device}", flush=True)

    amp = torch.autocast("cuda", dtype=torch.bfloat16) if gpu else torch.autocast("cpu", enabled=False)
    out = Path(args.out)
    if args.report_only:
        drafter = Eagle3Drafter.load(out, device=device, dtype=torch.float32)
        meta = json.loads((out / "train_meta.json").read_text()) if (out / "train_meta.json").is_file() else {}
        return _report(drafter, target, tok, eos, n_eval, args, tc, device, amp, out, meta, t0)
    print(f"encoding up to {corpus_mb} MB of FIM samples" + (f" from each of {', '.join(args.corpus)}"
                                                             if args.corpus else "") + " ...", flush=True)
    try:
        texts = corpus_texts(args.corpus, int(corpus_mb * 1e6))
    except OSError as e:                                   # a missing or unreadable archive
        raise SystemExit(f"completer train-drafter: cannot read the corpus: {e}")
    random.Random(args.seed).shuffle(texts)
    try:
        stream = encode_samples(texts, tok, seed=args.seed)
    except KeyError as e:
        raise SystemExit(f"completer train-drafter: the target's tokenizer lacks the FIM token {e}")
    if stream.max(initial=0) >= tc.vocab_size:
        raise SystemExit("completer train-drafter: tokenizer ids exceed the target's vocabulary")
    data = torch.from_numpy(pack(stream, seq_len).astype(np.int64))
    if len(data) == 0:
        raise SystemExit(f"corpus too small: {len(stream)} tokens do not fill one {seq_len}-token window")
    print(f"{len(texts)} files, {len(stream) / 1e6:.1f}M tokens, {len(data)} windows ({time.time() - t0:.0f}s)",
          flush=True)

    drafter = Eagle3Drafter(cfg).to(device)
    g = torch.Generator().manual_seed(args.seed)
    init_weights(drafter, g)
    draft_ids = None
    if dv < tc.vocab_size:
        drafter.set_vocab(choose_draft_vocab(stream, tc.vocab_size, dv))
        draft_ids = drafter.draft_ids()
    opt = torch.optim.AdamW(drafter.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0, fused=gpu)
    if gpu:
        data = data.to(device)
        torch.backends.cuda.matmul.allow_tf32 = True

    def batch_loss():
        w = data[torch.randint(len(data), (batch,), generator=g).to(data.device)].to(device)
        with amp:
            return ttt_loss(drafter, target, w, args.steps_ahead, draft_ids)

    step, losses, agree, seconds = train_for(drafter, opt, args, "train-drafter", "top1 vs target", batch_loss)
    drafter.eval()
    meta = {"command": "completer train-drafter " + " ".join(argv if argv is not None else sys.argv[1:]),
            "target": args.target, "target_folder": str(target_dir),
            "device": torch.cuda.get_device_name(0) if gpu else platform.processor() or "cpu",
            "torch": torch.__version__, "config": asdict(cfg), "steps": step, "batch": batch, "seq_len": seq_len,
            "steps_ahead": args.steps_ahead, "train_tokens": int(len(stream)), "train_files": len(texts),
            "corpus": args.corpus or "this machine's Python (stdlib + site-packages), train split",
            "loss_first": losses[0] if losses else None, "loss_last": losses[-1] if losses else None,
            "train_top1_per_step": agree, "params": sum(p.numel() for p in drafter.parameters()),
            "seconds_training": seconds}
    drafter.save(out, meta)                     # saved before the report, so a cut-off report loses no training
    return _report(drafter, target, tok, eos, n_eval, args, tc, device, amp, out, meta, t0)


if __name__ == "__main__":
    raise SystemExit(main())
