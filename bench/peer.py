"""The embedded torch engine next to llama.cpp on the same model, prompts and machine, in one run (issue 17).

What it measures, per thread count (1 and 2 by default) and per configuration -- torch: no speculation, n-gram,
draft, draft+n-gram (adaptive k, the engine's defaults otherwise); llama.cpp (PyPI ``llama-cpp-python``): the
house target written as GGUF f32 and q8_0 by ``completer/training/gguf_write.py``, or a GGUF model's own file
(``--model gguf:smollm2``: llama.cpp config ``file``, compared with the engine's default, which keeps the file's
blocks, and ``none/fp16``, the float32 prompt + fp16 decode path), plain greedy decoding:

- cold: a FIM prompt with nothing cached (torch: no cache key; llama.cpp: ``reset()``);
- warm, the typing case: the same prompt without its last 6 tokens was completed just before (torch: a cache key
  per document; llama.cpp: ``generate()``'s own prefix match), so a few prompt tokens are new;

prefill (request to first token), decode ms/token ((32-token latency - prefill) / 31), 32-token latency p50/p95,
greedy identity (every configuration's 32 tokens against llama.cpp f32 and against torch without speculation),
the engine's chosen thread counts, and the resident memory of a fresh process per engine. Prompts: FIM prompts
cut from held-out files and built by the project's context builder, as ``bench/speculation.py`` makes them; the
same token ids go to both engines; end-of-text is ignored so that every request yields 32 tokens.

Each engine runs in its own worker process per thread count; the driver alternates requests between them
(rotating which goes first) so that both see the same machine load, and records the 1-minute load average with
every request. Results: ``peer.json`` (every request), ``peer.md`` (tables), ``peer.png``, in a new folder.

llama.cpp is an optional, benchmark-only extra (a ~3.5-minute source build on 2 cores):

    CMAKE_ARGS="-DGGML_NATIVE=ON" pip install llama-cpp-python
    python bench/peer.py                         # -> bench/results/peer-<UTC time>/
    python bench/peer.py --prompts 12 --repeats 3 --out bench/results/peer

Without it the torch rows are still measured and the llama.cpp rows say why they are missing.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from completer.stats import nearest_rank

try:
    from bench import record
except ImportError:                 # run as a file (the --worker processes): bench/ is on sys.path
    import record

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
TORCH_CONFIGS = {"none": ("none", None), "ngram": ("ngram", None), "draft": ("draft", None),   # (speculation,
                 "draft+ngram": ("draft+ngram", None), "none/int8": ("none", "int8"),          # quantization)
                 "ngram/int8": ("ngram", "int8"), "none/float32": ("none", "none"),
                 "none/fp16": ("none", "fp16"), "draft/fp16": ("draft", "fp16")}
LLAMA_CONFIGS = ("f32", "q8_0", "file")   # file: a GGUF model's own file (e.g. --model gguf:smollm2), as it ships
WARM_CUT = 6                     # tokens typed since the previous request in the warm case


# --- workers (one process per engine and thread count; JSON lines on stdin/stdout) ----------------------------
def _packing_label(packing: str | None) -> str | None:
    """The engine's decode-step weights and which kernel multiplies them (the engine's own, or torch's)."""
    if packing == "gguf":
        return "gguf (the file's own Q4/Q8 blocks at every step, completer kernels)"
    if packing != "fp16":
        return packing
    from completer.models import kernels
    return "fp16 (completer kernels)" if kernels.ops() is not None else f"fp16 (torch FBGEMM: {kernels.reason()})"



