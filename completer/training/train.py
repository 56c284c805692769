"""Train the house pair: tokenizer, a Llama target (~10.5M parameters) and a draft (~1.8M), both fill-in-the-middle.

    completer train --preset cpu            # anyone, 2 CPU cores, ~30 minutes
    completer train --preset h200 --minutes 6 --out completer/models/house   # how the shipped pair was made
    completer train --preset h200 --corpus .corpus/train.jsonl.xz --tokenizer .corpus/tokenizer ...   # v2

``--corpus`` takes an archive made by ``python -m completer.training.corpus build`` (several languages, from the
committed manifest; what v2 was trained on) instead of this machine's Python files; given several times (``python``
naming this machine's Python train split), each source gives up to ``--corpus-mb``.

``--draft-for TARGET`` trains only a draft for someone else's target (``gguf:smollm2``, a .gguf file or a folder
with its config.json and tokenizer.json): the target's tokenizer, left-to-right cross-entropy, the target never
loaded (``completer.training.draft_for`` says why and how); it writes OUT/draft/ and, with ``--heldout``, the held-out
cross-entropy per language into train_meta.json:

    completer train --draft-for gguf:smollm2 --preset h200 --corpus .corpus/train.jsonl.xz --corpus python \\
        --heldout .corpus/heldout.jsonl.xz --out runs/smollm2-draft

``--checkpoint-minutes`` saves the pair during training and ``--archive`` writes the output folder as a tar in
parts of at most 15 MiB after each save (for a device whose returned files are size-limited).

Both models see the same batches in one loop; the draft also distils the target (KL to the target's next-token
distribution), which is what speculative acceptance rewards. Time-based schedule: the learning rate follows a
cosine over the wall-clock budget (or over --max-steps when those end the run first), so a run always finishes and
saves on time. Fixed seed; progress bar.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import platform
import random
import tarfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from . import corpus
from .fim import encode_samples, pack
from ..models.llama import LlamaForCausalLM, ModelConfig
from ..models.tokenizer import EOS, SPECIAL_TOKENS, load_tokenizer
from .tokenizer import save_tokenizer, train_tokenizer

TARGET = ModelConfig(vocab_size=8192, hidden_size=320, intermediate_size=768, num_hidden_layers=8,
                     num_attention_heads=5, num_key_value_heads=1, max_position_embeddings=2048, rope_theta=10000.0)
DRAFT = ModelConfig(vocab_size=8192, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
                    num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=2048, rope_theta=10000.0)


@dataclass
class Preset:
    minutes: float
    batch: int
    seq_len: int
    corpus_mb: float
    tokenizer_mb: float
    lr: float = 2e-3
    draft_lr: float = 3e-3
    kd_weight: float = 0.5
    scale: float = 1.0          # width multiplier for the tiny smoke preset


PRESETS = {
    "h200": Preset(minutes=6, batch=64, seq_len=1024, corpus_mb=120, tokenizer_mb=25),
    "cpu": Preset(minutes=30, batch=8, seq_len=256, corpus_mb=30, tokenizer_mb=10),
    "tiny": Preset(minutes=0.5, batch=4, seq_len=128, corpus_mb=2, tokenizer_mb=1, scale=0.25),
}


def scaled(c: ModelConfig, s: float, vocab: int) -> ModelConfig:
    if s == 1.0:
        return replace(c, vocab_size=vocab)
    h = max(32, int(c.hidden_size * s) // 32 * 32)
    return replace(c, vocab_size=vocab, hidden_size=h, intermediate_size=max(64, int(c.intermediate_size * s)),
                   num_hidden_layers=max(1, int(c.num_hidden_layers * s)), num_attention_heads=max(1, h // 64),
                   num_key_value_heads=1, head_dim=None)


def lr_at(frac: float, base: float, warmup: float = 0.03) -> float:
    if frac < warmup:
        return base * frac / warmup
    return base * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, (frac - warmup) / (1 - warmup)))))


def save_pair(out: Path, target, draft, tok, meta: dict) -> None:
    eos = tok.token_to_id(EOS)
    for name, model in (("target", target), ("draft", draft)):
        folder = out / name
        model.config.eos_token_id = eos
        model.save_pretrained(folder, dtype=torch.bfloat16)
        save_tokenizer(tok, folder)
        (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": eos, "pad_token_id": eos}) + "\n")
    (out / "train_meta.json").write_text(json.dumps(meta, indent=2) + "\n")


def write_archive(folder: Path, dest: str | Path, part_bytes: int = 15 * 2**20) -> list[Path]:
    """``folder`` as an uncompressed tar split into ``dest.part0``, ``dest.part1``... (each written whole, then
    renamed); stale higher parts removed. ``cat dest.part* | tar x`` restores it."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(folder, arcname=folder.name)
    data = buf.getvalue()
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    parts = []
    for i in range(0, max(1, len(data)), part_bytes):
        part = dest.with_name(f"{dest.name}.part{i // part_bytes}")
        tmp = part.with_name(part.name + ".tmp")
        tmp.write_bytes(data[i:i + part_bytes])
        tmp.replace(part)
        parts.append(part)
    for stale in dest.parent.glob(f"{dest.name}.part*"):
        if stale not in parts:
            stale.unlink()
    return parts


