"""The language server over websockets on vLLM, on the GPU machine: several measurements per engine start, each
written as soon as it is done, within one device call's deadline.

Stages (run in the order given, each skipped when less than its estimate is left before ``--deadline-s``):

- ``lsp-7b-bf16`` / ``lsp-7b-fp8`` (issues 16, 13): a Qwen2.5-Coder-7B-shaped target with random weights
  (``load_format="dummy"``; ``dummy.py --tokenizer house``: the house tokenizer padded to the 152k vocabulary, so
  the server uses the house FIM prompt and every id the model emits decodes to house text), bf16 or
  ``quantization="fp8"``, no speculation. One server (``completer-lsp --ws``), engine started and warmed once, then
  ``bench/replay.py --connect`` twice on the same engine: ``full`` (answer at the end of the completion: keystroke
  to the full block) and ``first-line`` (``earlyAnswer``: answer at the end of the first line).
- ``lines-7b-bf16`` / ``lines-7b-fp8`` (issue 13): ``lines.py`` on the same 7B-shaped target: per keystroke of the
  traces, the server pipeline's request generating as many tokens as the real next line / block take: time to the
  first line and to the full block (random weights never end a line where code would, so the replay cannot).
- ``dummy`` (issue 16): ``dummy.py --only target-7b --quant none,fp8``: decode step and prefill against the
  bandwidth floor, each in its own engine.
- ``load`` (issue 13): ``bench/reliability.py``'s trace load (``run_load``: ``--clients`` websocket clients replaying
  the traces for ``--load-s`` seconds) against a server with the vLLM backend and the house defaults (target + house
  draft; ``--load-engine-json`` over them), GPU memory sampled each second, and where the time goes: the server's
  own ``--metrics`` (keystroke-to-answer inside the server, engine TTFT and time per token histograms) scraped each
  second, and the CPU seconds of the server process and of vLLM's engine-core process over the load.
- ``heal-repro``: ``heal_repro.py`` in its own process (one engine start): the token-healing fix served, then a raw
  vLLM request with 1024 allowed ids (served) and 1025 (kills the engine core: the 2026-12-03b deaths' cause).
- ``house-none`` / ``house-eagle3-k2`` (issue 15): the house target, no speculation / the shipped EAGLE-3 drafter at
  k=2, replay over websockets on a warmed engine; ``kill9`` after ``house-eagle3-k2``: SIGKILL of the engine-core
  process while a completion is generating: what the client gets and when, and when a completion succeeds again.
- ``house-v2-none`` / ``house-v2-auto`` (issue 15): the same replay on house v2 (the default pair), no speculation /
  ``speculation="auto"``: what ``completer tune`` saved for it on this machine (run tune first in the same call, with
  the same ``COMPLETER_TUNE_DIR``); vLLM's start lines in the server log show the speculative config it ran.
- ``house-v2-suffix``: the same replay with suffix decoding (``speculation="suffix"``, k = ``SUFFIX_K``, 8): drafts
  from the prompt and from the answers served before, which while a line is typed are mostly the same text.

    python bench/vllm/lsp_device.py --out /tmp/res --stages lsp-7b-bf16,lsp-7b-fp8,dummy --deadline-s 560

Everything goes under ``--out`` (one folder per stage, ``summary.json`` updated after each stage); ``--tar``
re-packs it into one archive after each stage (the device call returns at most 8 files).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]

from lsp.client import Server, inline_params  # noqa: E402
from completer.stats import nearest_rank  # noqa: E402

# vLLM logs to stdout by default, which a websocket server started by lsp.client.Server discards: send it to
# stderr (the server log) so that an engine-core failure's traceback is kept (2026-12-03b lost it)
os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
MODELS = Path("/tmp/completer-dummy-models")
GPU_UTIL = 0.4
# initializationOptions of every replay (the replay's own base options: maxTokens 32, debounce 30 ms)
REPLAYS = {"full": {"earlyAnswer": False}, "first-line": {"earlyAnswer": True}}
ESTIMATE_S = {"lsp-7b-bf16": 200, "lsp-7b-fp8": 200, "dummy": 200, "load": 150, "house-none": 110,
              "house-eagle3-k2": 110, "kill9": 60, "heal-repro": 100, "lines-7b-bf16": 170, "lines-7b-fp8": 170,
              "house-v2-none": 110, "house-v2-auto": 110, "house-v2-suffix": 110}
WARM_DOC = "import os\n\n\ndef read_config(path):\n    with open(path) as f:\n        \n"


def engine_for(stage: str) -> dict:
    if stage.startswith("lsp-7b"):
        e = {"backend": "vllm", "model": str(MODELS / "target-7b"), "load_format": "dummy", "dtype": "bfloat16",
             "speculation": "none", "gpu_memory_utilization": GPU_UTIL}
        if stage.endswith("fp8"):
            e["quantization"] = "fp8"
        return e
    if stage == "house-none":
        return {"backend": "vllm", "model": "house:target", "speculation": "none", "gpu_memory_utilization": GPU_UTIL}
    if stage == "house-eagle3-k2":
        return {"backend": "vllm", "model": "house:target", "speculation": "eagle3", "drafter": "house:eagle3",
                "num_speculative_tokens": 2, "gpu_memory_utilization": GPU_UTIL}
    if stage in ("house-v2-none", "house-v2-auto"):   # auto: what `completer tune` saved for it (COMPLETER_TUNE_DIR)
        return {"backend": "vllm", "model": "house:v2/target", "speculation": stage.rpartition("-")[2],
                "gpu_memory_utilization": GPU_UTIL}
    if stage == "house-v2-suffix":
        return {"backend": "vllm", "model": "house:v2/target", "speculation": "suffix",
                "num_speculative_tokens": int(os.environ.get("SUFFIX_K", "8")), "gpu_memory_utilization": GPU_UTIL}
    raise ValueError(stage)


def merge_engine(engine: dict, override_json: str) -> dict:
    """``engine`` with ``--engine-json`` over it; a null value removes the setting."""
    return {k: v for k, v in {**engine, **json.loads(override_json)}.items() if v is not None}


def gpu_mem_mib() -> int | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout
        return int(out.split()[0])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


def descendants(pid: int) -> list:
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


async def stop_server(server: Server) -> dict:
    """SIGTERM the server (its engine shuts its core down), then SIGKILL, by pid, any child it left behind."""
    kids = descendants(server.proc.pid) if server.proc else []
    t0 = time.perf_counter()
    rc = await server.stop()
    await asyncio.sleep(1.0)
    left = [p.pid for p in kids if p.is_running() and p.status() != "zombie"]
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return {"rc": rc, "stop_s": time.perf_counter() - t0, "children_left_after_sigterm": left,
            "gpu_mem_mib_after": gpu_mem_mib()}


async def start_server(engine: dict, log: Path) -> tuple[Server, dict]:
    """A websocket server with its engine started and warmed up (a few completions: the first compiles kernels)."""
    server = Server("ws", args=("--allow-model-dir", str(MODELS)), log_path=log)
    c = await server.start()
    t0 = time.perf_counter()
    r = await c.initialize(engine, maxTokens=32)
    if "result" not in r:
        raise RuntimeError(f"initialize failed: {r}")
    await c.wait_ready(400)
    ready_s = time.perf_counter() - t0
    uri = "file:///warm/warm.py"
    await c.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                             "text": WARM_DOC}})
    warm = []
    for i in range(6):
        t = time.perf_counter()
        try:
            await c.call("textDocument/inlineCompletion", inline_params(uri, 5, 8), timeout=120)
        except Exception as e:  # noqa: BLE001 -- reported, the replay will show it too
            warm.append(f"{type(e).__name__}: {e}"[:200])
            continue
        warm.append(round((time.perf_counter() - t) * 1000, 1))
    await c.call("shutdown", None, timeout=10)
    await c.notify("exit", None)
    await c.close()
    return server, {"engine_ready_s": ready_s, "warmup_ms": warm, "gpu_mem_mib_ready": gpu_mem_mib()}


def all_keystrokes(raw: dict) -> dict:
    """Figures over every keystroke of a replay (bench/report.py's table is over shown completions only)."""
    recs = [r for t in raw["configs"][0]["traces"] for r in t["records"] if r["kind"] == "key"]
    answered = [r["answer_ms"] for r in recs if r.get("answer_ms") is not None and r["status"] != "cancelled"]
    shown = [r["latency_ms"] for r in recs if r["status"] == "shown"]
    status: dict = {}
    for r in recs:
        status[r["status"]] = status.get(r["status"], 0) + 1
    return {"keystrokes": len(recs), "status": status,
            "answer_ms_all": {"p50": nearest_rank(answered, 50), "p95": nearest_rank(answered, 95),
                              "n": len(answered)},
            "shown_ms": {"p50": nearest_rank(shown, 50), "p95": nearest_rank(shown, 95), "n": len(shown)},
            "shown_before_next_key": len(shown) / len(recs) if recs else None,
            "ghost_chars_median": nearest_rank([len(r["ghost"]) for r in recs if r.get("ghost")], 50)}


async def replay_on(url: str, engine: dict, name: str, options: dict, out: Path, traces: Path) -> dict:
    from bench import replay, report

    cfg = json.dumps({"engine": engine, **options})
    args = replay.build_parser().parse_args(
        [str(traces), "--connect", url, "--configs", "", "--config", f"{name}={cfg}",
         "--out", str(out), "--name", name, "--no-plot", "--ready-timeout", "120"])
    raw = await replay.amain(args)
    report.write(raw, out, name, plot=False)
    c = raw["configs"][0]
    return {"all_keystrokes": all_keystrokes(raw), "engine_ready_s": c["engine_ready_s"], "engine": c["engine"],
            "server": c["server"]}


async def kill9(server: Server, engine: dict) -> dict:
    """SIGKILL the engine-core process while a long completion runs: time to the client's answer, then time until
    a completion succeeds again (the supervisor restarts the engine)."""
    import psutil

    core = [p for p in descendants(server.proc.pid) if "EngineCore" in " ".join(p.cmdline() or [p.name()])
            or "EngineCore" in p.name()]
    if not core:
        return {"error": "no EngineCore process found",
                "children": [(p.pid, p.name()) for p in descendants(server.proc.pid)]}
    c = await server.start()
    await c.initialize(engine, maxTokens=512)
    await c.wait_ready(60)
    uri = "file:///kill/k.py"
    await c.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                             "text": WARM_DOC}})
    _, fut = await c.request("textDocument/inlineCompletion", inline_params(uri, 5, 8))
    await asyncio.sleep(0.15)
    t_kill = time.perf_counter()
    os.kill(core[0].pid, signal.SIGKILL)
    res: dict = {"engine_core_pid": core[0].pid, "in_flight_at_kill": not fut.done()}
    try:
        got, msg = await asyncio.wait_for(fut, 30)
        res["answer_after_kill_s"] = got - t_kill
        res["answer"] = (msg.get("error") or {"result_items": len((msg.get("result") or {}).get("items") or [])})
    except Exception as e:  # noqa: BLE001
        res["answer"] = f"{type(e).__name__}: {e}"[:300]
    # recovery is probed with short completions on a second connection: 512-token ones run past answerBoundMs and
    # are answered "busy" by a healthy engine (2026-12-03c's kill9 never saw ghost text again for that reason)
    c2 = await server.start()
    await c2.initialize(engine, maxTokens=16)
    await c2.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                              "text": WARM_DOC}})
    end = time.perf_counter() + 150
    n, tries = 0, {}
    while time.perf_counter() < end:
        n += 1
        try:
            msg = await c2.call("textDocument/inlineCompletion", inline_params(uri, 5, 8), timeout=30)
            items = (msg or {}).get("items") if isinstance(msg, dict) else msg
            res.setdefault("first_answer_without_error_s", time.perf_counter() - t_kill)
            tries["ok"] = tries.get("ok", 0) + 1
            if items:
                res["recovered_after_s"] = time.perf_counter() - t_kill
                res["tries"] = n
                break
        except Exception as e:  # noqa: BLE001
            res["last_error"] = f"{type(e).__name__}: {e}"[:300]
            key = str(getattr(e, "code", type(e).__name__))
            tries[key] = tries.get(key, 0) + 1
        await asyncio.sleep(0.5)
    res["tries_by_outcome"] = tries
    await c2.close()
    try:
        st = await c.call("completer/stats", {}, timeout=30)
        res["supervisor"] = (st.get("engine") or {}).get("supervisor")
    except Exception as e:  # noqa: BLE001
        res["stats_error"] = f"{type(e).__name__}: {e}"[:200]
    await c.close()
    res["engine_core_processes_after"] = [p.pid for p in descendants(server.proc.pid)
                                          if "EngineCore" in p.name() and p.pid != core[0].pid]
    return res


