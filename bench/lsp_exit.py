"""How long an editor waits for ``completer-lsp --stdio`` to end after ``shutdown`` + ``exit`` (a restart).

    python -m bench.lsp_exit [--runs 10] [--out FOLDER]

Side by side in one run, alternating: the server as shipped (``lsp.server`` ends with ``os._exit`` once requests are
answered and the engine is closed) and the same server ending through the interpreter's own teardown (``os._exit``
replaced by ``sys.exit`` in that process, as before the fix: collecting the model's tensors and joining the thread
blocked on stdin, which took seconds and got the server SIGKILLed by VS Code's 2 s stop timeout). Each run starts a
server with the shipped house pair on CPU, waits for the engine, sends ``shutdown`` then ``exit`` with stdin left open
(as editors do), and times ``exit`` -> process end; one still running after ``--timeout`` is killed, as an editor
would. Writes ``lsp_exit.json``, ``lsp_exit.md`` and ``lsp_exit.png`` to
``--out`` (default: a new ``bench/results/lsp-exit-<UTC time>/``), with the command, the machine and the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from bench import record
from lsp.client import Server
from completer.stats import nearest_rank

HERE = Path(__file__).resolve().parent
VARIANTS = {
    "shipped (os._exit after clean-up)": [sys.executable, "-m", "lsp.server", "--stdio"],
    "without os._exit (interpreter teardown)": [
        sys.executable, "-c",
        "import os, runpy, sys; os._exit = sys.exit; sys.argv = ['completer-lsp', '--stdio']; "
        "runpy.run_module('lsp.server', run_name='__main__')"],
}
ENGINE = {"model": "house:target", "draft": "house:draft", "device": "cpu"}


async def one(cmd: list[str], log: Path, timeout: float) -> tuple[float, bool]:
    """Seconds from ``exit`` to the end of the process, and whether it had to be killed after ``timeout``."""
    server = Server("stdio", cmd, log_path=log)
    c = await server.start()
    await c.initialize(ENGINE)
    await c.wait_ready()
    await c.ask("shutdown")
    t0 = time.perf_counter()
    await c.notify("exit")                       # stdin stays open: the editor waits for the process to end
    try:
        rc = await asyncio.wait_for(server.proc.wait(), timeout)
    except asyncio.TimeoutError:             # what an editor does after its stop timeout (VS Code: 2 s)
        server.proc.kill()
        await server.proc.wait()
        await c.close()
        return timeout, True
    took = time.perf_counter() - t0
    if rc != 0:
        raise RuntimeError(f"{cmd} exited with {rc}: {log.read_text()[-2000:]}")
    await c.close()
    return took, False


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10, help="runs per variant (alternating)")
    ap.add_argument("--timeout", type=float, default=10.0,
                    help="kill a server still running this long after exit (counted as this long)")
    ap.add_argument("--out", type=Path, default=None, help="output folder (default: a new bench/results/lsp-exit-<UTC>)")
    args = ap.parse_args(argv)
    out = args.out or HERE / "results" / f"lsp-exit-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"
    out.mkdir(parents=True, exist_ok=True)
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    killed = {name: 0 for name in VARIANTS}
    load_before = os.getloadavg()
    started = time.monotonic()
    total = args.runs * len(VARIANTS)
    for i in range(args.runs):
        for name, cmd in VARIANTS.items():
            took, was_killed = asyncio.run(one(cmd, out / "server.log", args.timeout))
            times[name].append(took)
            killed[name] += was_killed
            done = sum(map(len, times.values()))
            eta = (time.monotonic() - started) / done * (total - done)
            print(f"[{done}/{total}] {name}: {times[name][-1] * 1000:.0f} ms (ETA {eta:.0f} s)", flush=True)
    (out / "server.log").unlink(missing_ok=True)
    rows = {name: {"median_ms": statistics.median(t) * 1000, "p95_ms": nearest_rank(t, 95) * 1000, "min_ms": min(t) * 1000,
                   "max_ms": max(t) * 1000, "killed_after_timeout": killed[name],
                   "runs_ms": [x * 1000 for x in t]} for name, t in times.items()}
    shipped, before = (rows[n]["median_ms"] for n in VARIANTS)
    result = {"command": "python -m bench.lsp_exit " + " ".join(argv if argv is not None else sys.argv[1:]),
              "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "machine": record.machine(),
              "load_average_before": load_before, "load_average_after": os.getloadavg(), "engine": ENGINE,
              "variants": rows, "median_ratio_teardown_over_shipped": before / shipped}
    md = [f"# exit -> process end, `completer-lsp --stdio` ({args.runs} runs each, alternating)", "",
          f"`{result['command']}` on {result['machine']['cpu']} ({result['machine']['cores']} cores), "
          f"{result['date']}, load average {load_before[0]:.2f} before / {result['load_average_after'][0]:.2f} after",
          f"(a server still running {args.timeout:g} s after exit is killed and counted as {args.timeout:g} s)",
          "", "| variant | median ms | p95 ms | min ms | max ms | killed |", "|---|---|---|---|---|---|"]
    md += [f"| {n} | {r['median_ms']:.0f} | {r['p95_ms']:.0f} | {r['min_ms']:.0f} | {r['max_ms']:.0f} | "
           f"{r['killed_after_timeout']}/{args.runs} |" for n, r in rows.items()]
    md += ["", f"Median ratio, without / shipped: {result['median_ratio_teardown_over_shipped']:.0f}x (a lower bound "
           f"when the teardown variant was killed)"]

    def plot(path: Path) -> None:
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 3.2))
        ax.boxplot([rows[n]["runs_ms"] for n in rows], vert=False, tick_labels=list(rows))
        ax.set_xscale("log")
        ax.set_xlabel("exit -> process end (ms, log scale)")
        ax.set_title(f"completer-lsp --stdio, {args.runs} runs each, load {load_before[0]:.1f}")
        fig.tight_layout()
        fig.savefig(path, dpi=120)

    record.write(out, "lsp_exit", result, "\n".join(md) + "\n", plot)
    print("\n".join(md))
    print("wrote", out)


if __name__ == "__main__":
    main()
