"""Prefix-cache hit rate with and without replica affinity: users typing the traces through ``vllm-router`` in front
of two ``vllm serve`` replicas, the remote backend sending its session header.

    python -m bench.remote_affinity [--vllm .venv-vllm/bin/vllm] [--users 4] [--rounds 2] [--out FOLDER]

Two routers over the same two replicas: ``consistent_hash`` (hashes the remote backend's ``X-Session-Id``: a user's
document stays on one replica) and ``round_robin`` (no affinity). Each round, for each policy in turn (interleaved),
both replicas' prefix caches are emptied (``POST /reset_prefix_cache``, vLLM's dev endpoint) and every user replays
one typing trace: per keystroke the document as edited, the project's own prompt at the cursor
(``completer.pipeline.plan``: tree-sitter context, FIM template, token healing) and a completion of at most
``--max-tokens`` through the remote backend, one keystroke after another (users concurrently). Counted from
vLLM's metrics on both replicas: ``vllm:prefix_cache_hits`` / ``vllm:prefix_cache_queries`` (tokens), and the
seconds per keystroke (request sent to completion done). vLLM's CPU platform caches whole blocks of 128 tokens.

Writes ``affinity.json``, ``README.md`` and ``affinity.png`` to ``--out`` (default: bench/results/remote/affinity-<time>).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
import urllib.request
from pathlib import Path

from lsp import trace as tr

ROOT = Path(__file__).resolve().parents[1]
POLICIES = ("consistent_hash", "round_robin")


def loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().strip()
    except OSError:
        return "?"


def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else "?"
    return {"cpu": cpu, "cores": os.cpu_count(), "python": sys.version.split()[0]}


def free_port() -> int:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def post(url: str) -> None:
    req = urllib.request.Request(url, method="POST", data=b"")
    urllib.request.urlopen(req, timeout=30).read()


async def type_trace(engine, name: str, trace: tr.Trace, max_tokens: int, times: list) -> int:
    from completer.context import SourceFile
    from completer.pipeline import Generation, Settings, plan

    settings = Settings(max_tokens=max_tokens)
    h = trace.header
    docs = {h.uri: h.text}
    n = 0
    for ev in trace.events:
        if ev.edit is None:
            continue
        docs[ev.uri], off = tr.apply_edit(docs.get(ev.uri, ""), ev.edit)
        src = SourceFile(ev.uri, h.language_id, docs[ev.uri])
        p = plan(src, off, engine, settings)
        t0 = time.perf_counter()
        await Generation(engine, p, f"{name}-{n}", settings, cache_key=ev.uri).run()
        times.append(time.perf_counter() - t0)
        n += 1
    return n


async def one_round(router_url: str, traces: list, users: int, max_tokens: int, times: list) -> int:
    from completer.engine import EngineConfig, create_engine

    engines = [create_engine(EngineConfig(backend="remote", url=router_url, model="house:v2/target",
                                          client_id=f"user{u}@bench", timeout_s=120)) for u in range(users)]
    try:
        counts = await asyncio.gather(*(type_trace(e, f"u{u}", traces[u % len(traces)][1], max_tokens, times)
                                        for u, e in enumerate(engines)))
    finally:
        for e in engines:
            await e.close()
    return sum(counts)


def main(argv=None) -> int:
    from completer.engine.remote.serve import VLLMServer, cpu_environment, find_vllm
    from completer.models import resolve_model

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vllm", default=None, help="the vllm executable (default: .venv-vllm/bin/vllm, ...)")
    ap.add_argument("--users", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--kv-blocks", type=int, default=None,
                    help="each replica's KV cache in blocks of 128 tokens (vllm serve --num-gpu-blocks-override): "
                         "smaller than every user's documents on every replica, as on a loaded GPU")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    vllm = args.vllm or find_vllm()
    if not vllm:
        raise SystemExit("no vllm executable: bash tests/vllm/setup-cpu.sh, or --vllm PATH")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = args.out or ROOT / "bench" / "results" / "remote" / f"affinity-{stamp}"
    out.mkdir(parents=True, exist_ok=True)
    traces = tr.load_all([ROOT / "bench" / "traces"])
    folder = resolve_model("house:v2/target")
    ports = [free_port() for _ in range(6)]
    import tempfile

    logs = Path(tempfile.mkdtemp(prefix="remote-affinity-"))    # the servers' logs (kept: printed below)
    print(f"server logs: {logs}", flush=True)
    env = {**cpu_environment(), "VLLM_SERVER_DEV_MODE": "1"}     # /reset_prefix_cache
    reps = [VLLMServer([vllm, "serve", str(folder), "--served-model-name", "house-v2", "--host", "127.0.0.1",
                        "--port", str(ports[i]), "--dtype", "float32", "--enforce-eager",
                        *(["--num-gpu-blocks-override", str(args.kv_blocks)] if args.kv_blocks else [])],
                       f"http://127.0.0.1:{ports[i]}", logs / f"replica{i}.log", env=env).start() for i in range(2)]
    router_bin = str(Path(vllm).with_name("vllm-router"))
    routers = {pol: VLLMServer([router_bin, "--host", "127.0.0.1", "--port", str(ports[2 + j]), "--policy", pol,
                                "--worker-urls", *(r.url for r in reps), "--prometheus-port", str(ports[4 + j])],
                               f"http://127.0.0.1:{ports[2 + j]}", logs / f"router-{pol}.log")
               for j, pol in enumerate(POLICIES)}
    result = {"command": "python -m bench.remote_affinity " + " ".join(argv if argv is not None else sys.argv[1:]),
              "machine": machine(), "loadavg": {"start": loadavg()}, "users": args.users, "rounds": args.rounds,
              "traces": [n for n, _ in traces], "max_tokens": args.max_tokens, "kv_blocks": args.kv_blocks,
              "runs": []}
    try:
        for r in reps:
            r.wait_ready(900)
        for r in routers.values():
            r.start().wait_ready(120)
        for rnd in range(args.rounds):
            for pol in POLICIES if rnd % 2 == 0 else POLICIES[::-1]:
                for r in reps:
                    post(r.url + "/reset_prefix_cache")
                before = [r.metrics() for r in reps]
                times: list[float] = []
                t0 = time.perf_counter()
                n = asyncio.run(one_round(routers[pol].url, traces, args.users, args.max_tokens, times))
                wall = time.perf_counter() - t0
                after = [r.metrics() for r in reps]

                def delta(key):
                    return [a.get(key, 0) - b.get(key, 0) for a, b in zip(after, before)]

                q, h = delta("vllm:prefix_cache_queries_total"), delta("vllm:prefix_cache_hits_total")
                run = {"round": rnd, "policy": pol, "keystrokes": n, "wall_s": wall,
                       "queries_tokens": q, "hits_tokens": h, "hit_rate": sum(h) / sum(q) if sum(q) else None,
                       "requests_per_replica": delta("vllm:request_success_total"),
                       "median_s": statistics.median(times), "p95_s": sorted(times)[int(0.95 * (len(times) - 1))],
                       "loadavg": loadavg()}
                result["runs"].append(run)
                print(json.dumps(run), flush=True)
    finally:
        for r in [*routers.values(), *reps]:
            r.stop()
    result["loadavg"]["end"] = loadavg()
    (out / "affinity.json").write_text(json.dumps(result, indent=1))
    write_report(result, out)
    return 0


def write_report(r: dict, out: Path) -> None:
    rows = []
    for pol in POLICIES:
        runs = [x for x in r["runs"] if x["policy"] == pol]
        hits = sum(sum(x["hits_tokens"]) for x in runs)
        queries = sum(sum(x["queries_tokens"]) for x in runs)
        rows.append((pol, hits / queries if queries else float("nan"), statistics.median(x["median_s"] for x in runs),
                     max(x["p95_s"] for x in runs), [x["requests_per_replica"] for x in runs]))
    lines = ["# Prefix-cache hit rate with and without replica affinity (vLLM CPU, 2 replicas, vllm-router)", "",
             f"Command: `{r['command']}`  ", f"Machine: {r['machine']}  ",
             f"Load (1/5/15 min, runnable/total): start {r['loadavg']['start']}, end {r['loadavg'].get('end')}  ",
             f"{r['users']} users (one trace each of {', '.join(r['traces'])}), {r['rounds']} rounds, policies "
             f"interleaved, prefix caches emptied before each run; {r['max_tokens']} tokens a keystroke; KV cache per "
             f"replica: {str(r.get('kv_blocks')) + ' blocks of 128 tokens' if r.get('kv_blocks') else '1 GiB'}.", "",
             "| router policy | prefix-cache hit rate (tokens) | median s / keystroke | worst p95 s | requests per replica, each run |",
             "|---|---|---|---|---|"]
    lines += [f"| {p} | {h:.1%} | {m:.3f} | {p95:.3f} | {reqs} |" for p, h, m, p95, reqs in rows]
    lines += ["", "Per run: `affinity.json`."]
    (out / "README.md").write_text("\n".join(lines) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(5, 3))
        ax.bar([p for p, *_ in rows], [h for _, h, *_ in rows])
        ax.set(ylabel="prefix-cache hit rate", ylim=(0, 1), title="2 vLLM replicas behind vllm-router")
        fig.tight_layout()
        fig.savefig(out / "affinity.png", dpi=100)
    except ImportError:
        pass


if __name__ == "__main__":
    sys.exit(main())
