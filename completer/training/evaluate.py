"""Held-out report for a target/draft pair: loss, next-line exact match, draft acceptance against the target.

    python -m completer.training.evaluate --models completer/models/house --json bench/results/house_eval.json
    python -m completer.training.evaluate --models runs/v2 completer/models/house --heldout .corpus/heldout.jsonl.xz

- loss: mean next-token cross-entropy of each model on FIM samples made from held-out files (same mix as training);
  also per character (loss per token / characters per token), which compares pairs with different tokenizers.
- next-line exact match: the cursor at a random line start of a held-out file; SPM prompt (the house template) with
  the rest of the file as suffix; greedy until a newline; exact match of the line (trailing spaces ignored).
- acceptance: along the target's greedy continuation of those prompts, the share of positions where the draft's
  greedy token equals the target's (the per-token acceptance rate alpha of greedy speculation), and the chance that
  the first i drafted tokens are all accepted, i = 1..8 (teacher-forced: exact for greedy speculation, since
  accepted tokens are the target's own).
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from . import corpus
from .fim import encode_samples, fim_ids, pack
from ..models import HOUSE_DIR
from ..models.llama import LlamaForCausalLM
from ..models.tokenizer import EOS, load_tokenizer

MAX_POSITION = 8


@torch.no_grad()
def heldout_loss(model, windows: torch.Tensor, device, batch: int = 16) -> float:
    total, n = 0.0, 0
    for i in range(0, len(windows), batch):
        w = windows[i:i + batch].to(device)
        logits = model(w[:, :-1]).float()
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1), reduction="sum").item()
        n += w[:, 1:].numel()
    return total / n


def line_tasks(texts: list[str], n: int, rng: random.Random) -> list[tuple[str, str, str]]:
    tasks = []
    while len(tasks) < n and texts:
        text = rng.choice(texts)
        lines = text.splitlines(keepends=True)
        cands = [i for i, l in enumerate(lines) if l.strip() and i > 0]
        if not cands:
            continue
        i = rng.choice(cands)
        prefix, line, suffix = "".join(lines[:i]), lines[i], "".join(lines[i + 1:])
        tasks.append((prefix[-3000:], line, suffix[:1000]))
    return tasks


@torch.no_grad()
def greedy(model, ids: list[int], max_new: int, eos: int, device) -> list[int]:
    cache = model.new_cache(len(ids) + max_new + 1)
    logits = model(torch.tensor([ids], device=device), cache, last_only=True)
    out: list[int] = []
    for _ in range(max_new):
        nxt = int(logits[0, -1].argmax())
        if nxt == eos:
            break
        out.append(nxt)
        logits = model(torch.tensor([[nxt]], device=device), cache)
    return out


def acceptance_by_position(runs: list, positions: int) -> tuple[list, float | None]:
    """From per-prompt boolean arrays (draft's greedy token == target's, token by token): for i = 1..positions the
    share of windows whose first i drafts would all be accepted (None with no window), and the overall rate alpha."""
    per = []
    for i in range(1, positions + 1):
        hits = [r[t:t + i].all() for r in runs for t in range(len(r) - i + 1)]
        per.append(float(np.mean(hits)) if hits else None)
    alpha = float(np.mean(np.concatenate(runs))) if runs else None
    return per, alpha


def figures(root: Path, texts: list[str], n_tasks: int, loss_mb: float, seed: int, device) -> dict:
    """Loss, next-line exact match and acceptance of the pair in ``root`` on held-out ``texts``."""
    tok = load_tokenizer(root / "target")
    target = LlamaForCausalLM.from_pretrained(root / "target", device=device)
    draft = LlamaForCausalLM.from_pretrained(root / "draft", device=device)
    rng = random.Random(seed)
    t0 = time.time()
    loss_texts, size = [], 0
    for t in texts:
        if size >= loss_mb * 1e6:
            break
        loss_texts.append(t)
        size += len(t)
    stream = encode_samples(loss_texts, tok, seed=seed)
    windows = torch.from_numpy(pack(stream, 512).astype(np.int64))
    loss_t, loss_d = heldout_loss(target, windows, device), heldout_loss(draft, windows, device)
    chars_per_token = size / max(1, len(stream))      # tokenizers differ between pairs: per character compares them

    tasks = line_tasks(texts, n_tasks, rng)
    eos = tok.token_to_id(EOS)
    exact = 0
    agree_runs: list[np.ndarray] = []
    for prefix, line, suffix in tqdm(tasks, desc="next-line + acceptance"):
        suf, pre = tok.encode(suffix).ids[:400], tok.encode(prefix).ids[-1200:]   # fit the 2048 positions
        ids = fim_ids(tok, pre, suf)
        # one greedy run serves both: its first line is the next-line answer (greedy is deterministic, so stopping
        # at the newline would give the same line), its first 32 tokens the trajectory the draft is scored on
        got = greedy(target, ids, 48, eos, device)
        exact += tok.decode(got).split("\n")[0].rstrip() == line.rstrip("\n").rstrip()
        cont = got[:32]
        if not cont:
            continue
        full = torch.tensor([ids + cont], device=device)
        with torch.no_grad():
            pred = draft(full)[0, len(ids) - 1:-1].argmax(-1).tolist()     # draft's guess for each target token
        agree_runs.append(np.array([a == b for a, b in zip(pred, cont)], dtype=bool))
    per_pos, alpha = acceptance_by_position(agree_runs, MAX_POSITION)
    return {
        "models": str(root), "device": torch.cuda.get_device_name(0) if device.type == "cuda" else
        (platform.processor() or "cpu"), "heldout_loss_tokens": int(windows.numel()),
        "loss_target": loss_t, "loss_draft": loss_d, "chars_per_token": chars_per_token,
        "loss_target_per_char": loss_t / chars_per_token, "loss_draft_per_char": loss_d / chars_per_token,
        "next_line_tasks": len(tasks),
        "next_line_exact_match": exact / max(1, len(tasks)), "acceptance_rate": alpha,
        "acceptance_first_i_all_accepted": per_pos,
        "expected_tokens_per_step_k4": (1 + sum(p for p in per_pos[:4] if p)) if per_pos[0] is not None else None,
        "seconds": time.time() - t0,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m completer.training.evaluate", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=[str(HOUSE_DIR)],
                    help="folder(s) with target/ and draft/ (several: compared on the same held-out text)")
    ap.add_argument("--heldout", help="held-out archive (python -m completer.training.corpus build): figures per "
                                      "language; default: this machine's Python held-out split")
    ap.add_argument("--tasks", type=int, default=200, help="next-line tasks (also the acceptance prompts), per "
                                                           "language with --heldout")
    ap.add_argument("--loss-mb", type=float, default=2.0, help="MB of held-out text for the loss (per language)")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--device", default="auto")
    args = ap.parse_args(argv)
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    command = "python -m completer.training.evaluate " + " ".join(argv if argv is not None else __import__("sys").argv[1:])
    if args.heldout:
        groups: dict[str, list[str]] = {}
        for _, lang, text in corpus.read_archive(args.heldout):
            groups.setdefault(lang, []).append(text)
        report = {"heldout": args.heldout, "command": command, "models": {
            m: {lang: figures(Path(m), texts, args.tasks, args.loss_mb, args.seed, device)
                for lang, texts in sorted(groups.items())} for m in args.models}}
    else:
        texts = [t for _, t in corpus.iter_texts("heldout")]
        reports = [{**figures(Path(m), texts, args.tasks, args.loss_mb, args.seed, device), "command": command}
                   for m in args.models]
        report = reports[0] if len(reports) == 1 else {"command": command, "models": reports}
    print(json.dumps(report, indent=2))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