def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def torch_worker(threads: int, configs: list[str], quantization: str | None, model: str, draft: str) -> None:
    import asyncio

    from completer.engine import EngineConfig, Request
    from completer.engine.torch.engine import TorchEngine

    runtime = rss_mb()                                    # the interpreter with torch and the engine's modules
    loop = asyncio.new_event_loop()
    engines = {}
    for name in configs:
        spec, quant = TORCH_CONFIGS[name]
        engines[name] = TorchEngine(EngineConfig(model=model, draft=draft, speculation=spec,
                                                 device="cpu", threads=threads, quantization=quant or quantization))
        engines[name].stop_ids = set()                    # every request yields max_new tokens
    timing: dict = {}

    def timed(eng):
        step = eng._step

        def wrapper(run):                                 # instrumentation only: when the first step ends
            out = step(run)
            timing.setdefault(run.request.request_id, time.perf_counter())
            return out
        eng._step = wrapper

    for eng in engines.values():
        timed(eng)

    async def one(eng, rid, ids, max_new, key):
        toks = []
        t0 = time.perf_counter()
        async for chunk in eng.generate(Request(rid, list(ids), max_new_tokens=max_new, cache_key=key)):
            toks.extend(chunk.token_ids)
        t1 = time.perf_counter()
        return toks, (timing.pop(rid) - t0) * 1e3, (t1 - t0) * 1e3

    print(json.dumps({"ready": True, "rss_mb": rss_mb(), "runtime_rss_mb": runtime}), flush=True)
    n = 0
    for line in sys.stdin:
        msg = json.loads(line)
        eng = engines[msg["config"]]
        n += 1
        key = f"doc{n}" if msg.get("prev") else None
        if msg.get("prev"):
            loop.run_until_complete(one(eng, f"p{n}", msg["prev"], msg["max_new"], key))
        toks, prefill, lat = loop.run_until_complete(one(eng, f"r{n}", msg["ids"], msg["max_new"], key))
        c = eng.counters()
        print(json.dumps({"tokens": toks, "prefill_ms": prefill, "latency_ms": lat, "rss_mb": rss_mb(),
                          "thread_stats": eng.thread_stats(), "packing": _packing_label(eng.packing),
                          "accepted": c.get("accepted_tokens"), "drafted": c.get("draft_tokens")}), flush=True)
    for eng in engines.values():
        loop.run_until_complete(eng.close())


def llama_worker(threads: int, configs: list[str], gguf_dir: str) -> None:
    import llama_cpp
    import llama_cpp.llama as ll

    runtime = rss_mb()                                    # the interpreter with llama-cpp-python and its library

    default = llama_cpp.llama_model_default_params

    def no_repack():   # q8_0 in llama.cpp's AMX/repack buffers crashes on multi-token batches on this CPU family
        p = default()
        p.use_extra_bufts = False
        return p
    ll.llama_cpp.llama_model_default_params = no_repack
    models = {c: llama_cpp.Llama(str(Path(gguf_dir) / f"target-{c}.gguf"), n_ctx=2048, n_threads=threads,
                                 n_threads_batch=threads, verbose=False) for c in configs}

    def one(llm, ids, max_new):
        toks = []
        t0 = time.perf_counter()
        t_first = None
        for t in llm.generate(ids, temp=0.0, repeat_penalty=1.0):
            toks.append(int(t))
            if t_first is None:
                t_first = time.perf_counter()
            if len(toks) >= max_new:
                break
        t1 = time.perf_counter()
        return toks, (t_first - t0) * 1e3, (t1 - t0) * 1e3

    print(json.dumps({"ready": True, "rss_mb": rss_mb(), "runtime_rss_mb": runtime}), flush=True)
    for line in sys.stdin:
        msg = json.loads(line)
        llm = models[msg["config"]]
        llm.reset()
        if msg.get("prev"):
            one(llm, msg["prev"], msg["max_new"])
        toks, prefill, lat = one(llm, msg["ids"], msg["max_new"])
        print(json.dumps({"tokens": toks, "prefill_ms": prefill, "latency_ms": lat, "rss_mb": rss_mb()}), flush=True)


