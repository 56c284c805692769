"""Reliability figures in one command: fuzzing, load, faults and exposure, against real server processes.

    python -m bench.reliability [--duration 60] [--clients 50] [--long] [--out bench/results]

1. fuzz: the hypothesis suite ``tests/reliability/test_fuzz_stdio.py`` against a real stdio server
   (``--long``: 400 examples per property instead of CI's 40), every input and its outcome counted per family;
2. load: ``--clients`` websocket clients on loopback replaying typing for ``--duration`` s (keystrokes synthesized
   from a held-out standard-library file, each client at its own typing speed): every keystroke is a didChange
   plus an inlineCompletion, as editors send them. Counted: answered / cancelled (-32800) / other errors / never
   answered; latency of answered requests (median, p95); server RSS and engine requests running, sampled each
   second (bounded = the server cancels superseded work instead of queueing it);
3. faults: the engine dies mid-request (``--fault-after-steps 1``, a failure inside the real engine's step) ->
   error, restart, success, and the time to recover; a client vanishes mid-stream -> engine requests left running;
   size limits -> the errors clients get;
4. exposure: handshakes from a foreign Origin, without/with the token.

Writes ``reliability.md``, ``reliability.json`` and ``reliability.png`` to ``--out`` (default: a new folder,
never the committed results). The engine is the shipped house pair.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from tqdm import tqdm

from bench import record
from lsp.client import Server, frame, open_ws
from completer.models import resolve_model
from completer.stats import nearest_rank as pct

ROOT = Path(__file__).resolve().parents[1]
CONTEXT_BUDGET = 384          # prompt tokens: fits the tiny fallback model's 512 positions with room to generate
HELD_OUT = "shlex.py"          # standard-library file the typing is synthesized from (not in any training set here)
LOAD_OPTIONS: dict = {}        # --option KEY=JSON: server settings for the load clients (the server's defaults else)
ENGINE_OPTIONS: dict = {}      # --engine KEY=JSON: engine settings over the house pair's (e.g. batch_decode=false)


def load_settings() -> dict:
    return {"maxTokens": 16, "contextBudgetTokens": CONTEXT_BUDGET, **LOAD_OPTIONS}


# --- engine ---------------------------------------------------------------------------------------------------
def engine_options() -> tuple[dict, str, list[str]]:
    """(engine settings, description, extra server args): the shipped house pair (house v2 since issue 12; runs
    before that used v1, house:target + house:draft; the embedded default until issue 29), which the figures are
    about."""
    from completer.engine.config import HOUSE_DRAFT, HOUSE_MODEL

    try:
        for spec in (HOUSE_MODEL, HOUSE_DRAFT):
            resolve_model(spec)
    except FileNotFoundError as e:
        raise SystemExit(f"the house pair is not installed ({e}); reinstall the package (pip install -e .)")
    return ({"model": HOUSE_MODEL, "draft": HOUSE_DRAFT, "device": "cpu"},
            f"house v2 target + draft ({HOUSE_MODEL} + {HOUSE_DRAFT})", [])


# --- 1. fuzz --------------------------------------------------------------------------------------------------
def run_fuzz(long: bool, tmp: Path) -> dict:
    log = tmp / "fuzz.jsonl"
    env = {**os.environ, "COMPLETER_FUZZ_LOG": str(log), "COMPLETER_FUZZ_EXAMPLES": "400" if long else "40"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/reliability/test_fuzz_stdio.py"]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with tqdm(desc="fuzz inputs", unit="input") as bar:
        while proc.poll() is None:
            n = sum(1 for _ in open(log)) if log.exists() else 0
            bar.update(n - bar.n)
            time.sleep(0.5)
    out = proc.stdout.read()
    rows = [json.loads(x) for x in open(log)] if log.exists() else []
    fam = Counter(r["family"] for r in rows)
    outcomes: dict[str, Counter] = {}
    for r in rows:
        outcomes.setdefault(r["family"], Counter())[r["outcome"]] += 1
    summary_line = [x for x in out.strip().splitlines() if "passed" in x or "failed" in x][-1:]
    return {"profile": env["COMPLETER_FUZZ_EXAMPLES"] + " examples per property", "inputs": len(rows), "per_family": dict(fam),
            "outcomes": {k: dict(v) for k, v in outcomes.items()}, "pytest": summary_line[0] if summary_line else out[-500:],
            "passed": proc.returncode == 0, "seconds": round(time.monotonic() - t0, 1)}


# --- 2. load --------------------------------------------------------------------------------------------------
def keystrokes(text: str, start_line: int, n: int) -> tuple[str, list[str]]:
    """The document before the typing starts, and the characters typed after it."""
    lines = text.splitlines(keepends=True)
    return "".join(lines[:start_line]), list("".join(lines[start_line:]))[:n]


def position_of(text: str) -> tuple[int, int]:
    line = text.count("\n")
    return line, len(text) - (text.rfind("\n") + 1)   # ASCII file: UTF-16 units == characters


async def typing_client(i: int, url: str, opts: dict, source: str, until: float, res: dict, pauses: bool) -> None:
    rng = random.Random(i)
    c = await open_ws(url)
    r = await c.initialize(opts, **load_settings())
    if "result" not in r:
        res["init_errors"].append(r)
        return
    start_line = rng.randrange(20, max(21, source.count("\n") - 60))
    doc, keys = keystrokes(source, start_line, 10_000)
    uri = f"file:///load/client{i}.py"
    await c.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                             "text": doc}})
    delay = rng.uniform(0.06, 0.2)                # 5..16 characters a second
    pending = []
    version = 1
    loop = asyncio.get_running_loop()
    for ch in keys:
        if loop.time() >= until:
            break
        line, col = position_of(doc)
        version += 1
        await c.notify("textDocument/didChange", {
            "textDocument": {"uri": uri, "version": version},
            "contentChanges": [{"range": {"start": {"line": line, "character": col},
                                          "end": {"line": line, "character": col}}, "text": ch}]})
        doc += ch
        line, col = position_of(doc)
        t_sent = time.perf_counter()
        _, fut = await c.request("textDocument/inlineCompletion", {
            "textDocument": {"uri": uri}, "position": {"line": line, "character": col},
            "context": {"triggerKind": 2}})
        pending.append((t_sent, fut))
        res["sent"] += 1
        await asyncio.sleep(delay * rng.uniform(0.5, 1.5))
        if pauses and (ch == "\n" or (ch in " (.," and rng.random() < 0.15)):
            await asyncio.sleep(rng.uniform(0.5, 2.5))    # a typist's pause: where ghost text gets read
    await collect(pending, until, res)
    await c.close()


def load_traces() -> list:
    """The bench helper's typing traces (bench/traces/*.jsonl, format in bench/traces/FORMAT.md), if present."""
    paths = sorted((ROOT / "bench" / "traces").glob("*.jsonl"))
    if not paths:
        return []
    from lsp.trace import load

    return [(p.stem, load(p)) for p in paths]


