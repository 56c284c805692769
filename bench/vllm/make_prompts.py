"""Write ``bench/vllm/prompts.json``: held-out fill-in-the-middle prompts (PSM) for the vLLM house-pair benchmark.

The same recipe as ``bench/speculation.py`` (a cut at a random line of a held-out file of the models helper's corpus
split, 1500 characters before, 400 after), written to a file so that the GPU machine, which has another corpus,
runs the very same prompts.

    python bench/vllm/make_prompts.py [--n 48]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.speculation import heldout_sources, make_prompts  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--n", type=int, default=48)
    p.add_argument("--seed", type=int, default=8)
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "prompts.json")
    args = p.parse_args()
    prompts = make_prompts(heldout_sources(args.n * 2), args.n, args.seed, 1500, 400)
    args.out.write_text(json.dumps(prompts, indent=0))
    print(f"wrote {len(prompts)} prompts to {args.out}")


if __name__ == "__main__":
    main()
