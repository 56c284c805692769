"""Shared pieces of the vLLM benchmarks: arguments, timing one request, statistics, JSON output."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench import record
from completer.engine import Request
from completer.engine.base import counted_between, tokens_per_step
from completer.stats import nearest_rank

ROOT = Path(__file__).resolve().parents[2]


def base_parser(doc: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "bench/results/tmp")) / "vllm",
                   help="folder for the JSON results (default $OUT/vllm)")
    p.add_argument("--tensor-parallel-size", type=int, default=1, help="vLLM tensor parallelism for the target")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.35)
    p.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs / torch.compile (default: on)")
    return p


def engine_overrides(max_model_len: int | None = None) -> dict:
    """Extra vLLM engine arguments for single-user latency runs: few sequences, small CUDA-graph set."""
    kw = dict(max_num_seqs=8, compilation_config={"cudagraph_capture_sizes": [1, 2, 4, 8, 16, 32, 64]})
    if max_model_len:
        kw["max_model_len"] = max_model_len
    return kw


async def timed(engine, request: Request) -> dict:
    """Run one request; TTFT (first token), latency (last chunk), token count, ids."""
    t0 = time.perf_counter()
    ttft, ids, text, reason = None, [], "", None
    async for chunk in engine.generate(request):
        if chunk.token_ids and ttft is None:
            ttft = time.perf_counter() - t0
        ids.extend(chunk.token_ids)
        text += chunk.text
        if chunk.finished:
            reason = chunk.finish_reason
    lat = time.perf_counter() - t0
    return {"ttft_s": ttft, "latency_s": lat, "tokens": len(ids), "ids": ids, "text": text, "finish": reason}


def summary(xs) -> dict:
    xs = [x for x in xs if x is not None]
    return {"median": statistics.median(xs) if xs else None, "p95": nearest_rank(xs, 95), "n": len(xs)}


def counters_delta(after: dict, before: dict) -> dict:
    """Spec-decode counters accumulated between two snapshots (per position too), with the mean tokens per step."""
    d = counted_between(before, after)
    d["mean_tokens_per_step"] = tokens_per_step(d)
    return d


def machine() -> dict:
    """The machine (bench.record's, with the GPU and the vLLM version) and the command line."""
    extra = {"argv": sys.argv}
    try:
        extra["gpu"] = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                                       "--format=csv,noheader"], capture_output=True, text=True,
                                      timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        extra["gpu"] = None
    try:
        import vllm

        extra["vllm"] = vllm.__version__
    except ImportError:
        pass
    return record.machine(**extra)


def write_json(out: Path, name: str, data: dict) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    path.write_text(json.dumps(data, indent=1))
    print(f"wrote {path}", flush=True)
    return path