async def trace_client(i: int, url: str, opts: dict, traces: list, until: float, res: dict) -> None:
    """Replay a trace's keystrokes with its timing (edits only: each is a didChange + inlineCompletion at the
    cursor; accept/reject/open events are skipped, i.e. the user types everything), again and again."""
    from lsp.trace import apply_edit, position_of

    rng = random.Random(i)
    name, trace = traces[i % len(traces)]
    c = await open_ws(url)
    r = await c.initialize(opts, **load_settings())
    if "result" not in r:
        res["init_errors"].append(r)
        return
    loop = asyncio.get_running_loop()
    pending = []
    await asyncio.sleep(rng.uniform(0, 2.0))               # clients do not start in lockstep
    rnd = 0
    while loop.time() < until:
        rnd += 1
        uri = f"file:///load/client{i}/{rnd}/{name}"
        text, version = trace.header.text, 1
        await c.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": trace.header.language_id,
                                                                 "version": 1, "text": text}})
        t0 = loop.time()
        for ev in trace.events:
            if ev.edit is None or ev.uri != trace.header.uri:
                continue
            wait = t0 + ev.t_ms / 1000 - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if loop.time() >= until:
                break
            version += 1
            text, cur = apply_edit(text, ev.edit)
            pos = ev.cursor or position_of(text, cur)
            await c.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                                      "contentChanges": [ev.edit]})
            t_sent = time.perf_counter()
            _, fut = await c.request("textDocument/inlineCompletion", {
                "textDocument": {"uri": uri}, "position": pos, "context": {"triggerKind": 2}})
            pending.append((t_sent, fut))
            res["sent"] += 1
        if pending:                                         # the user stops and reads the last ghost text
            with contextlib.suppress(asyncio.TimeoutError, ConnectionError):
                await asyncio.wait_for(asyncio.shield(pending[-1][1]), 10)
        await c.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
        await asyncio.sleep(rng.uniform(1.0, 4.0))          # thinking before the next round
    await collect(pending, until, res)
    await c.close()