def _proc_cpu(pid: int) -> float | None:
    import psutil

    try:
        t = psutil.Process(pid).cpu_times()
        return t.user + t.system
    except psutil.Error:
        return None


def _load_procs() -> dict:
    """pid of the load's language server (our child) and of its vLLM engine-core process."""
    import psutil

    out: dict = {}
    for p in psutil.Process().children(recursive=True):
        try:
            cmd = " ".join(p.cmdline() or [p.name()])
        except psutil.Error:
            continue
        if "EngineCore" in cmd or "EngineCore" in p.name():
            out.setdefault("engine_core", p.pid)
        elif "--ws" in cmd or "completer-lsp" in cmd or "lsp" in cmd.split(" ")[0]:
            out.setdefault("server", p.pid)
    return out


def _scrape(port: int) -> dict:
    """The server's Prometheus text as {metric{labels}: value} (histogram buckets, sums and counts included)."""
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    vals = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and line.startswith("completer_"):
            k, _, v = line.rpartition(" ")
            try:
                vals[k] = float(v)
            except ValueError:
                pass
    return vals


def histogram_summary(vals: dict, name: str) -> dict:
    """count, mean and bucket-bound p50/p95 (the upper bound of the bucket holding that rank) of one histogram."""
    import re

    buckets = sorted((float("inf") if m.group(1) == "+Inf" else float(m.group(1)), v) for k, v in vals.items()
                     for m in [re.match(rf'{name}_bucket{{le="([^"]+)"}}$', k)] if m)
    n = vals.get(f"{name}_count") or 0
    out = {"count": n, "mean_ms": (vals.get(f"{name}_sum", 0) / n * 1000) if n else None}
    for q in (50, 95):
        le = next((b for b, c in buckets if c >= n * q / 100), None) if n else None
        out[f"p{q}_le_ms"] = None if le is None else (le * 1000 if le != float("inf") else "inf")
    return out


