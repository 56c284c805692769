"""Turn a replay's raw results into figures: JSON, a markdown table and a plot in bench/results/.

    python -m bench.report RAW.json [--out bench/results] [--name replay]   (re-render saved raw results)

First, the headline: per configuration and condition (machine quiet or busy, see ``bench.replay --load``; the
traces' typing rhythm, see ``bench.make_traces --rhythm``), the share of *all* keystrokes whose ghost text arrived
before the next key and was right ("right before the next key"), then the share with any ghost text before the next
key, then the answered p50/p95 (ms), as medians over the rounds with the rounds' range.

Per configuration: keystroke-to-ghost-text latency over *all* keystrokes (a keystroke whose ghost text did not arrive
before the next one counts as never, so its latency is infinite: p50 is finite only when more than half of the
keystrokes got ghost text in time), over the answered requests (any answer but -32800, whether it came in time or
not: the server's own response time), and over the completions that were shown (survivorship-biased: read it with
the shown share); the share of keystrokes with ghost text before the next key and the share with ghost text that was
right (its first line is what the document then holds at the cursor: the user typed or accepted it); the share of
pauses (a gap of at least ``pause_ms`` after a keystroke) that got ghost text within 100 ms and 200 ms; engine
requests per edit; tokens generated for requests later aborted (wasted work, engine counter ``wasted_tokens``);
speculative acceptance rate (accepted / proposed draft tokens); characters the user did not have to type.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from completer.stats import nearest_rank, percentile

NEVER = float("inf")     # latency of a keystroke that got no ghost text before the next one


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if not b or a is None else a / b


def headline(records: list[dict]) -> dict:
    """The replay's headline figures over ``records`` (one configuration, one condition): keystrokes; right before
    the next key (share of all keystrokes whose ghost text arrived before the next key and was right; None when a
    shown record lacks its verdict: an old raw file); ghost before the next key (share); answered p50/p95 ms
    (nearest rank over every request answered without an error, in time or late)."""
    keys = [r for r in records if r["kind"] == "key"]
    answered = [r["answer_ms"] for r in records if r.get("answer_ms") is not None and r.get("error") is None]
    shown = [r for r in keys if r["status"] == "shown"]
    return {"keystrokes": len(keys),
            "right_before_next_key": (None if any("right" not in r for r in shown)
                                      else _ratio(sum(1 for r in shown if r["right"]), len(keys))),
            "ghost_before_next_key": _ratio(len(shown), len(keys)),
            "answered_p50_ms": nearest_rank(answered, 50), "answered_p95_ms": nearest_rank(answered, 95)}


HEADLINE_KEYS = ("right_before_next_key", "ghost_before_next_key", "answered_p50_ms", "answered_p95_ms")


def conditions(raw: dict) -> list[dict]:
    """One row of :func:`headline` per configuration run and typing rhythm (plus ``all`` rhythms when there are
    several): name, load (quiet/busy), rhythm, round, the load average before and after."""
    rows = []
    for c in raw["configs"]:
        by: dict[str, list[dict]] = {}
        for t in c["traces"]:
            by.setdefault(t.get("rhythm", "medium"), []).extend(t["records"])
        if len(by) > 1:
            by["all"] = [r for t in c["traces"] for r in t["records"]]
        for rhythm, recs in by.items():
            rows.append({"name": c["name"], "load": c.get("load", "quiet"), "rhythm": rhythm, "round": c.get("round"),
                         "loadavg_before": c.get("loadavg_before"), "loadavg": c.get("loadavg"), **headline(recs)})
    return rows


def condition_medians(rows: list[dict]) -> list[dict]:
    """Per (load, rhythm, configuration): the median over rounds of each headline figure, the rounds' lowest and
    highest right-before-next-key, and the loads (1-minute load average) the rounds saw."""
    out = []
    for key in dict.fromkeys((r["load"], r["rhythm"], r["name"]) for r in rows):
        rs = [r for r in rows if (r["load"], r["rhythm"], r["name"]) == key]
        m = {"load": key[0], "rhythm": key[1], "name": key[2], "rounds": len(rs),
             "keystrokes": sum(r["keystrokes"] for r in rs)}
        for k in HEADLINE_KEYS:
            vals = [r[k] for r in rs if r[k] is not None]
            m[k] = percentile(vals, 50)
            m[k + "_range"] = [min(vals), max(vals)] if vals else None
        la = [float(r["loadavg"].split()[0]) for r in rs if r.get("loadavg")]
        m["loadavg_1min_range"] = [min(la), max(la)] if la else None
        out.append(m)
    return out


def verdicts(meds: list[dict], default: str = "default", base: str = "base") -> list[dict]:
    """Per condition: the configuration with the most right before the next key, and the default's margin over the
    base options (positive: the default wins)."""
    out = []
    for cond in dict.fromkeys((m["load"], m["rhythm"]) for m in meds):
        ms = [m for m in meds if (m["load"], m["rhythm"]) == cond and m["right_before_next_key"] is not None]
        if not ms:
            continue
        best = max(ms, key=lambda m: m["right_before_next_key"])
        d = next((m for m in ms if m["name"] == default), None)
        b = next((m for m in ms if m["name"] == base), None)
        out.append({"load": cond[0], "rhythm": cond[1], "best": best["name"],
                    "best_right": best["right_before_next_key"],
                    "default_minus_base": (None if d is None or b is None
                                           else d["right_before_next_key"] - b["right_before_next_key"]),
                    "default_minus_best": None if d is None else d["right_before_next_key"] - best[
                        "right_before_next_key"]})
    return out


def first_line(ghost: str) -> str:
    """Ghost text through its first non-blank line, trailing blanks aside: what one keystroke's ghost text is judged
    by (``bench.replay.right``) and what one Tab-accept of a line takes."""
    body = len(ghost) - len(ghost.lstrip(" \t\r\n"))
    nl = ghost.find("\n", body)
    return (ghost if nl < 0 else ghost[:nl]).rstrip(" \t\r")


def summarize(cfg: dict, pause_ms: float) -> dict:
    recs = [r for t in cfg["traces"] for r in t["records"]]
    keys = [r for r in recs if r["kind"] == "key"]
    shown = [r["latency_ms"] for r in recs if r["status"] == "shown"]
    # every keystroke: its ghost text's latency, or never; every answered request (in time or late, empty or not)
    every = [r["latency_ms"] if r["status"] == "shown" else NEVER for r in keys]
    answered = [r["answer_ms"] for r in recs if r.get("answer_ms") is not None and r.get("error") is None]
    pauses = [r for r in keys if r["gap_ms"] is not None and r["gap_ms"] >= pause_ms]

    def within(ms: float) -> float | None:
        return _ratio(sum(1 for r in pauses if r["status"] == "shown" and r["latency_ms"] <= ms), len(pauses))

    status: dict[str, int] = {}
    for r in recs:
        status[r["status"]] = status.get(r["status"], 0) + 1
    eng, srv = cfg.get("engine") or {}, cfg.get("server") or {}
    saved = sum(t["chars_saved"] for t in cfg["traces"])
    typed = sum(t["chars_typed"] for t in cfg["traces"])
    return {
        "name": cfg["name"],
        "round": cfg.get("round"),
        "load": cfg.get("load", "quiet"),
        "loadavg": cfg.get("loadavg"),
        "keystrokes": len(keys),
        "edits_sent": len(recs),
        "shown": len(shown),
        "latency_ms": {"p50": percentile(shown, 50), "p95": percentile(shown, 95), "p99": percentile(shown, 99)},
        "all_keys_ms": {"p50": nearest_rank(every, 50), "p95": nearest_rank(every, 95)},
        "answered_ms": {"p50": nearest_rank(answered, 50), "p95": nearest_rank(answered, 95),
                        "max": max(answered, default=None)},
        "answered": len(answered),
        # shown ghost text whose first line the document then held at the cursor (None: an old raw file)
        "right_share": (None if any("right" not in r for r in keys if r["status"] == "shown")
                        else _ratio(sum(1 for r in keys if r["status"] == "shown" and r["right"]), len(keys))),
        "empty_share": _ratio(sum(1 for r in keys if r["status"] == "empty"), len(keys)),
        "pauses": len(pauses),
        "pauses_ghost_within_100ms": within(100),
        "pauses_ghost_within_200ms": within(200),
        "engine_requests_per_keystroke": _ratio(srv.get("engine_requests"), len(recs)),
        # keystrokes whose ghost text arrived before the next keystroke (issue 13's "ghost text before the next key")
        "shown_before_next_key": _ratio(sum(1 for r in keys if r["status"] == "shown"), len(keys)),
        "reuses": srv.get("reuses"),
        "early_answers": srv.get("early_answers"),
        "partial_answers": srv.get("partial_answers"),
        # characters of right first lines shown before the next key, per keystroke: how much right text users see
        # (a partial answer is right more easily than a whole line, and shorter)
        "right_chars_per_key": (None if any("right" not in r for r in keys if r["status"] == "shown")
                                else _ratio(sum(len(first_line(r.get("ghost") or "")) for r in keys
                                                if r["status"] == "shown" and r["right"]), len(keys))),
        "served_from_cache": srv.get("served_from_cache"),
        "engine_aborts": eng.get("requests_aborted"),
        "generated_tokens": eng.get("generated_tokens"),
        "wasted_tokens": eng.get("wasted_tokens"),
        "wasted_share": _ratio(eng.get("wasted_tokens"), eng.get("generated_tokens")),
        "acceptance_rate": _ratio(eng.get("accepted_tokens"), eng.get("draft_tokens")),
        "cached_prompt_share": _ratio(eng.get("cached_prompt_tokens"), eng.get("prompt_tokens")),
        "accept_points": sum(t["accept_points"] for t in cfg["traces"]),
        "accepted": sum(t["accepted"] for t in cfg["traces"]),
        "chars_saved": saved,
        "chars_saved_share": _ratio(saved, typed),
        "status": status,
        "wall_s": sum(t["duration_s"] for t in cfg["traces"]),
        # how late the client sent edits against the trace's clock (a server that stops reading its input, e.g.
        # busy running every stale request, makes the client fall behind)
        "send_lag_ms_p95": percentile([r.get("lag_ms", 0.0) for r in recs], 95),
        "engine_ready_s": cfg.get("engine_ready_s"),
    }


MEDIAN_KEYS = ("shown_before_next_key", "right_share", "empty_share", "wasted_share", "engine_requests_per_keystroke", "reuses", "early_answers",
               "partial_answers", "right_chars_per_key", "served_from_cache")


def medians(rows: list[dict]) -> list[dict]:
    """Per configuration (and machine load, when a run had several), the median over its rounds (``--repeat``) of
    p50/p95 latency and the shares."""
    out = []
    several = len({r.get("load", "quiet") for r in rows}) > 1
    for name, load in dict.fromkeys((r["name"], r.get("load", "quiet")) for r in rows):
        rs = [r for r in rows if r["name"] == name and r.get("load", "quiet") == load]
        m = {"name": f"{name} [{load}]" if several else name, "rounds": len(rs),
             "p50_ms": percentile([r["latency_ms"]["p50"] for r in rs if r["latency_ms"]["p50"] is not None], 50),
             "p95_ms": percentile([r["latency_ms"]["p95"] for r in rs if r["latency_ms"]["p95"] is not None], 50)}
        for k in ("all_keys_ms", "answered_ms"):     # nearest rank: a round's value (all keys: may be never)
            for q in ("p50", "p95"):
                m[f"{k.removesuffix('_ms')}_{q}_ms"] = nearest_rank(
                    [r[k][q] for r in rs if r.get(k) and r[k][q] is not None], 50)
        for k in MEDIAN_KEYS:
            m[k] = percentile([r[k] for r in rs if r.get(k) is not None], 50)
        out.append(m)
    return out


def _label(r: dict) -> str:
    """A per-round row's name: configuration, machine load when not quiet, round."""
    load = "" if r.get("load", "quiet") == "quiet" else f" [{r['load']}]"
    return f"{r['name']}{load}{'' if not r.get('round') else ' (round %d)' % r['round']}"


