"""How long a new user waits: a cold ``completer complete`` end to end, and a cold ``completer-lsp`` to its first
answered completion.

    python -m bench.start [--runs 5] [--first] [--model MODEL] [--what cli,lsp] [--checkout DIR ...] [--out FOLDER]

*Cold* means a fresh process each time, with the caches as a user has them after the first run (the dequantised
model folder under ``$COMPLETER_CACHE``, the compiled C++ kernels under ``$TORCH_EXTENSIONS_DIR``, Python's
bytecode); ``--first`` adds one run of each with both caches empty (a temporary folder), as the very first start
after installing. The two kinds are interleaved run by run, so the machine's load hits both alike; with
``--checkout DIR`` (repeatable; e.g. a ``git archive`` of the base commit) each run also goes through every checkout
in turn (its ``completer`` and ``lsp`` first on PYTHONPATH), so a change and its base are compared side by side.

- ``cli``: ``python -m completer.cli complete tests/data/stack.py --line 11 --column 27 [--model M]`` (the README's
  first command), from spawning
  to its exit (the completion printed);
- ``lsp``: ``python -m lsp.server --stdio``; ``initialize`` (with ``{"engine": {"model": M}}`` when given),
  ``initialized``, ``didOpen`` of the same file and at once ``textDocument/inlineCompletion`` at the same position,
  as an editor does when the user types right after opening; the time from spawning to the first answer with ghost
  text. An "engine loading" answer is counted (``loading_answers``) and the request repeated until one has ghost
  text.

Each run records its wall time and the CPU time (user + system) of the process: on a shared machine the wall time
follows the load, the CPU time much less. Writes ``start.json``, ``start.md`` and ``start.png`` (median and p95 of
the cold runs per kind, the first runs apart) with the machine, the command and the load average before and after
every run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from lsp.client import Server, inline_params, server_command
from bench.record import loadavg as _loadavg, machine
from completer.stats import percentile

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SAMPLE = ROOT / "tests" / "data" / "stack.py"     # the README's first command (stack.go at 11:14 before issue 29)
LINE, COLUMN = 11, 27           # 1-based, as the CLI takes them
GOALS_S = {"cli": 2.0, "lsp": 2.0}


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_cli(model: str | None, env: dict) -> dict:
    cmd = [sys.executable, "-m", "completer.cli", "complete", str(SAMPLE), "--line", str(LINE), "--column",
           str(COLUMN)] + (["--model", model] if model else [])
    cpu0, t0 = _children_cpu(), time.perf_counter()
    p = subprocess.run(cmd, cwd=env.get("PYTHONPATH", ROOT), env=env, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "cpu_s": _children_cpu() - cpu0, "rc": p.returncode, "output": p.stdout.strip()[:200],
            "error": p.stderr.strip()[-500:] if p.returncode else None}


async def _lsp(model: str | None, env: dict) -> dict:
    server = Server("stdio", server_command("stdio"), env=env)
    here = os.getcwd()
    os.chdir(env.get("PYTHONPATH", ROOT))          # `python -m` puts its working folder first on sys.path
    cpu0, t0 = _children_cpu(), time.perf_counter()
    try:
        client = await server.start()
    finally:
        os.chdir(here)
    out: dict = {"loading_answers": 0}
    try:
        options = {"engine": {"model": model}} if model else {}
        await client.call("initialize", {"processId": None, "rootUri": None, "initializationOptions": options,
                                         "capabilities": {"textDocument": {"inlineCompletion": {}}}}, timeout=600)
        out["initialized_s"] = time.perf_counter() - t0
        await client.notify("initialized", {})
        uri = SAMPLE.resolve().as_uri()
        await client.open_document(uri, SAMPLE.read_text(), "python")
        while time.perf_counter() - t0 < 600:
            msg = await client.ask("textDocument/inlineCompletion", inline_params(uri, LINE - 1, COLUMN - 1),
                                   timeout=600)
            if "error" in msg:
                text = str(msg["error"].get("message"))
                if "loading" not in text:
                    out["error"] = text[:300]
                    break
                out["loading_answers"] += 1
                out.setdefault("first_loading_answer", text[:200])
                continue
            res = msg.get("result")
            items = (res.get("items") or []) if isinstance(res, dict) else (res or [])
            out["answer_s"] = time.perf_counter() - t0
            out["output"] = (items[0].get("insertText") if items else "")
            if isinstance(out["output"], dict):
                out["output"] = out["output"].get("value")
            break
    finally:
        out["rc"] = await server.stop(client)
    out["wall_s"] = out.get("answer_s")
    out["cpu_s"] = _children_cpu() - cpu0           # the whole process, shutdown included
    return out


def run_lsp(model: str | None, env: dict) -> dict:
    return asyncio.run(_lsp(model, env))


def first_env(tmp: Path) -> dict:
    """Caches empty, as right after installing: a new model cache and a new kernel build folder."""
    return {**os.environ, "COMPLETER_CACHE": str(tmp / "cache"), "TORCH_EXTENSIONS_DIR": str(tmp / "torch_ext")}


def summarize(runs: list[dict]) -> list[dict]:
    rows = []
    for kind, state, co in dict.fromkeys((r["kind"], r["caches"], r.get("checkout", "this")) for r in runs):
        rs = [r for r in runs if (r["kind"], r["caches"], r.get("checkout", "this")) == (kind, state, co)]
        walls = [r["wall_s"] for r in rs if r.get("wall_s") is not None]
        cpus = [r["cpu_s"] for r in rs if r.get("cpu_s") is not None]
        la = [float(r["loadavg_before"].split()[0]) for r in rs if r.get("loadavg_before")]
        rows.append({"kind": kind, "caches": state, "checkout": co, "runs": len(rs), "answered": len(walls),
                     "wall_median_s": percentile(walls, 50), "wall_p95_s": percentile(walls, 95),
                     "wall_min_s": min(walls, default=None), "cpu_median_s": percentile(cpus, 50),
                     "loading_answers": sum(r.get("loading_answers", 0) for r in rs),
                     "loadavg_1min_range": [min(la), max(la)] if la else None})
    return rows


def markdown(raw: dict, rows: list[dict]) -> str:
    m = raw["machine"]
    f = lambda v: "–" if v is None else f"{v:.2f}"  # noqa: E731
    out = ["# Cold start: `completer complete` end to end, `completer-lsp` to its first answered completion", "",
           f"- date: {raw['date']}; machine: {m['cpu']}, {m['cores']} cores ({m['platform']}, Python {m['python']})",
           f"- command: `{raw['command']}`",
           f"- model: {raw['model'] or 'the default'}; sample: tests/data/{SAMPLE.name} line {LINE}, column {COLUMN}",
           "- cold = a fresh process, caches as after the first run; first = caches empty (a new COMPLETER_CACHE "
           "and TORCH_EXTENSIONS_DIR)", "",
           "| what | caches | checkout | runs | wall median s | wall p95 s | wall min s | CPU median s "
           "| 'engine loading' answers | load avg (1 min) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        la = r["loadavg_1min_range"]
        out.append(f"| {r['kind']} | {r['caches']} | {r['checkout']} | {r['runs']} | {f(r['wall_median_s'])} | {f(r['wall_p95_s'])} "
                   f"| {f(r['wall_min_s'])} | {f(r['cpu_median_s'])} | {r['loading_answers']} "
                   f"| {'–' if not la else f'{la[0]:.1f}–{la[1]:.1f}'} |")
    out += ["", "Runs in order (wall s / CPU s, load average before):", ""]
    for r in raw["runs"]:
        out.append(f"- {r['kind']} ({r['caches']}, {r.get('checkout', 'this')}): {f(r.get('wall_s'))} / {f(r.get('cpu_s'))}, "
                   f"load {r.get('loadavg_before')}" + (f", error: {r['error'][:120]}" if r.get("error") else "")
                   + (f", {r['loading_answers']} 'engine loading' answers" if r.get("loading_answers") else ""))
    return "\n".join(out) + "\n"


def plot(rows: list[dict], path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    labels = [f"{r['kind']} ({r['caches']}, {r['checkout']})" for r in rows]
    ax.bar(range(len(rows)), [r["wall_median_s"] or 0 for r in rows], 0.4, label="wall, median")
    ax.bar([i + 0.4 for i in range(len(rows))], [r["cpu_median_s"] or 0 for r in rows], 0.4, label="CPU, median")
    for i, r in enumerate(rows):
        if r["wall_p95_s"] is not None:
            ax.plot([i, i], [r["wall_median_s"], r["wall_p95_s"]], color="black", lw=1)
    ax.axhline(2.0, color="red", ls="--", lw=1, label="goal: 2 s")
    ax.set_xticks([i + 0.2 for i in range(len(rows))], labels, rotation=15)
    ax.set_ylabel("seconds (line: to the p95)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="cold runs of each kind (default 5)")
    ap.add_argument("--first", action="store_true", help="also one run of each with the caches empty")
    ap.add_argument("--model", default=None, help="model (default: the CLI's and the server's default)")
    ap.add_argument("--what", default="cli,lsp", help="comma-separated: cli, lsp")
    ap.add_argument("--checkout", action="append", type=Path, default=None, metavar="DIR",
                    help="also run this checkout's completer/lsp (repeatable; this one is always run, as 'this')")
    ap.add_argument("--out", type=Path, default=None,
                    help="output folder (default: a new bench/results/start-<UTC time>/, never the committed results)")
    a = ap.parse_args(argv)
    checkouts = {"this": ROOT}
    for d in a.checkout or []:
        if not (d / "completer" / "cli.py").is_file():
            raise SystemExit(f"--checkout {d}: not a checkout of completer (no completer/cli.py)")
        checkouts[d.resolve().name] = d.resolve()
    kinds = [k for k in a.what.split(",") if k]
    if not kinds or set(kinds) - {"cli", "lsp"}:
        raise SystemExit(f"--what: expected a comma-separated list of cli, lsp; got {a.what!r}")
    out = a.out or HERE / "results" / f"start-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"
    runner = {"cli": run_cli, "lsp": run_lsp}
    runs: list[dict] = []
    plan = []
    with tempfile.TemporaryDirectory(prefix="completer-first-") as tmp:
        def env_of(co: str, base: dict) -> dict:
            return {**base, "PYTHONPATH": str(checkouts[co])}

        if a.first:
            plan += [(k, "first", co, env_of(co, first_env(Path(tmp) / co / k))) for co in checkouts for k in kinds]
        else:
            # a user's caches exist: one untimed start fills them if this machine never ran the engine
            for co in checkouts:
                runner[kinds[0]](a.model, env_of(co, dict(os.environ)))
        plan += [(k, "cold", co, env_of(co, dict(os.environ))) for _ in range(a.runs) for k in kinds
                 for co in checkouts]
        date = datetime.now(timezone.utc).isoformat(timespec="seconds")
        for i, (kind, state, co, env) in enumerate(plan):
            before = _loadavg()
            r = runner[kind](a.model, env)
            r.update(kind=kind, caches=state, checkout=co, loadavg_before=before, loadavg_after=_loadavg())
            runs.append(r)
            print(f"[{i + 1}/{len(plan)}] {kind} ({state}, {co}): wall {r.get('wall_s')}, cpu {r.get('cpu_s'):.2f} s, "
                  f"load {before}", file=sys.stderr, flush=True)
    raw = {"date": date, "machine": machine(), "model": a.model, "runs": runs,
           "command": " ".join(["python -m bench.start"] + [shlex.quote(x) for x in (argv or sys.argv[1:])])}
    rows = summarize(runs)
    raw["summary"] = rows
    out.mkdir(parents=True, exist_ok=True)
    (out / "start.json").write_text(json.dumps(raw, indent=1))
    (out / "start.md").write_text(markdown(raw, rows))
    try:
        plot(rows, out / "start.png", f"cold start, {raw['machine']['cpu']}, {raw['machine']['cores']} cores")
    except ImportError:
        print("matplotlib is not installed: no plot", file=sys.stderr)
    print((out / "start.md").read_text())


if __name__ == "__main__":
    main()