async def load_stage(args, out: Path) -> dict:
    import re

    from bench import reliability

    opts = merge_engine(merge_engine({"backend": "vllm", "gpu_memory_utilization": GPU_UTIL}, args.engine_json),
                        args.load_engine_json)   # house defaults, with the load's own overrides
    samples: list = []
    stop = asyncio.Event()
    last: dict = {}

    with tempfile.TemporaryDirectory() as d:
        log = Path(d, "load-server-traces.log")

        async def sample() -> None:
            t0 = time.perf_counter()
            port = None
            while not stop.is_set():
                row: dict = {"t": round(time.perf_counter() - t0, 1), "gpu_mib": await asyncio.to_thread(gpu_mem_mib)}
                if port is None and log.exists():
                    m = re.search(r"metrics on http://[^:]+:(\d+)/metrics", log.read_text(errors="replace"))
                    port = int(m.group(1)) if m else None
                if port is not None:
                    try:
                        vals = await asyncio.to_thread(_scrape, port)
                        last["metrics"], last["metrics_t"] = vals, row["t"]
                    except Exception as e:  # noqa: BLE001 -- the server may be gone at the end
                        row["scrape_error"] = f"{type(e).__name__}"[:60]
                procs = _load_procs()
                for k, pid in procs.items():
                    cpu = _proc_cpu(pid)
                    if cpu is not None:
                        row[f"cpu_s_{k}"] = round(cpu, 2)
                        last.setdefault(f"cpu_first_{k}", (row["t"], cpu))
                        last[f"cpu_last_{k}"] = (row["t"], cpu)
                samples.append(row)
                await asyncio.sleep(1.0)

        task = asyncio.create_task(sample())
        try:
            r = await reliability.run_load(opts, ["--metrics", "127.0.0.1:0"], args.clients, args.load_s, Path(d),
                                           "traces", reliability.load_traces())
            (out / "load-server.log").write_text(log.read_text(errors="replace")[-40000:])
        finally:
            stop.set()
            await task
    lat = r.pop("latencies")
    r["latency_ms"].update(p50=nearest_rank(lat, 50), n=len(lat))
    r["gpu_mem_mib"] = {"max": max((s["gpu_mib"] for s in samples if s.get("gpu_mib") is not None), default=None)}
    r["samples_device"] = samples
    vals = last.get("metrics") or {}
    r["server_metrics"] = {"scraped_at_s": last.get("metrics_t"),
                           "request_latency": histogram_summary(vals, "completer_request_latency_seconds"),
                           "ttft": histogram_summary(vals, "completer_time_to_first_token_seconds"),
                           "tpot": histogram_summary(vals, "completer_time_per_output_token_seconds"),
                           "requests": {k: v for k, v in vals.items() if k.startswith("completer_requests_total")},
                           "raw": vals}
    cpu = {}
    for k in ("server", "engine_core"):
        a, b = last.get(f"cpu_first_{k}"), last.get(f"cpu_last_{k}")
        if a and b and b[0] > a[0]:
            cpu[k] = {"cpu_s": round(b[1] - a[1], 1), "over_s": round(b[0] - a[0], 1),
                      "cores_busy": round((b[1] - a[1]) / (b[0] - a[0]), 2)}
    r["cpu"] = cpu
    r["engine_options"] = opts
    return r