def _f(v, fmt="{:.0f}") -> str:
    return "–" if v is None else "never" if v == NEVER else fmt.format(v)


def headline_markdown(raw: dict) -> list[str]:
    """The headline tables: medians over rounds per condition, and per condition which configuration won."""
    meds = condition_medians(conditions(raw))
    pct = lambda v: _f(None if v is None else 100 * v, "{:.1f}%")  # noqa: E731
    out = ["## Right before the next key", "",
           "Share of **all** keystrokes whose ghost text arrived before the next key and was right (what the user "
           "then typed there, see bench.replay.right), then the share with any ghost text before the next key, then "
           "the answered p50 / p95 (every request answered, in time or late). Medians over the rounds, the rounds' "
           "range in brackets; load = the 1-minute load average after each round's run of the configuration.", "",
           "| load | rhythm | config | right before next key | ghost before next key | answered p50 / p95 ms "
           "| rounds | keystrokes | load avg |", "|---|---|---|---|---|---|---|---|---|"]
    for m in meds:
        r = m["right_before_next_key_range"]
        g = m["ghost_before_next_key_range"]
        la = m["loadavg_1min_range"]
        out.append(f"| {m['load']} | {m['rhythm']} | {m['name']} | **{pct(m['right_before_next_key'])}** "
                   f"({pct(r[0]) if r else '–'}–{pct(r[1]) if r else '–'}) | {pct(m['ghost_before_next_key'])} "
                   f"({pct(g[0]) if g else '–'}–{pct(g[1]) if g else '–'}) "
                   f"| {_f(m['answered_p50_ms'])} / {_f(m['answered_p95_ms'])} | {m['rounds']} | {m['keystrokes']} "
                   f"| {'–' if not la else f'{la[0]:.1f}–{la[1]:.1f}'} |")
    vs = verdicts(meds)
    if vs:
        out += ["", "| load | rhythm | most right | default − base | default − most right |", "|---|---|---|---|---|"]
        pp = lambda v: "–" if v is None else f"{100 * v:+.1f} pt"  # noqa: E731
        for v in vs:
            out.append(f"| {v['load']} | {v['rhythm']} | {v['best']} ({pct(v['best_right'])}) "
                       f"| {pp(v['default_minus_base'])} | {pp(v['default_minus_best'])} |")
    return out + [""]