class Worker:
    def __init__(self, kind: str, threads: int, configs: list[str], extra: list[str]):
        self.kind, self.threads, self.configs = kind, threads, configs
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", kind, "--threads", str(threads),
               "--configs", ",".join(configs), *extra]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                                     cwd=str(ROOT))
        hello = self._read()
        self.rss_after_load = hello["rss_mb"]
        self.rss_runtime = hello.get("runtime_rss_mb")

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.kind} worker ({self.threads} threads) exited with {self.proc.wait()}")
        return json.loads(line)

    def run(self, config: str, ids: list[int], prev: list[int] | None, max_new: int) -> dict:
        self.proc.stdin.write(json.dumps({"config": config, "ids": ids, "prev": prev, "max_new": max_new}) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


# --- driver ------------------------------------------------------------------------------------------------------
def machine() -> dict:
    try:
        import llama_cpp
        llama = llama_cpp.__version__
    except ImportError:
        llama = None
    return record.machine(llama_cpp_python=llama)


def prompts(n: int, seed: int, budget: int, model: str) -> tuple[list[list[int]], list[str]]:
    try:                                   # imported as bench.peer (tests) or run as a script (python bench/peer.py)
        from bench.speculation import heldout_sources, make_prompts
    except ImportError:
        from speculation import heldout_sources, make_prompts
    from tokenizers import Tokenizer

    from completer.models import resolve_model
    from completer.prompt import template_for_model

    folder = resolve_model(model)
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    count = lambda s: len(tok.encode(s, add_special_tokens=False).ids)  # noqa: E731
    ps = make_prompts(heldout_sources(n), n, seed, 3000, 600, count, budget, template_for_model(folder))
    return [tok.encode(p["prompt"], add_special_tokens=True).ids for p in ps], [Path(p["file"]).name for p in ps]


def reference_config(rows: list[dict]) -> str:
    """The llama.cpp configuration the others are compared with: f32 when it ran, else the first that did."""
    cfgs = [r["config"] for r in rows if r["engine"] == "llama"]
    return "f32" if "f32" in cfgs else (cfgs[0] if cfgs else "f32")


def summarise(rows: list[dict]) -> list[dict]:
    cells: dict = {}
    for r in rows:
        cells.setdefault((r["mode"], r["threads"], r["engine"], r["config"]), []).append(r)
    ref_cfg = reference_config(rows)
    ref = {(r["mode"], r["threads"], r["prompt"], r["repeat"]): r["tokens"] for r in rows
           if r["engine"] == "llama" and r["config"] == ref_cfg}
    base = {(r["mode"], r["threads"], r["prompt"], r["repeat"]): r["tokens"] for r in rows
            if r["engine"] == "torch" and r["config"] == "none"}
    out = []
    for (mode, thr, eng, cfg), rs in sorted(cells.items()):
        dec = [(r["latency_ms"] - r["prefill_ms"]) / max(1, len(r["tokens"]) - 1) for r in rs]
        lat = [r["latency_ms"] for r in rs]
        key = lambda r: (mode, thr, r["prompt"], r["repeat"])  # noqa: E731
        same_llama = [r["tokens"] == ref[key(r)] for r in rs if key(r) in ref]
        same_none = [r["tokens"] == base[key(r)] for r in rs if key(r) in base]
        load = [r["load1"] for r in rs]
        acc = [r for r in rs if r.get("drafted")]
        out.append({
            "mode": mode, "threads": thr, "engine": eng, "config": cfg, "n": len(rs),
            "prefill_ms_p50": statistics.median(r["prefill_ms"] for r in rs),
            "decode_ms_per_token_p50": statistics.median(dec), "decode_ms_per_token_p95": nearest_rank(dec, 95),
            "latency_ms_p50": statistics.median(lat), "latency_ms_p95": nearest_rank(lat, 95),
            "identical_to_llama_f32": f"{sum(same_llama)}/{len(same_llama)}" if same_llama else None,
            "llama_reference": ref_cfg,
            "identical_to_torch_none": f"{sum(same_none)}/{len(same_none)}" if same_none else None,
            "load1_min_med_max": [min(load), statistics.median(load), max(load)],
            "threads_chosen": rs[-1].get("thread_stats"),
        })
    return out


def markdown(res: dict) -> str:
    m = res["machine"]
    ref = next((r.get("llama_reference") for r in res["summary"]), "f32") or "f32"
    lines = [f"# Embedded torch engine vs llama.cpp, {res.get('model', 'house target')}, CPU (bench/peer.py)", "",
             f"Command: `{res['command']}`  ",
             f"Machine: {m['cpu']}, {m['cores']} cores, torch {m['torch']}, llama-cpp-python "
             f"{m['llama_cpp_python'] or 'not installed'}, Python {m['python']}  ",
             f"Load average (1 min) at start {res['load_start']:.2f}, at end {res['load_end']:.2f}; per cell min/median/max "
             "below. Other jobs share these cores; requests alternate between the engines so both see the same load.  ",
             f"{res['n_prompts']} FIM prompts from held-out files ({res['prompt_tokens_min']}-{res['prompt_tokens_max']} "
             f"tokens, median {res['prompt_tokens_median']}), {res['repeats']} repeats, {res['max_new']} greedy tokens "
             f"each; warm = the prompt without its last {WARM_CUT} tokens was completed just before.  ",
             f"torch weights for decode steps: {res['torch_packing']}."]
    if res.get("llama_missing"):
        lines.append(f"llama.cpp rows missing: {res['llama_missing']}")
    lines.append("")
    for mode in ("cold", "warm"):
        lines += [f"## {mode}", "",
                  "| threads | engine | config | prefill ms | decode ms/tok p50 | p95 | 32-tok p50 ms | p95 ms | "
                  f"= llama {ref} | = torch none | load min/med/max | threads chosen (prompt/step) |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in res["summary"]:
            if r["mode"] != mode:
                continue
            tc = r.get("threads_chosen") or {}
            chosen = f"{tc.get('prompt', {}).get('chosen', '-')}/{tc.get('step', {}).get('chosen', '-')}" if tc else "-"
            load = "/".join(f"{x:.2f}" for x in r["load1_min_med_max"])
            lines.append(f"| {r['threads']} | {r['engine']} | {r['config']} | {r['prefill_ms_p50']:.1f} | "
                         f"{r['decode_ms_per_token_p50']:.2f} | {r['decode_ms_per_token_p95']:.2f} | "
                         f"{r['latency_ms_p50']:.1f} | {r['latency_ms_p95']:.1f} | {r['identical_to_llama_f32'] or '-'} | "
                         f"{r['identical_to_torch_none'] or '-'} | {load} | {chosen} |")
        lines.append("")
    lines += [f"## Ratios (torch / llama.cpp {ref}, medians of the same run)", "",
              f"| mode | threads | decode torch none / llama {ref} | best torch config | its 32-tok p50 / llama {ref} p50 | "
              "torch prefill / llama prefill |", "|---|---|---|---|---|---|"]
    for r in res["ratios"]:
        lines.append(f"| {r['mode']} | {r['threads']} | {r['decode_ratio']:.2f} | {r['best_torch']} | "
                     f"{r['latency_ratio_best']:.2f} | {r['prefill_ratio']:.2f} |")
    lines += ["", "## Memory (VmRSS of a fresh worker process, 1 thread)", "",
              "runtime: the process after its imports (Python with torch and the engine's modules, or with "
              "llama-cpp-python), before any model; what the model and its request add is the rest.", "",
              "| engine | config | runtime MB | after load MB | after one request MB | added by model and request MB |",
              "|---|---|---|---|---|---|"]
    for r in res["rss"]:
        rt = r.get("runtime_mb")
        added = "-" if rt is None else f"{r['after_request_mb'] - rt:.0f}"
        lines.append(f"| {r['engine']} | {r['config']} | {'-' if rt is None else f'{rt:.0f}'} | "
                     f"{r['after_load_mb']:.0f} | {r['after_request_mb']:.0f} | {added} |")
    return "\n".join(lines) + "\n"


def ratios(summary: list[dict]) -> list[dict]:
    out = []
    idx = {(r["mode"], r["threads"], r["engine"], r["config"]): r for r in summary}
    ref = next((r.get("llama_reference") for r in summary), "f32") or "f32"
    for (mode, thr, eng, cfg), r in idx.items():
        if eng != "llama" or cfg != ref:
            continue
        torch_rows = [x for (m, t, e, _), x in idx.items() if (m, t, e) == (mode, thr, "torch")]
        none = idx.get((mode, thr, "torch", "none"))
        if not torch_rows or none is None:
            continue
        best = min(torch_rows, key=lambda x: x["latency_ms_p50"])
        out.append({"mode": mode, "threads": thr,
                    "decode_ratio": none["decode_ms_per_token_p50"] / r["decode_ms_per_token_p50"],
                    "best_torch": best["config"], "latency_ratio_best": best["latency_ms_p50"] / r["latency_ms_p50"],
                    "prefill_ratio": none["prefill_ms_p50"] / r["prefill_ms_p50"]})
    return sorted(out, key=lambda r: (r["mode"], r["threads"]))


def plot(res: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(18, 5))
    for ax, (mode, field, title) in zip(axes, [("cold", "decode_ms_per_token_p50", "decode ms/token (cold, p50)"),
                                               ("cold", "latency_ms_p50", "32-token latency ms, cold (p50)"),
                                               ("warm", "latency_ms_p50", "32-token latency ms, warm typing (p50)")]):
        rows = [r for r in res["summary"] if r["mode"] == mode]
        names = sorted({(r["engine"], r["config"]) for r in rows})
        threads = sorted({r["threads"] for r in rows})
        w = 0.8 / max(1, len(threads))
        for j, t in enumerate(threads):
            vals = [next((r[field] for r in rows if (r["engine"], r["config"]) == n and r["threads"] == t), 0)
                    for n in names]
            ax.bar([i + j * w for i in range(len(names))], vals, w, label=f"{t} thread(s)")
        ax.set_xticks([i + w * (len(threads) - 1) / 2 for i in range(len(names))])
        ax.set_xticklabels([f"{e}\n{c}" for e, c in names], fontsize=8)
        ax.set_title(title)
        ax.legend()
    fig.suptitle(f"torch engine vs llama.cpp, {res.get('model', 'house target')}, {res['machine']['cpu']} "
                 f"({res['machine']['cores']} cores)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def rss_probe(kind: str, config: str, extra: list[str], ids: list[int], max_new: int) -> dict:
    w = Worker(kind, 1, [config], extra)
    try:
        after = w.run(config, ids, None, max_new)["rss_mb"]
    finally:
        w.close()
    return {"engine": kind, "config": config, "runtime_mb": w.rss_runtime, "after_load_mb": w.rss_after_load,
            "after_request_mb": after}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--max-new", type=int, default=32)
    p.add_argument("--budget", type=int, default=1024, help="prompt budget in tokens (the LSP default)")
    p.add_argument("--torch-configs", default="none,ngram,draft,draft+ngram,none/int8",
                   help=f"of {','.join(TORCH_CONFIGS)} (name/quantization)")
    p.add_argument("--llama-configs", default=None,
                   help="of f32, q8_0 (the model written as GGUF), file (a GGUF model's own file); default: file for "
                        "a GGUF model, else f32,q8_0")
    p.add_argument("--quantization", default=None, help="torch EngineConfig.quantization (default: the engine's)")
    p.add_argument("--modes", default="cold,warm")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", default="house:target", help="a Llama folder (llama.cpp gets it as GGUF)")
    p.add_argument("--draft", default="house:draft")
    p.add_argument("--out", default=None, help="output folder (default: a new bench/results/peer-<UTC time>)")
    p.add_argument("--worker", choices=["torch", "llama"], help=argparse.SUPPRESS)
    p.add_argument("--configs", help=argparse.SUPPRESS)
    p.add_argument("--gguf-dir", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker == "torch":
        torch_worker(args.threads[0], args.configs.split(","), args.quantization, args.model, args.draft)
        return 0
    if args.worker == "llama":
        llama_worker(args.threads[0], args.configs.split(","), args.gguf_dir)
        return 0

    from tqdm import tqdm

    out = Path(args.out) if args.out else RESULTS / f"peer-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}"
    if out.exists() and any(out.iterdir()) and args.out is None:
        raise SystemExit(f"{out} exists; pass --out")
    out.mkdir(parents=True, exist_ok=True)
    load_start = os.getloadavg()[0]
    ids, files = prompts(args.prompts, args.seed, args.budget, args.model)
    tcfgs = [c for c in args.torch_configs.split(",") if c]
    unknown = [c for c in tcfgs if c not in TORCH_CONFIGS]
    if unknown:
        raise SystemExit(f"unknown torch configs {unknown}; known: {', '.join(TORCH_CONFIGS)}")
    from completer.models import resolve_model
    gguf_file = json.loads((resolve_model(args.model) / "config.json").read_text()).get("completer_gguf")
    chosen = args.llama_configs if args.llama_configs is not None else ("file" if gguf_file else "f32,q8_0")
    lcfgs = [c for c in chosen.split(",") if c]                  # "" = no llama.cpp rows
    if "file" in lcfgs and not gguf_file:
        raise SystemExit(f"llama config 'file' needs a GGUF model; {args.model} is not one")
    llama_missing = None
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        llama_missing = ("llama-cpp-python is not installed (benchmark-only extra: "
                         "CMAKE_ARGS=\"-DGGML_NATIVE=ON\" pip install llama-cpp-python, a ~3.5-minute source build)")
        lcfgs = []
    tmp = tempfile.TemporaryDirectory(prefix="peer-gguf-")
    if lcfgs:
        from completer.training.gguf_write import write_gguf
        for c in lcfgs:
            if c == "file":
                (Path(tmp.name) / "target-file.gguf").symlink_to(gguf_file)
            else:
                write_gguf(resolve_model(args.model), Path(tmp.name) / f"target-{c}.gguf", c)
    qx = (["--quantization", args.quantization] if args.quantization else []) + ["--model", args.model, "--draft",
                                                                                args.draft]
    workers = []
    for t in args.threads:
        workers.append(Worker("torch", t, tcfgs, qx))
        if lcfgs:
            workers.append(Worker("llama", t, lcfgs, ["--gguf-dir", tmp.name]))
    modes = args.modes.split(",")
    jobs = [(w, c) for w in workers for c in w.configs]
    # warm-up: one request per configuration (first-call allocations, thread measurements start)
    for w, c in jobs:
        w.run(c, ids[0], None, 4)
    rows = []
    total = args.repeats * len(ids) * len(modes) * len(jobs)
    with tqdm(total=total, desc="peer bench", unit="request") as bar:
        for rep in range(args.repeats):
            for i, prompt in enumerate(ids):
                for mode in modes:
                    k = (rep * len(ids) + i) % len(jobs)
                    for w, c in jobs[k:] + jobs[:k]:            # rotate which engine goes first
                        prev = prompt[:-WARM_CUT] if mode == "warm" else None
                        r = w.run(c, prompt, prev, args.max_new)
                        r.update(mode=mode, threads=w.threads, engine=w.kind, config=c, prompt=i, repeat=rep,
                                 load1=os.getloadavg()[0], prompt_tokens=len(prompt))
                        rows.append(r)
                        bar.update(1)
    packing = next((r.get("packing") for r in rows if r["engine"] == "torch" and r["config"] == "none"), None)
    for w in workers:
        w.close()
    rss = [rss_probe("torch", "none", qx, ids[0], args.max_new)]
    if "draft" in tcfgs:
        rss.append(rss_probe("torch", "draft", qx, ids[0], args.max_new))
    for c in lcfgs:
        rss.append(rss_probe("llama", c, ["--gguf-dir", tmp.name], ids[0], args.max_new))
    tmp.cleanup()
    summary = summarise(rows)
    lens = [len(x) for x in ids]
    res = {"command": "python " + " ".join(shlex.quote(a) for a in sys.argv), "machine": machine(), "model": args.model,
           "load_start": load_start, "load_end": os.getloadavg()[0], "n_prompts": len(ids), "prompt_files": files,
           "prompt_tokens_min": min(lens), "prompt_tokens_max": max(lens),
           "prompt_tokens_median": int(statistics.median(lens)), "repeats": args.repeats, "max_new": args.max_new,
           "torch_packing": packing or "float32 (no packing)", "llama_missing": llama_missing,
           "summary": summary, "ratios": ratios(summary), "rss": rss, "requests": rows}
    paths = record.write(out, "peer", res, markdown(res), lambda path: plot(res, path))
    print(markdown(res))
    print("wrote " + ", ".join(map(str, paths.values())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