def run_heal_repro(out: Path, left: float) -> dict:
    cmd = [sys.executable, str(ROOT / "bench" / "vllm" / "heal_repro.py"), "--out", str(out)]
    t0 = time.perf_counter()
    kids: dict = {}
    with open(out / "heal_repro.log", "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        end = time.perf_counter() + max(min(left - 10, 240), 30)
        while proc.poll() is None and time.perf_counter() < end:
            kids.update((k.pid, k) for k in descendants(proc.pid))     # its engine core, to end if it stays
            time.sleep(0.5)
        if proc.poll() is None:
            proc.kill()
        rc = proc.wait() if proc.returncode is None else proc.returncode
    left_over = []
    for pid, k in kids.items():                                          # by pid, only what it started
        try:
            if k.is_running() and k.status() != "zombie":
                left_over.append(pid)
                os.kill(pid, signal.SIGKILL)
        except Exception:  # noqa: BLE001 -- gone already
            pass
    text = (out / "heal_repro.log").read_text(errors="replace")
    res = {"rc": rc, "wall_s": time.perf_counter() - t0, "command": " ".join(cmd), "killed_left_over": left_over,
           "too_many_in_log": "Too many allowed token IDs" in text}
    if (out / "result.json").exists():
        res["result"] = json.loads((out / "result.json").read_text())
    return res


def run_lines(args, stage: str, out: Path, left: float) -> dict:
    """``lines.py`` in its own process on the 7B-shaped target (its engine start included): time to the first line
    and to the full block per keystroke of the traces."""
    cmd = [sys.executable, str(ROOT / "bench" / "vllm" / "lines.py"), "--out", str(out), "--model",
           str(MODELS / "target-7b"), "--traces", str(args.traces), "--gpu-memory-utilization", str(GPU_UTIL),
           ] + (["--quantization", "fp8"] if stage.endswith("fp8") else [])
    t0 = time.perf_counter()
    with open(out / "lines.log", "w") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=max(left - 10, 30)).returncode
    res = {"rc": rc, "wall_s": time.perf_counter() - t0, "command": " ".join(cmd)}
    if (out / "lines.json").exists():
        res["summary"] = json.loads((out / "lines.json").read_text()).get("summary")
    return res