async def collect(pending: list, until: float, res: dict) -> None:
    loop = asyncio.get_running_loop()
    for t0, fut in pending:                        # every request must be answered or cancelled
        try:
            t_received, msg = await asyncio.wait_for(fut, max(1.0, until + 60 - loop.time()))
        except (asyncio.TimeoutError, ConnectionError):
            res["unanswered"] += 1
            continue
        dt = (t_received - t0) * 1000
        if "result" in msg:
            res["answered"] += 1
            res["latency_ms"].append(dt)
            if msg["result"] and msg["result"].get("items") and msg["result"]["items"][0].get("insertText"):
                res["nonempty"] += 1
        elif msg["error"]["code"] == -32800:
            res["cancelled"] += 1
            res["cancel_ms"].append(dt)
        elif msg["error"]["code"] == -32803 and "server busy" in msg["error"]["message"]:
            res["busy"] += 1
            res["busy_ms"].append(dt)
        else:
            res["errors"][re.sub(r"\d+", "N", f'{msg["error"]["code"]}: {msg["error"]["message"][:100]}')] += 1
        res["any_ms"].append(dt)                   # every message's answer: result, -32800 or busy alike


async def run_load(opts: dict, extra: list[str], clients: int, duration: float, tmp: Path, mode: str,
                   traces: list) -> dict:
    pauses = mode != "continuous"
    source = (Path(sysconfig_stdlib()) / HELD_OUT).read_text()
    server = Server("ws", args=tuple(extra), log_path=tmp / f"load-server-{mode}.log")
    samples = []
    res = {"sent": 0, "answered": 0, "nonempty": 0, "cancelled": 0, "busy": 0, "unanswered": 0, "errors": Counter(),
           "latency_ms": [], "cancel_ms": [], "busy_ms": [], "any_ms": [], "init_errors": []}
    try:
        mon = await server.start()
        await mon.initialize(opts, **load_settings())
        await mon.wait_ready(300)
        rss0 = server.rss_kib()
        cpu0 = server_cpu_s(server.proc.pid)
        loop = asyncio.get_running_loop()
        t_start = loop.time()
        until = t_start + duration
        if mode == "traces":
            tasks = [asyncio.create_task(trace_client(i, server.url, opts, traces, until, res)) for i in range(clients)]
        else:
            tasks = [asyncio.create_task(typing_client(i, server.url, opts, source, until, res, pauses))
                     for i in range(clients)]
        with tqdm(total=int(duration), desc=f"load ({mode}): {clients} clients",
                  unit="s") as bar:
            while not all(t.done() for t in tasks):
                await asyncio.sleep(1.0)
                st = await mon.call("completer/stats", {}, timeout=120)
                e = st["engine"]
                samples.append({"t": round(loop.time() - t_start, 1), "rss_mib": server.rss_kib() / 1024,
                                "engine_running": e["requests_started"] - e["requests_finished"]
                                - e["requests_aborted"], "sent": res["sent"],
                                "supervisor_inflight": (e.get("supervisor") or {}).get("inflight")})
                bar.update(min(int(duration), int(loop.time() - t_start)) - bar.n)
        cpu1 = server_cpu_s(server.proc.pid)
        for t in tasks:
            if t.exception():
                res["errors"][f"client crashed: {t.exception()!r}"[:100]] += 1
        await asyncio.sleep(1.0)
        st = await mon.call("completer/stats", {})
        e = st["engine"]
        alive = server.proc.returncode is None
        await mon.close()
    finally:
        await server.stop()
    lat = res.pop("latency_ms")
    cms = res.pop("cancel_ms")
    bms, anyms = res.pop("busy_ms"), res.pop("any_ms")
    return {**res, "errors": dict(res["errors"]), "clients": clients, "duration_s": duration,
            "server_alive": alive, "latency_ms": {"median": pct(lat, 50), "p95": pct(lat, 95), "max": max(lat, default=None)},
            "cancel_ms": {"median": pct(cms, 50), "p95": pct(cms, 95), "max": max(cms, default=None)},
            "busy_ms": {"median": pct(bms, 50), "p95": pct(bms, 95), "max": max(bms, default=None)},
            # issue 13: every message answered, refused or superseded within 1 s (the maximum, not only p95)
            "any_ms": {"median": pct(anyms, 50), "p95": pct(anyms, 95), "max": max(anyms, default=None),
                       "over_1s": sum(1 for x in anyms if x > 1000)},
            "rss_mib": {"before": rss0 / 1024, "max": max(s["rss_mib"] for s in samples),
                        "last": samples[-1]["rss_mib"]},
            "engine_running_max": max(s["engine_running"] for s in samples),
            "supervisor_inflight_max": max((s["supervisor_inflight"] or 0) for s in samples),
            "engine_after": {k: e[k] for k in ("requests_started", "requests_finished", "requests_aborted",
                                                "generated_tokens", "wasted_tokens")},
            "engine_left_running": e["requests_started"] - e["requests_finished"] - e["requests_aborted"],
            "supervisor": e.get("supervisor"), "samples": samples, "latencies": lat,
            "server_cpu": cpu_figures(cpu0, cpu1, res["sent"])}