def markdown(raw: dict, rows: list[dict]) -> str:
    m = raw["machine"]
    out = [f"# Typing-trace replay: keystroke to ghost text\n",
           f"- date: {raw['date']}; machine: {m['cpu']}, {m['cores']} cores ({m['platform']}, Python {m['python']})",
           f"- command: `{raw['command']}`",
           f"- machine conditions: {', '.join(raw.get('loads') or ['quiet'])}"
           + (f" (busy: {raw['load_generator']})" if raw.get("load_generator") else "")
           + "; load average (1, 5, 15 min) before and after each configuration's run in the JSON "
             "(`configs[].loadavg_before`, `configs[].loadavg`)",
           f"- the server's defaults (`default` sends no options; read from lsp/config.py): "
           f"`{json.dumps(raw.get('server_defaults'), sort_keys=True)}`",
           f"- house pair (when the engine used house:*): {json.dumps(raw.get('house'))}",
           f"- transport: {raw['transport']}; speed x{raw['speed']}; a pause = a gap of >= {raw['pause_ms']:.0f} ms "
           f"after a keystroke",
           "- traces: " + ", ".join(f"{t['name']} ({t['language']}, {t['keystrokes']} keys, {t['duration_s']:.0f} s)"
                                    for t in raw["traces"]),
           ""]
    for c in {c["name"]: c for c in raw["configs"]}.values():
        out.append(f"- `{c['name']}`: options `{json.dumps(c['options'], sort_keys=True)}`")
    out += [""] + headline_markdown(raw)
    out += ["## Per round", "", "| config | shown | p50 ms | p95 ms | p99 ms | pauses ≤100 ms | pauses ≤200 ms | engine req/key | "
                "wasted tokens (share) | acceptance | chars saved (share) | from cache | reuses | early / partial | "
                "send lag p95 ms |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lat = r["latency_ms"]
        pct = lambda v: _f(None if v is None else 100 * v, "{:.0f}%")  # noqa: E731
        out.append(
            f"| {_label(r)} | {r['shown']}/{r['edits_sent']} | {_f(lat['p50'])} | {_f(lat['p95'])} | {_f(lat['p99'])} "
            f"| {pct(r['pauses_ghost_within_100ms'])} | {pct(r['pauses_ghost_within_200ms'])} ({r['pauses']}) "
            f"| {_f(r['engine_requests_per_keystroke'], '{:.2f}')} "
            f"| {_f(r['wasted_tokens'])} ({pct(r['wasted_share'])}) | {pct(r['acceptance_rate'])} "
            f"| {r['chars_saved']} ({pct(r['chars_saved_share'])}) | {_f(r['served_from_cache'])} "
            f"| {_f(r.get('reuses'))} | {_f(r.get('early_answers'))} / {_f(r.get('partial_answers'))} "
            f"| {_f(r['send_lag_ms_p95'])} |")
    pct = lambda v: _f(None if v is None else 100 * v, "{:.0f}%")  # noqa: E731
    out += ["", "Over all keystrokes (a keystroke without ghost text before the next one counts as never) and over "
                "every answered request (in time or late, with or without ghost text):", "",
            "| config | keystrokes | ghost before next key | right | right chars / key | empty answer "
            "| all keys p50 / p95 ms | answered p50 / p95 / max ms | shown p50 / p95 ms |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        a, k, lat = r["answered_ms"], r["all_keys_ms"], r["latency_ms"]
        out.append(f"| {_label(r)} | {r['keystrokes']} "
                   f"| {pct(r['shown_before_next_key'])} | {pct(r['right_share'])} "
                   f"| {_f(r.get('right_chars_per_key'), '{:.2f}')} | {pct(r['empty_share'])} "
                   f"| {_f(k['p50'])} / {_f(k['p95'])} | {_f(a['p50'])} / {_f(a['p95'])} / {_f(a['max'])} "
                   f"| {_f(lat['p50'])} / {_f(lat['p95'])} |")
    if len(rows) > len({r["name"] for r in rows}):
        out += ["", "Medians over the rounds (configurations interleaved round by round):", "",
                "| config | rounds | all keys p50 / p95 ms | answered p50 / p95 ms | shown p50 ms | shown p95 ms "
                "| ghost before next key | right | wasted / generated | engine req/key | "
                "reuses | early / partial answers | right chars / key | from cache |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for m in medians(rows):
            out.append(f"| {m['name']} | {m['rounds']} | {_f(m['all_keys_p50_ms'])} / {_f(m['all_keys_p95_ms'])} "
                       f"| {_f(m['answered_p50_ms'])} / {_f(m['answered_p95_ms'])} "
                       f"| {_f(m['p50_ms'])} | {_f(m['p95_ms'])} "
                       f"| {pct(m['shown_before_next_key'])} | {pct(m['right_share'])} | {pct(m['wasted_share'])} "
                       f"| {_f(m['engine_requests_per_keystroke'], '{:.2f}')} | {_f(m['reuses'])} "
                       f"| {_f(m['early_answers'])} / {_f(m.get('partial_answers'))} "
                       f"| {_f(m.get('right_chars_per_key'), '{:.2f}')} | {_f(m['served_from_cache'])} |")
    out += ["", "shown = edits whose ghost text arrived before the next edit / edits sent; latency (didChange sent -> "
                "response received) over all keystrokes, over answered requests, and over shown ones (the first "
                "table's p50/p95/p99: survivorship-biased, read with the shown share); right = shown ghost text whose "
                "first line the document later held at the cursor. Status counts: " +
            "; ".join(f"{r['name']}: {r['status']}" for r in rows), ""]
    return "\n".join(out)


def plot_headline(raw: dict, path: Path) -> None:
    """Per condition (load, rhythm), a bar per configuration: right before the next key, ghost before the next key
    (medians over rounds, whiskers the rounds' range) and the answered p95."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    meds = [m for m in condition_medians(conditions(raw)) if m["rhythm"] != "all"]
    conds = list(dict.fromkeys((m["load"], m["rhythm"]) for m in meds))
    names = list(dict.fromkeys(m["name"] for m in meds))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8))
    w = 0.8 / max(1, len(names))
    for ax, key, scale, label in ((axes[0], "right_before_next_key", 100, "% of keystrokes: right before the next key"),
                                  (axes[1], "ghost_before_next_key", 100, "% of keystrokes: ghost before the next key"),
                                  (axes[2], "answered_p95_ms", 1, "answered p95 (ms)")):
        for j, n in enumerate(names):
            xs, ys, lo, hi = [], [], [], []
            for i, c in enumerate(conds):
                m = next((m for m in meds if (m["load"], m["rhythm"], m["name"]) == (*c, n)), None)
                if m is None or m[key] is None:
                    continue
                rng = m[key + "_range"]
                xs.append(i + (j - (len(names) - 1) / 2) * w)
                ys.append(scale * m[key])
                lo.append(scale * (m[key] - rng[0]))
                hi.append(scale * (rng[1] - m[key]))
            ax.bar(xs, ys, w, yerr=[lo, hi], capsize=2, label=n)
        ax.set_xticks(range(len(conds)), [f"{ld}, {rh}" for ld, rh in conds], rotation=20, ha="right")
        ax.set_ylabel(label)
    axes[0].legend(fontsize=8)
    axes[0].set_title("right before the next key (median, range over rounds)", fontsize=9)
    axes[1].set_title("ghost text before the next key", fontsize=9)
    axes[2].set_title("answered p95 (median over rounds)", fontsize=9)
    fig.suptitle(f"typing-trace replay, {raw['machine']['cpu']}, {raw['machine']['cores']} cores, "
                 f"{raw.get('date', '')}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_figure(raw: dict, rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["name"] for r in rows]
    lat = [[x["latency_ms"] for t in c["traces"] for x in t["records"] if x["status"] == "shown"] or [0]
           for c in raw["configs"]]
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    a.boxplot(lat, whis=(5, 95), showfliers=False)
    a.set_xticks(range(1, len(names) + 1), names, rotation=30, ha="right")
    a.set_ylabel("keystroke -> ghost text (ms), shown completions")
    a.set_title("latency (box: p25-p75, whiskers p5-p95)")
    x = range(len(names))
    w100 = [100 * (r["pauses_ghost_within_100ms"] or 0) for r in rows]
    w200 = [100 * (r["pauses_ghost_within_200ms"] or 0) for r in rows]
    b.bar([i - 0.2 for i in x], w100, 0.4, label="<= 100 ms")
    b.bar([i + 0.2 for i in x], w200, 0.4, label="<= 200 ms")
    b.set_xticks(list(x), names, rotation=30, ha="right")
    b.set_ylabel("% of pauses with ghost text")
    b.set_title("pauses that got ghost text in time")
    b.legend()
    fig.suptitle(f"typing-trace replay, {raw['machine']['cpu']}, {raw['machine']['cores']} cores", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _finite(v):
    """``v`` with never (infinite latency) written as the string "never": JSON has no infinity."""
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_finite(x) for x in v]
    return "never" if v == NEVER else v


def write(raw: dict, out: Path, name: str = "replay", plot: bool = True) -> dict:
    """Write ``<name>.json`` (summary), ``<name>.md``, ``<name>.png`` and the raw records under ``tmp/``."""
    out.mkdir(parents=True, exist_ok=True)
    rows = [summarize(c, raw["pause_ms"]) for c in raw["configs"]]
    paths = {"json": out / f"{name}.json", "md": out / f"{name}.md"}
    summary = {k: raw.get(k) for k in ("date", "finished", "machine", "command", "server_defaults", "loads",
                                        "load_generator", "transport", "speed", "pause_ms", "house", "traces")}
    cond_rows = conditions(raw)
    summary["headline"] = condition_medians(cond_rows)
    summary["verdicts"] = verdicts(summary["headline"])
    summary["conditions"] = cond_rows
    summary["configs"] = [{"options": c["options"], "engine_config": c.get("engine_config"),
                           "engine": c.get("engine"), "server": c.get("server"), "round": c.get("round"),
                           "loadavg_before": c.get("loadavg_before"), "loadavg": c.get("loadavg"),
                           "effective": c.get("effective"), **r}
                          for c, r in zip(raw["configs"], rows)]
    if len(rows) > len({r["name"] for r in rows}):
        summary["medians"] = medians(rows)
    paths["json"].write_text(json.dumps(_finite(summary), indent=1, default=str))
    paths["md"].write_text(markdown(raw, rows))
    raw_dir = out / "tmp"
    raw_dir.mkdir(exist_ok=True)
    paths["raw"] = raw_dir / f"{name}.raw.json"
    paths["raw"].write_text(json.dumps(raw, default=str))
    if plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:   # a bare GPU box: the numbers still come back; re-render later with bench.report
            print(f"matplotlib is not installed: no plot. To draw it: pip install -e '.[bench]' (or pip install "
                  f"matplotlib), then python -m bench.report {paths['raw']}")
        else:
            paths["png"] = out / f"{name}.png"
            plot_headline(raw, paths["png"])
            paths["latency_png"] = out / f"{name}-latency.png"
            plot_figure(raw, rows, paths["latency_png"])
    return paths


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("raw", type=Path, help="a FOLDER/tmp/NAME.raw.json that bench.replay wrote")
    ap.add_argument("--out", type=Path, default=None,
                    help="output folder (default: the run's own folder, FOLDER above; never the committed results "
                         "unless named here)")
    ap.add_argument("--name", default=None, help="output file stem (default: NAME of the raw file)")
    a = ap.parse_args(argv)
    if a.out is None:
        a.out = a.raw.resolve().parent.parent if a.raw.resolve().parent.name == "tmp" else a.raw.resolve().parent
    name = a.name or a.raw.name.removesuffix(".raw.json")
    paths = write(json.loads(a.raw.read_text()), a.out, name)
    print(Path(paths["md"]).read_text())


if __name__ == "__main__":
    main()
