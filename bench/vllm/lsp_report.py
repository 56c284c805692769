"""Table and plot of ``lsp_device.py`` results (the language server over websockets on vLLM).

    python bench/vllm/lsp_report.py RESULTS/raw/call4 RESULTS/raw/call5 --out RESULTS

Reads each folder's ``summary.json`` and the replays' ``*.raw.json``; writes ``lsp_summary.json`` (the load stages,
with the CPU used during the load) and ``lsp_summary.md`` (per replay: every
keystroke's answer, shown ghost text, engine failures seen by the client; the load stage's figures) and ``lsp.png``
(per replay, each keystroke's time to its answer by status, engine failures marked; the load's engine requests
in flight over time).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from completer.stats import nearest_rank

COLORS = {"shown": "tab:green", "stale": "tab:orange", "empty": "tab:blue", "error": "tab:red",
          "cancelled": "tab:gray", "unanswered": "black"}


def engine_failure(rec: dict) -> bool:
    return "EngineDeadError" in (rec.get("error_message") or "")


def replays(folders: list[Path]) -> list[tuple[str, dict, list[dict]]]:
    out = []
    for folder in folders:
        summary = json.loads((folder / "summary.json").read_text())
        for stage, res in summary["stages"].items():
            for name in ("full", "first-line", "replay"):
                raw_path = folder / stage / f"{name}.raw.json"
                if name in res and raw_path.is_file():
                    raw = json.loads(raw_path.read_text())
                    recs = [r for t in raw["configs"][0]["traces"] for r in t["records"] if r["kind"] == "key"]
                    out.append((f"{stage} {name}", res, recs))
    return out


def table(rows) -> list[str]:
    lines = ["| replay | engine start s | keystrokes | status | answered (not cancelled) p50 / p95 ms | shown p50 / "
             "p95 ms | shown before next key | engine failures seen (errors) |", "|---|---:|---:|---|---|---|---:|---:|"]
    for label, res, recs in rows:
        ans = [r["answer_ms"] for r in recs if r.get("answer_ms") is not None and r["status"] != "cancelled"
               and not r.get("error")]
        shown = [r["latency_ms"] for r in recs if r["status"] == "shown"]
        st: dict = {}
        for r in recs:
            st[r["status"]] = st.get(r["status"], 0) + 1
        f = lambda v: "–" if v is None else f"{v:.0f}"  # noqa: E731
        lines.append(f"| {label} | {f(res['start']['engine_ready_s'])} | {len(recs)} | "
                     f"{', '.join(f'{k} {v}' for k, v in sorted(st.items()))} | "
                     f"{f(nearest_rank(ans, 50))} / {f(nearest_rank(ans, 95))} | "
                     f"{f(nearest_rank(shown, 50))} / {f(nearest_rank(shown, 95))} | "
                     f"{len(shown) / len(recs):.1%} | {sum(engine_failure(r) for r in recs)} |")
    return lines


def busy_window(samples: list[dict], key: str = "cpu_s_server", min_rate: float = 0.2) -> tuple | None:
    """(t0, t1) of the last unbroken run of samples in which the server process worked (CPU rate above ``min_rate``
    cores between two samples): the load itself, after the idle wait that follows its engine start."""
    pts = [(s["t"], s[key]) for s in samples if s.get(key) is not None]
    run: list = []                    # the current unbroken run of busy intervals
    last: list = []                   # the latest run seen
    for a, b in zip(pts, pts[1:]):
        if b[0] > a[0] and (b[1] - a[1]) / (b[0] - a[0]) > min_rate:
            run = run + [(a[0], b[0])] if run and run[-1][1] == a[0] else [(a[0], b[0])]
            last = run
        else:
            run = []
    return (last[0][0], last[-1][1]) if last else None


def cpu_during(samples: list[dict], window: tuple, key: str) -> float | None:
    pts = [(s["t"], s[key]) for s in samples if s.get(key) is not None and window[0] <= s["t"] <= window[1]]
    if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
        return None
    return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])


def load_lines(folders: list[Path]) -> tuple[list[str], list[dict]]:
    """One paragraph per load stage (a folder's summary.json with a ``load`` stage), and those stages."""
    f = (lambda v: "–" if v is None else f"{v:.0f}")  # noqa: E731
    text, loads = [], []
    for folder in folders:
        L = json.loads((folder / "summary.json").read_text())["stages"].get("load")
        if not (L and "sent" in L):
            continue
        loads.append(L)
        a = L.get("any_ms") or {}
        line = (f"Load ({folder.name}): {L['clients']} websocket clients replaying the traces for "
                f"{L['duration_s']:.0f} s, engine {json.dumps(L['engine_options'])}: sent {L['sent']}, answered "
                f"{L['answered']} ({L['nonempty']} with ghost text), superseded (-32800) {L['cancelled']}, busy "
                f"(-32803) {L.get('busy')}, other errors {sum(L['errors'].values())}, never answered "
                f"{L['unanswered']}; answered latency p50 / p95 / max {f(L['latency_ms']['median'])} / "
                f"{f(L['latency_ms']['p95'])} / {f(L['latency_ms']['max'])} ms; every answer (answered, superseded "
                f"or busy) p50 / p95 / max {f(a.get('median'))} / {f(a.get('p95'))} / {f(a.get('max'))} ms, over "
                f"1 s: {a.get('over_1s')}; supervisor in flight max {L['supervisor_inflight_max']}; engine failures "
                f"{(L.get('supervisor') or {}).get('engine_failures')}; server RSS max {f(L['rss_mib']['max'])} MiB.")
        m = L.get("server_metrics")
        if m:
            h = lambda d: (f"n {f(d.get('count'))}, mean {f(d.get('mean_ms'))} ms, p50 <= {d.get('p50_le_ms')} "  # noqa: E731
                           f"ms, p95 <= {d.get('p95_le_ms')} ms")
            line += (f" Inside the server (--metrics, bucket bounds): request received to answer {h(m['request_latency'])}"
                     f"; engine time to first token {h(m['ttft'])}; time per token {h(m['tpot'])}.")
        w = busy_window(L.get("samples_device") or [])
        if w:
            cpu = {k: cpu_during(L["samples_device"], w, f"cpu_s_{k}") for k in ("server", "engine_core")}
            L["cpu_during_load"] = {"window_s": w, **cpu}
            g = (lambda v: "–" if v is None else f"{v:.2f}")  # noqa: E731
            line += (f" CPU during the load ({w[0]:.0f}-{w[1]:.0f} s of the samples): server process "
                     f"{g(cpu['server'])} cores, vLLM engine-core process {g(cpu['engine_core'])} cores.")
        text.append(line)
    return text, loads


def plot(rows, loads: list[dict], path: Path) -> None:
    try:
        import matplotlib
    except ImportError:
        print(f"matplotlib is not installed: no {path.name} (pip install matplotlib, then run this again)")
        return

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(rows) + (1 if loads else 0)
    fig, axes = plt.subplots(n, 1, figsize=(10, 2.6 * n), squeeze=False)
    for ax, (label, _, recs) in zip(axes[:, 0], rows):
        for status, color in COLORS.items():
            pts = [(i, r["answer_ms"]) for i, r in enumerate(recs) if r["status"] == status and r.get("answer_ms")]
            if pts:
                ax.scatter(*zip(*pts), s=8, color=color, label=status)
        for i, r in enumerate(recs):
            if engine_failure(r):
                ax.axvline(i, color="tab:red", lw=0.8, ls="--")
        ax.set_yscale("log")
        ax.set_ylabel("answer ms")
        ax.set_title(f"{label}: keystroke -> answer (dashed: the client got EngineDeadError)", fontsize=9)
        ax.legend(fontsize=7, loc="upper right", ncol=6)
    axes[-1, 0].set_xlabel("keystroke")
    if loads:
        ax = axes[-1, 0]
        for load in loads:
            ts = [s["t"] for s in load["samples"]]
            spec = load["engine_options"].get("speculation", "draft (house default)")
            ax.plot(ts, [s["supervisor_inflight"] or 0 for s in load["samples"]], label=f"in flight, {spec}")
        ax.set_xlabel("s")
        ax.set_ylabel("requests")
        ax.set_title(f"load: {loads[0]['clients']} clients, engine requests in flight (1 s samples)", fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    rows = replays(args.folders)
    lines, loads = load_lines(args.folders)
    text = "\n".join(["# Language server over websockets on vLLM (lsp_device.py)", ""] + table(rows) + [""] + "\n\n".join(lines).split("\n"))
    (args.out / "lsp_summary.md").write_text(text + "\n")
    # the load stages' figures, machine-readable (with the CPU each process used during the load itself)
    (args.out / "lsp_summary.json").write_text(json.dumps({"loads": loads}, indent=1) + "\n")
    plot(rows, loads, args.out / "lsp.png")
    print(text)


if __name__ == "__main__":
    main()