def server_cpu_s(pid: int) -> dict | None:
    """CPU seconds (user + system) the server process has used, in all and in its main thread (the event loop,
    which the engine's model steps do not run in): /proc, Linux only (None elsewhere)."""
    def stat(path: str) -> float:
        fields = Path(path).read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")     # utime + stime
    try:
        return {"process": stat(f"/proc/{pid}/stat"), "main_thread": stat(f"/proc/{pid}/task/{pid}/stat")}
    except (OSError, ValueError, IndexError):
        return None


def cpu_figures(before: dict | None, after: dict | None, requests: int) -> dict | None:
    """The server's CPU over the load (from the clients' start to their end), in all and per completion request
    sent (each with its didChange): the cost of a keystroke to the server."""
    if before is None or after is None:
        return None
    out = {}
    for k in ("process", "main_thread"):
        used = after[k] - before[k]
        out[f"{k}_s"] = round(used, 2)
        out[f"{k}_ms_per_request"] = round(used * 1000 / requests, 3) if requests else None
    return out


def sysconfig_stdlib() -> str:
    import sysconfig

    return sysconfig.get_paths()["stdlib"]


# --- 3. faults and limits -------------------------------------------------------------------------------------
DOC = "import os\n\n\ndef read_config(path):\n    with open(path) as f:\n        \n"


def inline(uri, line, ch):
    return {"textDocument": {"uri": uri}, "position": {"line": line, "character": ch}, "context": {"triggerKind": 2}}


async def run_engine_fault(opts: dict, tmp: Path) -> dict:
    server = Server("stdio", args=("--fault-after-steps", "1"), log_path=tmp / "fault-server.log")
    c = await server.start()
    try:
        await c.initialize(opts, maxTokens=16, debounceMs=0)
        await c.wait_ready(300)
        await c.notify("textDocument/didOpen", {"textDocument": {"uri": "file:///f.py", "languageId": "python",
                                                                 "version": 1, "text": DOC}})
        t0 = time.monotonic()
        first = await c.ask("textDocument/inlineCompletion", inline("file:///f.py", 5, 8))
        t_err = time.monotonic()
        after = [await c.ask("textDocument/inlineCompletion", inline("file:///f.py", 5, 8), timeout=300)
                 for _ in range(5)]
        t_ok = time.monotonic()
        sup = (await c.call("completer/stats", {}))["engine"]["supervisor"]
        return {"first_response": first.get("error") or first.get("result"),
                "later_ok": sum("result" in a for a in after), "later_total": len(after),
                "error_after_s": round(t_err - t0, 3), "recovered_after_s": round(t_ok - t_err, 3),
                "supervisor": sup}
    finally:
        await server.stop(c)