def corpus_texts(archives: list[str] | str | None, max_bytes: int) -> list[str]:
    """Train texts: from each corpus archive (``--corpus``; ``python``: this machine's Python train split), up to
    ``max_bytes`` each; with none, this machine's Python train split (v1)."""
    archives = [archives] if isinstance(archives, str) else list(archives or [])
    if not archives:
        return [t for _, t in corpus.iter_texts("train", max_bytes)]
    out: list[str] = []
    for a in archives:
        out += ([t for _, t in corpus.iter_texts("train", max_bytes)] if a == "python" else
                [t for _, _, t in corpus.read_archive(a, max_bytes)])
    return out


class _Help(argparse.RawDescriptionHelpFormatter):
    """The module docstring as written, and every option's default in --help (unless its help already says it)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default" not in text and action.default not in (None, argparse.SUPPRESS) and action.option_strings \
                and not isinstance(action, argparse._HelpAction):
            text += " (default: %(default)s)"
        return text


def _per_preset(field: str) -> str:
    return ", ".join(f"{name} {getattr(p, field):g}" for name, p in sorted(PRESETS.items()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="completer train", description=__doc__, formatter_class=_Help,
                                 epilog="Ctrl-C stops training and saves the models as they are (and the tokenizer, "
                                        "saved as soon as it is trained) in the output folder.")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="cpu",
                    help="cpu: 2 CPU cores, ~30 minutes; h200: the shipped pair; tiny: a smoke test")
    ap.add_argument("--minutes", type=float, help=f"wall-clock training budget (default: the preset's: "
                                                  f"{_per_preset('minutes')})")
    ap.add_argument("--out", default="runs/house", help="output folder (gets target/, draft/, tokenizer/ and "
                                                        "train_meta.json)")
    ap.add_argument("--tokenizer", help="reuse the tokenizer.json in this folder instead of training one")
    ap.add_argument("--seed", type=int, default=1234, help="seed of data order, initialisation and FIM splits")
    ap.add_argument("--device", default="auto", help="auto (cuda when there is one), cpu, cuda, cuda:N")
    ap.add_argument("--corpus-mb", type=float, help=f"MB of train-split text to encode (default: the preset's: "
                                                    f"{_per_preset('corpus_mb')})")
    ap.add_argument("--batch", type=int, help=f"sequences per step (default: the preset's: {_per_preset('batch')})")
    ap.add_argument("--max-steps", type=int, help="stop after this many steps (smoke tests)")
    ap.add_argument("--corpus", action="append",
                    help="train on this archive (python -m completer.training.corpus build) instead of this machine's "
                         "Python files; repeat for several (each up to --corpus-mb; 'python' = this machine's "
                         "Python train split)")
    ap.add_argument("--draft-for", metavar="TARGET",
                    help="train only a draft for TARGET (gguf:smollm2, a .gguf file, or a folder with config.json "
                         "and tokenizer.json): its tokenizer, plain left-to-right cross-entropy, no FIM, no "
                         "distillation (the target is not loaded)")
    ap.add_argument("--draft-hidden", type=int, default=96, help="--draft-for: the draft's width")
    ap.add_argument("--draft-layers", type=int, default=4, help="--draft-for: the draft's layers")
    ap.add_argument("--seq-len", type=int, help=f"tokens per training window (default: the preset's: "
                                                f"{_per_preset('seq_len')})")
    ap.add_argument("--heldout", help="--draft-for: a held-out archive; its cross-entropy per language (and this "
                                      "machine's Python held-out split's, with --corpus python) goes into "
                                      "train_meta.json")
    ap.add_argument("--checkpoint-minutes", type=float, help="also save the pair every this many minutes of training")
    ap.add_argument("--archive", help="after each save, write the output folder as ARCHIVE.part0, .part1... "
                                      "(an uncompressed tar in parts of at most 15 MiB)")
    ap.add_argument("--total-minutes", type=float,
                    help="hard wall-clock budget for the whole command (data preparation included); training "
                         "stops early so the checkpoints are written inside it")
    args = ap.parse_args(argv)
    p = PRESETS[args.preset]
    p = replace(p, corpus_mb=args.corpus_mb or p.corpus_mb, batch=args.batch or p.batch,
                seq_len=args.seq_len or p.seq_len)
    minutes = args.minutes if args.minutes is not None else p.minutes
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    random.seed(args.seed), np.random.seed(args.seed), torch.manual_seed(args.seed)
    out = Path(args.out).resolve()
    t0 = time.time()
    if args.draft_for:
        print(f"output folder: {out} (draft/, train_meta.json)", flush=True)
        try:
            return _train_draft_for(args, argv, p, minutes, device, out, t0)
        except KeyboardInterrupt:
            print(f"\ninterrupted before training: nothing saved in {out}", flush=True)
            return 130
    print(f"output folder: {out} (target/, draft/, tokenizer/, train_meta.json)", flush=True)

    if args.tokenizer:
        tok = load_tokenizer(args.tokenizer)
    else:
        print(f"training tokenizer on {p.tokenizer_mb} MB of the train split ...", flush=True)
        tok = train_tokenizer(corpus_texts(args.corpus, int(p.tokenizer_mb * 1e6)), vocab_size=TARGET.vocab_size)
        save_tokenizer(tok, out / "tokenizer")   # kept whatever happens next (minutes of work)
        print(f"tokenizer saved in {out / 'tokenizer'} (reuse it with --tokenizer {out / 'tokenizer'})", flush=True)
    assert [tok.token_to_id(t) for t in SPECIAL_TOKENS] == list(range(len(SPECIAL_TOKENS)))
    vocab = tok.get_vocab_size()
    try:
        return _train(args, argv, p, minutes, device, out, t0, tok, vocab)
    except KeyboardInterrupt:
        if args.tokenizer:
            print(f"\ninterrupted before training: nothing saved in {out}", flush=True)
        else:
            print(f"\ninterrupted before training: the tokenizer is in {out / 'tokenizer'} "
                  f"(reuse it with --tokenizer {out / 'tokenizer'})", flush=True)
        return 130


def _train(args, argv, p: Preset, minutes: float, device, out: Path, t0: float, tok, vocab: int) -> int:

    print(f"encoding up to {p.corpus_mb} MB of FIM samples ...", flush=True)
    texts = corpus_texts(args.corpus, int(p.corpus_mb * 1e6))
    random.Random(args.seed).shuffle(texts)
    stream = encode_samples(texts, tok, seed=args.seed)
    data = torch.from_numpy(pack(stream, p.seq_len).astype(np.int64))
    if len(data) == 0:
        raise SystemExit(f"corpus too small: {len(stream)} tokens do not fill one {p.seq_len}-token window")
    print(f"{len(texts)} files, {len(stream) / 1e6:.1f}M tokens, {len(data)} windows of {p.seq_len} "
          f"({time.time() - t0:.0f}s)", flush=True)

    target = LlamaForCausalLM(scaled(TARGET, p.scale, vocab)).to(device)
    draft = LlamaForCausalLM(scaled(DRAFT, p.scale, vocab)).to(device)
    target.init_weights(args.seed), draft.init_weights(args.seed + 1)
    target.train(), draft.train()
    fused = device.type == "cuda"
    opt_t = torch.optim.AdamW(target.parameters(), lr=p.lr, betas=(0.9, 0.95), weight_decay=0.1, fused=fused)
    opt_d = torch.optim.AdamW(draft.parameters(), lr=p.draft_lr, betas=(0.9, 0.95), weight_decay=0.1, fused=fused)
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else torch.autocast("cpu", enabled=False)
    gen = torch.Generator().manual_seed(args.seed)
    if device.type == "cuda":
        data = data.to(device)
        torch.backends.cuda.matmul.allow_tf32 = True

    def make_meta(step, tokens, first_t, ema_t, ema_d, interrupted: bool, checkpoint: bool = False) -> dict:
        return {
            "command": "completer train " + " ".join(argv if argv is not None else __import__("sys").argv[1:]),
            "preset": args.preset, "preset_values": asdict(p), "minutes": minutes, "seed": args.seed,
            "device": torch.cuda.get_device_name(0) if device.type == "cuda" else platform.processor() or "cpu",
            "torch": torch.__version__, "steps": step or 0, "tokens_seen": tokens or 0, "train_tokens": int(len(stream)),
            "train_files": len(texts), "loss_first_target": first_t, "final_loss_target": ema_t,
            "final_loss_draft_ce": ema_d, "interrupted": interrupted, "checkpoint": checkpoint,
            "corpus": ((args.corpus[0] if len(args.corpus) == 1 else args.corpus) if args.corpus else
                       "this machine's Python (stdlib + site-packages), train split"),
            "params_target": sum(q.numel() for q in target.parameters()),
            "params_draft": sum(q.numel() for q in draft.parameters()),
            "seconds_total": time.time() - t0, "seconds_training": time.time() - start,
        }

    def checkpoint(progress: dict) -> None:
        """Save the pair as it is now (and the archive), then carry on training."""
        meta = make_meta(*(progress.get(k) for k in ("step", "tokens", "first_t", "ema_t", "ema_d")), False, True)
        save_pair(out, target, draft, tok, meta)
        if args.archive:
            write_archive(out, args.archive)
        tqdm.write(f"checkpoint at step {meta['steps']} ({meta['seconds_training']:.0f}s): {out}")

    budget = minutes * 60
    if args.total_minutes is not None:  # leave ~20 s for saving
        budget = max(1.0, min(budget, args.total_minutes * 60 - (time.time() - t0) - 20))
    start = time.time()
    bar = tqdm(total=int(budget), unit="s", desc="train", bar_format="{l_bar}{bar}| {n}/{total}s {postfix}")
    interrupted = False
    progress: dict = {}
    try:
        step, tokens, first_t, ema_t, ema_d = _loop(args, p, budget, start, data, device, vocab, target, draft,
                                                    opt_t, opt_d, amp, gen, bar, progress, checkpoint)
    except KeyboardInterrupt:   # Ctrl-C: keep what was learnt so far (the models as they are now)
        interrupted = True
        step, tokens, first_t, ema_t, ema_d = (progress.get(k) for k in ("step", "tokens", "first_t", "ema_t",
                                                                         "ema_d"))
    bar.n = int(min(budget, time.time() - start))
    bar.close()
    target.eval(), draft.eval()
    meta = make_meta(step, tokens, first_t, ema_t, ema_d, interrupted)
    save_pair(out, target, draft, tok, meta)
    if args.archive:
        write_archive(out, args.archive)
    print(json.dumps(meta, indent=2), flush=True)
    if interrupted:
        print(f"interrupted at step {step or 0}: the models as they were are saved in {out / 'target'} and "
              f"{out / 'draft'} (each with its tokenizer), the run's details in {out / 'train_meta.json'}",
              flush=True)
        return 130
    print(f"saved: {out / 'target'}, {out / 'draft'} (use them with --model {out / 'target'} --draft "
          f"{out / 'draft'})", flush=True)
    return 0


def _train_draft_for(args, argv, p: Preset, minutes: float, device, out: Path, t0: float) -> int:
    """``--draft-for``: the draft alone, for another model's vocabulary (see completer.training.draft_for)."""
    from . import draft_for

    target = draft_for.target_folder(args.draft_for)
    tok = load_tokenizer(target)
    template = draft_for.target_template(target)
    if template != "plain":
        print(f"note: {args.draft_for} is prompted with the {template!r} FIM template; --draft-for trains left to "
              f"right (no FIM), so inside FIM prompts the draft will agree with it less", flush=True)
    sep = draft_for.separator_id(tok, target)
    sources = args.corpus or [draft_for.LOCAL_PYTHON]
    print(f"target {args.draft_for}: tokenizer from {target} ({tok.get_vocab_size()} ids); reading up to "
          f"{p.corpus_mb} MB from each of {', '.join(sources)} ...", flush=True)
    files = draft_for.corpus_files(sources, int(p.corpus_mb * 1e6))
    random.Random(args.seed).shuffle(files)
    stream = draft_for.encode_plain(files, tok, sep)
    data = torch.from_numpy(pack(stream, p.seq_len).astype(np.int64))
    if len(data) == 0:
        raise SystemExit(f"corpus too small: {len(stream)} tokens do not fill one {p.seq_len}-token window")
    by_lang: dict[str, float] = {}
    for _, lang, text in files:
        by_lang[lang] = by_lang.get(lang, 0) + len(text) / 1e6
    print(f"{len(files)} files ({', '.join(f'{k} {v:.1f} MB' for k, v in sorted(by_lang.items()))}), "
          f"{len(stream) / 1e6:.1f}M tokens, {len(data)} windows of {p.seq_len} ({time.time() - t0:.0f}s)", flush=True)

    cfg = draft_for.draft_config(target, args.draft_hidden, args.draft_layers)
    vocab = cfg.vocab_size
    if int(stream.max()) >= vocab:
        raise SystemExit(f"the tokenizer in {target} writes ids up to {int(stream.max())}, past the target's "
                         f"vocab_size {vocab}")
    draft = LlamaForCausalLM(cfg).to(device)
    draft.init_weights(args.seed + 1)
    draft.train()
    opt_d = torch.optim.AdamW(draft.parameters(), lr=p.draft_lr, betas=(0.9, 0.95), weight_decay=0.1,
                              fused=device.type == "cuda")
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else torch.autocast("cpu", enabled=False)
    gen = torch.Generator().manual_seed(args.seed)
    if device.type == "cuda":
        data = data.to(device)
        torch.backends.cuda.matmul.allow_tf32 = True

    def make_meta(step, tokens, first, last, interrupted: bool, checkpoint: bool = False) -> dict:
        return {
            "command": "completer train " + " ".join(argv if argv is not None else __import__("sys").argv[1:]),
            "mode": "draft-for", "draft_for": args.draft_for, "preset": args.preset, "preset_values": asdict(p),
            "minutes": minutes, "seed": args.seed, "objective": "next-token cross-entropy, left to right, "
            "files as '<comment> <name>:' + text, separated by id %d; no FIM, no distillation" % sep,
            "device": torch.cuda.get_device_name(0) if device.type == "cuda" else platform.processor() or "cpu",
            "torch": torch.__version__, "steps": step or 0, "tokens_seen": tokens or 0,
            "train_tokens": int(len(stream)), "train_files": len(files),
            "train_mb_by_language": {k: round(v, 2) for k, v in sorted(by_lang.items())},
            "loss_first_draft": first, "final_loss_draft_ce": last, "interrupted": interrupted,
            "checkpoint": checkpoint, "corpus": sources, "config": cfg.to_hf(),
            "params_draft": sum(q.numel() for q in draft.parameters()),
            "params_draft_embedding": draft.model.embed_tokens.weight.numel(),
            "seconds_total": time.time() - t0, "seconds_training": time.time() - start,
        }

    def checkpoint(progress: dict) -> None:
        meta = make_meta(*(progress.get(k) for k in ("step", "tokens", "first_t", "ema_d")), False, True)
        draft_for.save_draft(out / "draft", draft, target, template, meta)
        if args.archive:
            write_archive(out, args.archive)
        tqdm.write(f"checkpoint at step {meta['steps']} ({meta['seconds_training']:.0f}s): {out}")

    budget = minutes * 60
    reserve = 20 + (40 if args.heldout else 0)          # saving, and the held-out evaluation after training
    if args.total_minutes is not None:
        budget = max(1.0, min(budget, args.total_minutes * 60 - (time.time() - t0) - reserve))
    start = time.time()
    bar = tqdm(total=int(budget), unit="s", desc="train draft", bar_format="{l_bar}{bar}| {n}/{total}s {postfix}")
    interrupted = False
    progress: dict = {}
    try:
        step, tokens, first, _, last = _loop(args, p, budget, start, data, device, vocab, None, draft, None, opt_d,
                                             amp, gen, bar, progress, checkpoint)
    except KeyboardInterrupt:
        interrupted = True
        step, tokens, first, last = (progress.get(k) for k in ("step", "tokens", "first_t", "ema_d"))
    bar.n = int(min(budget, time.time() - start))
    bar.close()
    draft.eval()
    meta = make_meta(step, tokens, first, last, interrupted)
    draft_for.save_draft(out / "draft", draft, target, template, meta)
    if args.archive:
        write_archive(out, args.archive)
    if args.heldout and not interrupted:
        t1 = time.time()
        groups = draft_for.heldout_groups(args.heldout, draft_for.LOCAL_PYTHON in sources, 0.3)
        with amp:
            meta["heldout"] = draft_for.heldout_ce(draft, tok, sep, groups, device, seq_len=min(1024, p.seq_len))
        meta["heldout_seconds"] = time.time() - t1
        (out / "train_meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        if args.archive:
            write_archive(out, args.archive)
    print(json.dumps(meta, indent=2), flush=True)
    if interrupted:
        print(f"interrupted at step {step or 0}: the draft as it was is saved in {out / 'draft'} (with the "
              f"target's tokenizer), the run's details in {out / 'train_meta.json'}", flush=True)
        return 130
    print(f"saved: {out / 'draft'} (use it with --model {args.draft_for} --draft {out / 'draft'})", flush=True)
    return 0


def _loop(args, p: Preset, budget: float, start: float, data, device, vocab: int, target, draft, opt_t, opt_d, amp,
          gen, bar, progress: dict, checkpoint=None):
    """The training steps until the budget (or --max-steps) is spent; ``progress`` holds the latest counters so that
    an interrupted run still reports them. ``target`` None (``--draft-for``): the draft alone, cross-entropy only,
    and the returned first/last losses are the draft's (``ema_t`` None)."""
    step = tokens = 0
    ema_t = ema_d = first_t = None
    win_t = win_d = torch.zeros((), device=device)
    win_n = 0
    every = (args.checkpoint_minutes or 0) * 60
    next_save = every if every > 0 else float("inf")
    while (elapsed := time.time() - start) < budget and (args.max_steps is None or step < args.max_steps):
        # the schedule runs over whichever limit ends the run first: the wall-clock budget or --max-steps (a short
        # run by steps used to stay in warm-up, its rate set by how fast the machine happened to be)
        frac = max(elapsed / budget, step / args.max_steps if args.max_steps else 0.0)
        for opt, base in ((opt_t, p.lr), (opt_d, p.draft_lr)):
            for g in (opt.param_groups if opt is not None else ()):
                g["lr"] = lr_at(frac, base)
        idx = torch.randint(len(data), (p.batch,), generator=gen).to(data.device)
        w = data[idx].to(device, non_blocking=True)
        x, y = w[:, :-1], w[:, 1:]
        with amp:
            if target is None:                                                # --draft-for: cross-entropy alone
                loss_t = torch.zeros((), device=device)
                loss_d = ce_d = F.cross_entropy(draft(x).float().view(-1, vocab), y.reshape(-1))
            else:
                lt = target(x)                                                # [B,T,V]
                loss_t = F.cross_entropy(lt.float().view(-1, vocab), y.reshape(-1))
                ld = draft(x)
                logq = F.log_softmax(ld.float(), -1)
                ce_d = F.nll_loss(logq.view(-1, vocab), y.reshape(-1))
                pt = F.softmax(lt.detach().float(), -1)
                kd = (pt * (torch.log(pt.clamp_min(1e-9)) - logq)).sum(-1).mean()
                loss_d = (1 - p.kd_weight) * ce_d + p.kd_weight * kd
        for loss, model, opt in ((loss_t, target, opt_t), (loss_d, draft, opt_d)):
            if model is None:
                continue
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        step += 1
        tokens += x.numel()
        win_t, win_d = win_t + loss_t.detach(), win_d + ce_d.detach()
        win_n += 1
        if step % 10 == 0 or step == 1:
            ema_t, ema_d = (win_t / win_n).item(), (win_d / win_n).item()   # mean over the last window
            win_t = win_d = torch.zeros((), device=device)
            win_n = 0
            if target is None:
                ema_t = None
            if first_t is None:
                first_t = ema_t if target is not None else ema_d
            now = time.time() - start
            bar.n = int(now)
            losses = f"target {ema_t:.3f} draft {ema_d:.3f}" if target is not None else f"draft {ema_d:.3f}"
            bar.set_postfix_str(f"step {step} loss {losses} tok {tokens / 1e6:.0f}M "
                                f"ETA {_eta(now, budget, step, args.max_steps)}")
        progress.update(step=step, tokens=tokens, first_t=first_t, ema_t=ema_t, ema_d=ema_d)
        if checkpoint is not None and time.time() - start >= next_save and ema_d is not None:
            checkpoint(progress)
            next_save += every
    if win_n:
        ema_t, ema_d = (win_t / win_n).item() if target is not None else None, (win_d / win_n).item()
    return step, tokens, first_t, ema_t, ema_d


def _eta(elapsed: float, budget: float, step: int, max_steps: int | None) -> str:
    """Time left: the budget's rest, or sooner when --max-steps will be reached first at the current pace."""
    left = budget - elapsed
    if max_steps is not None and step:
        left = min(left, (max_steps - step) * elapsed / step)
    left = max(0, int(left))
    return f"{left // 60}:{left % 60:02d}"


if __name__ == "__main__":
    raise SystemExit(main())