def run_dummy(args, out: Path, left: float) -> dict:
    cmd = [sys.executable, str(ROOT / "bench" / "vllm" / "dummy.py"), "--out", str(out), "--only", "target-7b", "--models-dir", "/tmp/completer-dummy-words",
           "--quant", "none,fp8", "--reps", "5", "--decode-tokens", "64", "--deadline-s", str(max(left - 60, 0)),
           "--engine-s", "90", "--gpu-memory-utilization", str(GPU_UTIL)]
    t0 = time.perf_counter()
    with open(out / "dummy.log", "w") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=max(left - 10, 30)).returncode
    lines = [ln for ln in (out / "dummy.log").read_text(errors="replace").splitlines()
             if "params" in ln or "failed" in ln or "skipped" in ln]
    return {"rc": rc, "wall_s": time.perf_counter() - t0, "command": " ".join(cmd), "lines": lines}


def save(args, summary: dict) -> None:
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    if args.tar:
        tmp = args.tar.with_suffix(".tmp")
        with tarfile.open(tmp, "w:gz") as t:
            t.add(args.out, arcname=args.out.name)
        tmp.replace(args.tar)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tar", type=Path, default=None, help="re-pack --out into this .tar.gz after each stage")
    ap.add_argument("--stages", default="lsp-7b-bf16,lsp-7b-fp8,dummy")
    ap.add_argument("--deadline-s", type=float, default=560)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--load-s", type=float, default=60)
    ap.add_argument("--load-engine-json", default="{}", help="engine settings of the load stage only, over the house "
                    "defaults, e.g. '{\"speculation\": \"none\"}'")
    ap.add_argument("--options-json", default="{}", help="server options for every replay, e.g. "
                    "'{\"tokenHealing\": false}'")
    ap.add_argument("--fp8-replays", default="full,first-line", help="the replays of lsp-7b-fp8")
    ap.add_argument("--traces", type=Path, default=ROOT / "bench" / "traces", help="replay traces (file or folder)")
    ap.add_argument("--engine-json", default="{}", help="engine settings over each stage's, null removes one (a CPU "
                    "dry run of the flow: '{\"backend\": \"torch\", \"device\": \"cpu\", "
                    "\"gpu_memory_utilization\": null}')")
    args = ap.parse_args()
    t_start = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    stages = [s for s in args.stages.split(",") if s]
    unknown = [s for s in stages if s not in ESTIMATE_S]
    if unknown:
        raise SystemExit(f"unknown stages {unknown}; known: {list(ESTIMATE_S)}")
    if any(s.startswith(("lsp-7b", "lines-7b")) for s in stages):
        from dummy import SHAPES, write_model

        write_model(MODELS / "target-7b", SHAPES["target-7b"], "house")
    summary: dict = {"argv": sys.argv, "loadavg_start": os.getloadavg(), "gpu_mem_mib_at_start": gpu_mem_mib(), "stages": {}}
    save(args, summary)
    kept: tuple | None = None          # (server, engine) of house-eagle3-k2, for kill9
    for stage in stages:
        left = args.deadline_s - (time.perf_counter() - t_start)
        if left < ESTIMATE_S[stage]:
            print(f"== {stage} skipped: {left:.0f} s left, needs ~{ESTIMATE_S[stage]} s", flush=True)
            summary["stages"][stage] = {"skipped": f"{left:.0f} s left"}
            continue
        print(f"== {stage} ({left:.0f} s left) {time.strftime('%H:%M:%S')}", flush=True)
        out = args.out / stage
        out.mkdir(exist_ok=True)
        t0 = time.perf_counter()
        res: dict = {}
        server = None
        try:
            if stage == "dummy":
                res = await asyncio.to_thread(run_dummy, args, out, left)
            elif stage.startswith("lines-7b"):
                res = await asyncio.to_thread(run_lines, args, stage, out, left)
            elif stage == "heal-repro":
                res = await asyncio.to_thread(run_heal_repro, out, left)
            elif stage == "load":
                res = await load_stage(args, out)
            elif stage == "kill9":
                if kept is None:
                    res = {"skipped": "needs house-eagle3-k2 first"}
                else:
                    (server, engine), kept = kept, None
                    res = await kill9(server, engine)
            else:
                engine = merge_engine(engine_for(stage), args.engine_json)
                server, res["start"] = await start_server(engine, out / "server.log")
                print(f"   engine ready in {res['start']['engine_ready_s']:.0f} s, warm-up "
                      f"{res['start']['warmup_ms']} ms", flush=True)
                replays = ({n: REPLAYS[n] for n in args.fp8_replays.split(",") if n} if stage == "lsp-7b-fp8" else
                           REPLAYS if stage.startswith("lsp-7b") else {"replay": {}})
                for name, opts in replays.items():
                    r = await replay_on(server.url, engine, name, {**json.loads(args.options_json), **opts}, out,
                                        args.traces)
                    res[name] = r
                    a = r["all_keystrokes"]
                    print(f"   {name}: all keys p50/p95 {a['answer_ms_all']['p50']}/{a['answer_ms_all']['p95']} ms, "
                          f"shown p50/p95 {a['shown_ms']['p50']}/{a['shown_ms']['p95']} ms, shown before next key "
                          f"{a['shown_before_next_key']}", flush=True)
                    summary["stages"][stage] = res
                    save(args, summary)
                if stage == "house-eagle3-k2" and "kill9" in stages:
                    kept, server = (server, engine), None
        except Exception as e:  # noqa: BLE001 -- recorded; the next stage still runs
            import traceback

            res["error"] = f"{type(e).__name__}: {e}"[:2000]
            traceback.print_exc()
        finally:
            if server is not None:
                res["stop"] = await stop_server(server)
        res["stage_wall_s"] = time.perf_counter() - t0
        summary["stages"][stage] = res
        save(args, summary)
        print(f"   {stage} done in {res['stage_wall_s']:.0f} s: "
              f"{json.dumps({k: v for k, v in res.items() if k in ('error', 'lines', 'skipped')})[:600]}", flush=True)
    if kept is not None:
        summary["stages"].setdefault("kill9", {})["stop"] = await stop_server(kept[0])
    summary["gpu_mem_mib_at_end"] = gpu_mem_mib()
    summary["wall_s"] = time.perf_counter() - t_start
    summary["loadavg_end"] = os.getloadavg()
    save(args, summary)


if __name__ == "__main__":
    asyncio.run(main())
