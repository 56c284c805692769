"""How often a cost twin's greedy output drifts from its house model's (completer.training.twin).

In fp32 a twin computes the house model's function to rounding; in bf16 its scaled norms and q weights round
differently and its sums run over more (zero) terms in another order, so after enough tokens a near-tie can turn.
This runs both models greedily (the project's own Llama, ``completer.models.llama``) over fill-in-the-middle
prompts from held-out files (the ones ``completer tune --requests fixed`` samples), and reports per prompt the first
generated position where the twin's token differs from the house model's, and the logits' largest difference over
the prompt relative to their largest magnitude.

    python bench/twin_drift.py --twin /tmp/twin/target --dtype fp32 --n 12 --tokens 256 --out drift.json
    python bench/twin_drift.py --twin /tmp/twin/target --device cuda --dtype bf16 --n 24 --tokens 128

(build a twin first: ``completer twin --shape 7b --out /tmp/twin`` or a small one, e.g. ``--shape 640x16``).
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from completer.models import resolve_model  # noqa: E402
from completer.models.llama import LlamaForCausalLM  # noqa: E402
from completer.training import corpus  # noqa: E402
from completer.training.drafter import _fim_prompts, greedy_continuation  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--twin", required=True, help="the twin's target folder")
    ap.add_argument("--source", default=None, help="the model it was built from (default: its completer_twin source)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", choices=list(DTYPES), default="fp32")
    ap.add_argument("--n", type=int, default=12, help="prompts")
    ap.add_argument("--tokens", type=int, default=128, help="greedy tokens per prompt (no stop at end of text)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    twin_cfg = json.loads((Path(args.twin) / "config.json").read_text())
    source = args.source or twin_cfg["completer_twin"]["source"]
    from tokenizers import Tokenizer

    src_dir = resolve_model(source)
    tok = Tokenizer.from_file(str(src_dir / "tokenizer.json"))
    texts = (t for _, t in corpus.iter_texts("heldout", 20_000_000))
    prompts = _fim_prompts(tok, texts, args.n, random.Random(1234), 900)
    dtype = DTYPES[args.dtype]
    t0 = time.time()
    house = LlamaForCausalLM.from_pretrained(src_dir, device=args.device, dtype=dtype)
    twin = LlamaForCausalLM.from_pretrained(args.twin, device=args.device, dtype=dtype)
    rows: list[dict] = []

    def summary() -> dict:
        diffs = [r["first_difference"] for r in rows]
        drifted = [d for d in diffs if d is not None]
        return {"twin": str(args.twin), "source": source, "twin_shape": twin_cfg["completer_twin"]["shape"],
                "device": args.device if args.device == "cpu" else torch.cuda.get_device_name(), "dtype": args.dtype,
                "prompts": len(rows), "tokens": args.tokens, "identical": len(rows) - len(drifted),
                "first_difference_median_of_drifted": statistics.median(drifted) if drifted else None,
                "first_difference_min": min(drifted) if drifted else None,
                "tokens_identical_share": sum((d if d is not None else r["generated"]) for d, r in zip(diffs, rows))
                / max(1, sum(r["generated"] for r in rows)),
                "prompt_logits_max_rel_diff": max((r["prompt_logits_max_rel_diff"] for r in rows), default=None),
                "machine": {"cpu": platform.processor() or platform.machine(), "torch": torch.__version__},
                "seconds": round(time.time() - t0, 1), "rows": rows}

    for i, p in enumerate(prompts):
        x = torch.tensor([p], device=args.device)
        with torch.no_grad():
            a, b = house(x).float(), twin(x).float()
        rel = ((a - b).abs().max() / a.abs().max()).item()
        same_top = (a.argmax(-1) == b.argmax(-1)).float().mean().item()
        g_house = greedy_continuation(house, p, args.tokens, None, args.device)
        g_twin = greedy_continuation(twin, p, args.tokens, None, args.device)
        d = first_difference(g_house, g_twin)
        rows.append({"prompt_tokens": len(p), "generated": len(g_house), "first_difference": d,
                     "prompt_logits_max_rel_diff": rel, "prompt_top1_agreement": same_top})
        print(f"[{i + 1}/{len(prompts)}] first difference at {d} of {len(g_house)}; prompt logits rel diff "
              f"{rel:.2e}; {time.time() - t0:.0f} s", file=sys.stderr)
        if args.out:                                 # after each prompt: a run cut short keeps what it measured
            Path(args.out).write_text(json.dumps(summary(), indent=1) + "\n")
    out = summary()
    print(json.dumps({k: v for k, v in out.items() if k != "rows"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