async def run_vanish(opts: dict, extra: list[str], tmp: Path) -> dict:
    s = Server("ws", args=tuple(extra), log_path=tmp / "vanish-server.log")
    out = {}
    try:
        w = await s.start()
        await w.initialize(opts, maxTokens=400, debounceMs=0)
        await w.wait_ready(300)
        for how in ("dropped (no close frame)", "closed"):
            v = await s.start()
            await v.initialize(opts, maxTokens=400, debounceMs=0)
            for i in range(5):
                uri = f"file:///v/{len(out)}{i}.py"
                await v.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python",
                                                                         "version": 1, "text": DOC}})
                await v.request("textDocument/inlineCompletion", inline(uri, 5, 8))
            running_before = 0
            for _ in range(300):
                e = (await w.call("completer/stats", {}))["engine"]
                running_before = e["requests_started"] - e["requests_finished"] - e["requests_aborted"]
                if running_before:
                    break
                await asyncio.sleep(0.02)
            t0 = time.monotonic()
            if how.startswith("dropped"):
                v.transport.transport.abort()
            else:
                await v.transport.close()
            left = running_before
            for _ in range(500):
                e = (await w.call("completer/stats", {}))["engine"]
                left = e["requests_started"] - e["requests_finished"] - e["requests_aborted"]
                if left == 0:
                    break
                await asyncio.sleep(0.01)
            out[how] = {"engine_requests_running_before": running_before, "left_running_after": left,
                        "drained_in_ms": round((time.monotonic() - t0) * 1000, 1)}
        await w.close()
    finally:
        await s.stop()
    return out


async def run_limits_and_exposure(opts: dict, extra: list[str], tmp: Path) -> dict:
    from websockets.exceptions import InvalidStatus

    out = {}
    s = Server("ws", args=(*extra, "--max-message-bytes", "1000000", "--ws-token", "bench-token"),
               log_path=tmp / "limits-server.log")
    try:
        await s.launch()
        url = s.url + "/?token=bench-token"
        for name, kw, u in (("foreign Origin", {"origin": "https://evil.example"}, url),
                            ("no token", {}, s.url), ("wrong token", {"additional_headers": {
                                "Authorization": "Bearer nope"}}, s.url),
                            ("token, no Origin", {}, url), ("token, vscode-webview Origin",
                                                            {"origin": "vscode-webview://x"}, url)):
            try:
                h = await open_ws(u, **kw)
            except InvalidStatus as e:
                out[f"handshake: {name}"] = f"HTTP {e.response.status_code}"
                continue
            out[f"handshake: {name}"] = "accepted: " + repr(await h.health())[:60]
            await h.close()
        c = await open_ws(url)
        r = await c.initialize({**opts, "model": "/etc"})
        out["client names model /etc"] = f'{r["error"]["code"]}: {r["error"]["message"]}'
        await c.initialize(opts, maxDocumentChars=100_000)
        await c.wait_ready(300)
        await c.notify("textDocument/didOpen", {"textDocument": {"uri": "file:///big.py", "languageId": "python",
                                                                 "version": 1, "text": "x = 1\n" * 30_000}})
        await asyncio.sleep(0.5)
        msgs = [n["params"]["message"] for n in c.messages if n.get("method") == "window/showMessage"]
        out["document over maxDocumentChars"] = msgs[-1] if msgs else "no message"
        await c.notify("textDocument/didOpen", {"textDocument": {"uri": "file:///line.py", "languageId": "python",
                                                                 "version": 1, "text": "q" * 90_000}})
        r = await c.ask("textDocument/inlineCompletion", inline("file:///line.py", 0, 90_000), timeout=300)
        out["90k-character line"] = ("answered" if "result" in r else f'{r["error"]["code"]}: {r["error"]["message"]}')
        await c.send({"jsonrpc": "2.0", "method": "x/big", "params": "z" * 2_000_000})
        await c.wait_closed(10)
        out["websocket message over --max-message-bytes"] = f"connection closed, code {c.transport.close_code}"
        after = await open_ws(url)
        out["after that, a new connection"] = "served" if "result" in await after.ask("completer/health", {}) \
            else "refused"
        await after.close()
    finally:
        await s.stop()
    stdio = Server("stdio", args=("--max-message-bytes", "4096"), log_path=tmp / "stdio-limit.log")
    c = await stdio.start()
    try:
        start = c.mark()
        await c.send_bytes(frame({"jsonrpc": "2.0", "id": 9, "method": "x", "params": "a" * 10_000}))
        await c.health()
        err = [m for m in c.since(start) if "error" in m]
        out["stdio frame over --max-message-bytes"] = f'{err[0]["error"]["code"]}: {err[0]["error"]["message"]}' \
            if err else "no error"
        out["stdio after that"] = "served" if await c.health() else "not served"
    finally:
        await stdio.stop(c)
    return out


