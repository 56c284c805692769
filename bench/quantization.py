"""Embedded int8 / fp16 weights against float32 on the house target: held-out quality and decode speed (issue 16).

Side by side in one run, for the weight packings of ``completer.models.llama.PackedLinear`` (float32 = none,
fp16, int8): held-out next-token loss (every forward on the packed weights, so the loss sees the quantisation;
the engine itself packs only decode and verification steps), next-line exact match (the house REPORT's task:
the cursor at a random line start of a held-out file, SPM prompt, greedy to the newline), how many of those
greedy continuations (48 tokens) equal float32's, and decode ms/token (one-token steps at the task's context,
median, alternating between packings). Held-out files come from the corpus split the house pair never trained on
(``completer.training.corpus``); the number of files and tokens is recorded.

    python bench/quantization.py                               # -> bench/results/quantization-<UTC time>/
    python bench/quantization.py --tasks 60 --loss-mb 0.3 --out bench/results/quantization
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent
PACKINGS = ("none", "fp16", "int8")


def main(argv=None) -> int:
    from completer.models import HOUSE_DIR
    from completer.training import corpus
    from completer.training.evaluate import greedy, heldout_loss, line_tasks
    from completer.training.fim import encode_samples, fim_ids, pack
    from completer.models.llama import LlamaForCausalLM, PackedLinear
    from completer.models.tokenizer import EOS, load_tokenizer

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=60)
    ap.add_argument("--loss-mb", type=float, default=0.3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", default=None, help="output folder (default: a new bench/results/quantization-<UTC time>)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    out = Path(args.out) if args.out else ROOT / "bench" / "results" / f"quantization-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}"
    out.mkdir(parents=True, exist_ok=True)
    load_start = os.getloadavg()[0]
    folder = HOUSE_DIR / "target"
    tok = load_tokenizer(folder)
    kinds = [k for k in PACKINGS if k == "none" or PackedLinear.available(k) is None]
    models = {}
    for k in kinds:
        m = LlamaForCausalLM.from_pretrained(folder)
        models[k] = m.pack_(None if k == "none" else k, max_tokens=10**9)    # every forward packed: quality

    texts = list(corpus.iter_texts("heldout", int(args.loss_mb * 1e6)))
    windows = torch.from_numpy(pack(encode_samples([t for _, t in texts], tok, seed=args.seed), 512).astype(np.int64))
    loss = {k: heldout_loss(m, windows, torch.device("cpu")) for k, m in tqdm(models.items(), desc="held-out loss")}

    rng = random.Random(args.seed)
    all_texts = [t for _, t in corpus.iter_texts("heldout")]
    tasks = line_tasks(all_texts, args.tasks, rng)
    eos = tok.token_to_id(EOS)
    exact = {k: 0 for k in kinds}
    same = {k: 0 for k in kinds}
    step_ms = {k: [] for k in kinds}
    for m in models.values():
        m.packed_max_tokens = 16                      # decode as the engine does: prompts in float32
    for prefix, line, suffix in tqdm(tasks, desc="next-line + decode"):
        ids = fim_ids(tok, tok.encode(prefix).ids[-1200:], tok.encode(suffix).ids[:400])
        ref = None
        for k in kinds:
            got = greedy(models[k], ids, 48, eos, "cpu")
            ref = got if k == "none" else ref
            exact[k] += tok.decode(got).split("\n")[0].rstrip() == line.rstrip("\n").rstrip()
            same[k] += got == ref
        with torch.inference_mode():                  # decode speed at this context, packings alternating
            caches = {k: models[k].new_cache(len(ids) + 40) for k in kinds}
            for k in kinds:
                models[k](torch.tensor([ids]), caches[k], last_only=True)
            for _ in range(12):
                for k in kinds:
                    t0 = time.perf_counter()
                    models[k](torch.tensor([[ids[-1]]]), caches[k], last_only=True)
                    step_ms[k].append((time.perf_counter() - t0) * 1e3)
                    caches[k].truncate(len(ids))
    n = len(tasks)
    rows = [{"packing": k, "heldout_loss": loss[k], "loss_delta_vs_float32": loss[k] - loss["none"],
             "next_line_exact_match": exact[k] / n, "greedy_48_identical_to_float32": f"{same[k]}/{n}",
             "decode_ms_per_token_p50": statistics.median(step_ms[k]),
             "decode_ms_per_token_p95": sorted(step_ms[k])[int(0.95 * (len(step_ms[k]) - 1))]} for k in kinds]
    import subprocess
    cpu = next((l.split(":", 1)[1].strip() for l in subprocess.run(["lscpu"], capture_output=True, text=True).stdout
                .splitlines() if l.startswith("Model name")), "?")
    res = {"command": "python " + " ".join(shlex.quote(a) for a in sys.argv), "cpu": cpu, "cores": os.cpu_count(),
           "torch": torch.__version__, "threads": args.threads, "load_start": load_start,
           "load_end": os.getloadavg()[0], "heldout_files_for_loss": len(texts),
           "heldout_loss_tokens": int(windows.numel()), "next_line_tasks": n,
           "next_line_pool_files": len(all_texts), "rows": rows}
    (out / "quantization.json").write_text(json.dumps(res, indent=1) + "\n")
    md = ["# Embedded weight packings vs float32, house target (bench/quantization.py)", "",
          f"Command: `{res['command']}`  ",
          f"Machine: {cpu}, {res['cores']} cores, torch {res['torch']}, {args.threads} thread(s); load average "
          f"{load_start:.2f} at start, {res['load_end']:.2f} at end  ",
          f"Held-out loss: {res['heldout_files_for_loss']} held-out files, {res['heldout_loss_tokens']} tokens, every "
          f"forward on the packed weights. Next line: {n} tasks drawn from {len(all_texts)} held-out files. Decode: one-token steps at "
          "each task's context (~1.6k positions), packings alternating.", "",
          "| packing | held-out loss | vs float32 | next-line exact | greedy 48 tokens = float32 | decode ms/tok p50 | p95 |",
          "|---|---|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['packing']} | {r['heldout_loss']:.4f} | {r['loss_delta_vs_float32']:+.4f} | "
                  f"{r['next_line_exact_match']:.3f} | {r['greedy_48_identical_to_float32']} | "
                  f"{r['decode_ms_per_token_p50']:.2f} | {r['decode_ms_per_token_p95']:.2f} |")
    (out / "quantization.md").write_text("\n".join(md) + "\n")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    a1.bar([r["packing"] for r in rows], [r["decode_ms_per_token_p50"] for r in rows])
    a1.set_ylabel("decode ms/token (p50)")
    a2.bar([r["packing"] for r in rows], [r["next_line_exact_match"] for r in rows])
    a2.set_ylabel("next-line exact match")
    fig.suptitle(f"house target weight packings, {cpu}")
    fig.tight_layout()
    fig.savefig(out / "quantization.png", dpi=110)
    print("\n".join(md))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
