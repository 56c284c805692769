"""Table and plot of ``lsp_device.py`` results (the language server over websockets on vLLM).

    python bench/vllm/lsp_report.py RESULTS/raw/call4 RESULTS/raw/call5 --out RESULTS

Reads each folder's ``summary.json`` and the replays' ``*.raw.json``; writes ``lsp_summary.md`` (per replay: every
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


def load_lines(folders: list[Path]) -> tuple[list[str], dict | None]:
    for folder in folders:
        res = json.loads((folder / "summary.json").read_text())["stages"].get("load")
        if res and "sent" in res:
            L, f = res, (lambda v: "–" if v is None else f"{v:.0f}")  # noqa: E731
            text = [f"Load: {L['clients']} websocket clients replaying the traces for {L['duration_s']:.0f} s "
                    f"(engine {json.dumps(L['engine_options'])}: house defaults, target + house draft, k=4 on vLLM): "
                    f"sent {L['sent']}, answered {L['answered']} ({L['nonempty']} with ghost text), superseded "
                    f"(-32800) {L['cancelled']}, busy (-32803) {L.get('busy')}, other errors "
                    f"{sum(L['errors'].values())}, never answered {L['unanswered']}; answered latency p50 / p95 / max "
                    f"{f(L['latency_ms']['median'])} / {f(L['latency_ms']['p95'])} / {f(L['latency_ms']['max'])} ms; "
                    f"every answer (answered, superseded or busy) p50 / p95 / max "
                    f"{f((L.get('any_ms') or {}).get('median'))} / {f((L.get('any_ms') or {}).get('p95'))} / "
                    f"{f((L.get('any_ms') or {}).get('max'))} ms, over 1 s: {(L.get('any_ms') or {}).get('over_1s')}; "
                    f"supervisor in flight max {L['supervisor_inflight_max']}; engine failures "
                    f"{(L.get('supervisor') or {}).get('engine_failures')}; server RSS max {f(L['rss_mib']['max'])} MiB."]
            return text, L
    return [], None


def plot(rows, load: dict | None, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(rows) + (1 if load else 0)
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
    if load:
        ax = axes[-1, 0]
        ts = [s["t"] for s in load["samples"]]
        ax.plot(ts, [s["supervisor_inflight"] or 0 for s in load["samples"]], label="supervisor in flight")
        ax.set_xlabel("s")
        ax.set_ylabel("requests")
        ax.set_title(f"load: {load['clients']} clients, engine requests in flight (1 s samples)", fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    rows = replays(args.folders)
    lines, load = load_lines(args.folders)
    text = "\n".join(["# Language server over websockets on vLLM (lsp_device.py)", ""] + table(rows) + [""] + lines)
    (args.out / "lsp_summary.md").write_text(text + "\n")
    plot(rows, load, args.out / "lsp.png")
    print(text)


if __name__ == "__main__":
    main()