# --- report ---------------------------------------------------------------------------------------------------
def plot(loads: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(15, 4))
    for name, load in loads.items():
        lat = sorted(load["latencies"])
        if lat:
            ax[0].plot(lat, [i / len(lat) for i in range(len(lat))], label=name)
        ts = [s["t"] for s in load["samples"]]
        ax[1].plot(ts, [s["rss_mib"] for s in load["samples"]], label=name)
        ax[2].plot(ts, [s["engine_running"] for s in load["samples"]], label=name)
        clients, duration = load["clients"], load["duration_s"]
    ax[0].set(title="answered completion latency (CDF)", xlabel="ms", ylabel="fraction", xscale="log")
    ax[1].set(title="server RSS", xlabel="s", ylabel="MiB")
    ax[2].set(title="engine requests running", xlabel="s", ylabel="requests")
    for a in ax:
        a.legend()
    fig.suptitle(f"{clients} websocket clients typing for {duration:g} s on loopback")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def machine() -> dict:
    return record.machine(date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))


def fmt(v) -> str:
    return f"{v:.1f}" if isinstance(v, float) else str(v)


def write_md(r: dict, path: Path) -> None:
    f, loads = r["fuzz"], r["load"]
    L0 = next(iter(loads.values()))
    lines = [
        "# Reliability: fuzzing, load, faults, exposure", "",
        f"Command: `{r['command']}`  ", f"Machine: {r['machine']}  ", f"Engine: {r['engine']}  ",
        f"Load clients' settings (the server's defaults otherwise): `{json.dumps(r.get('load_options'))}`  ",
        f"Load average: {r.get('loadavg')}", "",
        "## Fuzzing (real `completer-lsp --stdio` process, hypothesis)", "",
        f"{f['inputs']} inputs ({f['profile']}, {f['seconds']} s); pytest: {f['pytest']}. After every "
        "input a `completer/health` request was answered (the server kept serving).", "",
        "| family | inputs | outcomes |", "|---|---:|---|"]
    for fam, n in sorted(f["per_family"].items()):
        oc = ", ".join(f"{k} ×{v}" for k, v in sorted(f["outcomes"][fam].items(), key=lambda kv: -kv[1])[:4])
        lines.append(f"| {fam} | {n} | {oc} |")
    names = list(loads)

    def row(label, fn):
        return f"| {label} | " + " | ".join(str(fn(loads[n])) for n in names) + " |"

    lines += ["", f"## Load: {L0['clients']} websocket clients typing for {L0['duration_s']:g} s on loopback", "",
              "Each keystroke is a didChange + inlineCompletion, as editors send them. "
              + (f"*Trace replay*: client i replays trace i mod {len(r['traces'])} of the bench helper's "
                 f"typing traces ({', '.join(r['traces'])}) with their timing, over and over, each round in a new "
                 "document, waiting for the answer to the round's last keystroke (reading the ghost text, up to 10 s) before "
                 "closing it and 1-4 s of thinking before the next round; accept/reject events are skipped (the user "
                 "types everything). " if r["traces"] else
                 "*Typing with pauses*: keystrokes synthesized from the held-out file, 0.5-2.5 s pauses at line "
                 "ends and some word ends. ")
              + f"*Continuous typing*: keystrokes synthesized from the held-out standard-library file `{HELD_OUT}`, "
              "each client from its own line at 5-16 characters a second without pauses: an overload (several "
              "times the rate of real typists), with the 50 clients in one process on the same 2 cores as the "
              "server.", "",
              "| measure | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names),
              row("requests sent", lambda L: L["sent"]),
              row("answered (non-empty ghost text)", lambda L: f"{L['answered']} ({L['nonempty']})"),
              row("cancelled (-32800: superseded by a newer keystroke)", lambda L: L["cancelled"]),
              row("refused (-32803 server busy: no answer within answerBoundMs)", lambda L: L.get("busy", "–")),
              row("other errors", lambda L: f"{sum(L['errors'].values())} {L['errors'] or ''}".replace("|", "/")),
              row("never answered", lambda L: L["unanswered"]),
              row("server alive at the end", lambda L: L["server_alive"]),
              row("latency of answered: median / p95 / max (ms)", lambda L: " / ".join(
                  fmt(L["latency_ms"][k]) for k in ("median", "p95", "max"))),
              row("time to the -32800 answer: median / p95 / max (ms)", lambda L: " / ".join(
                  fmt(L["cancel_ms"].get(k)) for k in ("median", "p95", "max"))),
              row("time to the busy answer: median / p95 / max (ms)", lambda L: " / ".join(
                  fmt((L.get("busy_ms") or {}).get(k)) for k in ("median", "p95", "max"))),
              row("every message (answered, superseded or busy): median / p95 / max (ms); over 1 s",
                  lambda L: " / ".join(fmt((L.get("any_ms") or {}).get(k)) for k in ("median", "p95", "max"))
                  + f"; {(L.get('any_ms') or {}).get('over_1s')}"),
              row("server CPU during the load: process / main thread (event loop) s; per request sent (ms)",
                  lambda L: "–" if not L.get("server_cpu") else
                  f"{L['server_cpu']['process_s']} / {L['server_cpu']['main_thread_s']}; "
                  f"{L['server_cpu']['process_ms_per_request']} / {L['server_cpu']['main_thread_ms_per_request']}"),
              row("server RSS before / max / last (MiB)", lambda L: " / ".join(
                  fmt(L["rss_mib"][k]) for k in ("before", "max", "last"))),
              row("engine requests not yet reaped (started - finished - aborted), max of 1 s samples",
                  lambda L: L["engine_running_max"]),
              row("engine requests with a live consumer (supervisor in flight), max of 1 s samples",
                  lambda L: L["supervisor_inflight_max"]),
              row("engine requests left running after the clients left", lambda L: L["engine_left_running"]),
              row("engine requests started / finished / aborted", lambda L: " / ".join(
                  str(L["engine_after"][k]) for k in ("requests_started", "requests_finished", "requests_aborted"))),
              row("supervisor: shed (busy) / refused (limits) / failed", lambda L: " / ".join(
                  str((L["supervisor"] or {}).get(k)) for k in ("requests_shed", "requests_refused",
                                                               "requests_failed"))),
              "", "How the server sheds instead of queueing: a newer keystroke supersedes the request in flight for "
              "that document (answered -32800, its engine request aborted), so engine work is bounded by the number "
              "of open documents, not by the keystroke rate; beyond the supervisor's max_inflight (64) new engine requests are refused at once "
              "(\"server busy\"). What is not bounded by the server is the backlog of incoming messages when the "
              "CPU cannot parse them as fast as they come: under continuous typing the time to the -32800 answer "
              "is that backlog. (The embedded engine counts an aborted request when its scheduler reaps it, at "
              "the start of its next round, so \"not yet reaped\" can exceed the number of documents for a moment; "
              "those requests are skipped, not stepped.)", "", "![load](reliability.png)", "",
              "## Faults", "", "Engine dies mid-request (failure injected in the real engine's step, every step "
              "after it failing too):", "", "```", json.dumps(r["engine_fault"], indent=1), "```", "",
              "Client vanishes mid-stream (5 long completions running):", "", "| how | engine requests running "
              "before | left running after | drained in (ms) |", "|---|---:|---:|---:|"]
    for how, v in r["vanish"].items():
        lines.append(f"| {how} | {v['engine_requests_running_before']} | {v['left_running_after']} | "
                     f"{v['drained_in_ms']} |")
    lines += ["", "## Limits and exposure", "", "| case | what the client got |", "|---|---|"]
    for k, v in r["limits"].items():
        lines.append(f"| {k} | {str(v).replace('|', '/')} |")
    path.write_text("\n".join(lines) + "\n")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--long", action="store_true", help="400 fuzz examples per property instead of 40")
    ap.add_argument("--skip-fuzz", action="store_true")
    ap.add_argument("--skip-faults", action="store_true", help="load only (no fault, limit and exposure runs)")
    ap.add_argument("--option", action="append", metavar="KEY=JSON", default=[],
                    help="server setting for the load clients' initialize, e.g. answerBoundMs=0")
    ap.add_argument("--engine", action="append", metavar="KEY=JSON", default=[],
                    help="engine setting for every server of the run, e.g. batch_decode=false")
    ap.add_argument("--out", default=None,
                    help="output folder (default: a new bench/results/reliability-<UTC time>/, never the committed "
                         "results)")
    args = ap.parse_args(argv)
    for flag, items, into in (("--option", args.option, LOAD_OPTIONS), ("--engine", args.engine, ENGINE_OPTIONS)):
        for item in items:
            key, sep, value = item.partition("=")
            if not sep:
                raise SystemExit(f"{flag}: expected KEY=JSON, got {item!r}")
            try:
                into[key] = json.loads(value)
            except json.JSONDecodeError:
                into[key] = value
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = Path(args.out or ROOT / "bench" / "results" / f"reliability-{stamp}")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        opts, desc, extra = engine_options()
        if ENGINE_OPTIONS:
            opts = {**opts, **ENGINE_OPTIONS}
            desc += " with " + json.dumps(ENGINE_OPTIONS)
        r = {"command": "python -m bench.reliability " + shlex.join(argv if argv is not None else sys.argv[1:]),
             "machine": machine(), "engine": desc, "loadavg": {"start": record.loadavg()}}
        r["fuzz"] = run_fuzz(args.long, tmp) if not args.skip_fuzz else {"inputs": 0, "per_family": {},
                                                                          "outcomes": {}, "profile": "skipped",
                                                                          "pytest": "skipped", "seconds": 0}
        r["load_options"] = load_settings()
        if args.skip_faults:
            r["engine_fault"], r["vanish"], r["limits"] = "skipped (--skip-faults)", {}, {}
        else:
            print("faults ...", flush=True)
            r["engine_fault"] = asyncio.run(run_engine_fault(opts, tmp))
            r["vanish"] = asyncio.run(run_vanish(opts, extra, tmp))
            r["limits"] = asyncio.run(run_limits_and_exposure(opts, extra, tmp))
        traces = load_traces()
        first = ("trace replay", "traces") if traces else ("typing with pauses", "pauses")
        r["traces"] = [f"bench/traces/{n}.jsonl ({t.keystrokes} keystrokes)" for n, t in traces]
        r["load"] = {name: asyncio.run(run_load(opts, extra, args.clients, args.duration, tmp, mode, traces))
                     for name, mode in (first, ("continuous typing", "continuous"))}
    r["loadavg"]["end"] = record.loadavg()
    plot(r["load"], out / "reliability.png")
    for load in r["load"].values():
        load["latencies_count"] = len(load.pop("latencies"))
    (out / "reliability.json").write_text(json.dumps(r, indent=1, default=str))
    write_md(r, out / "reliability.md")
    print((out / "reliability.md").read_text())


if __name__ == "__main__":
    main()
