"""Replay typing traces against the real language server, as an editor would, for several configurations.

    python -m bench.replay [TRACES...] [--transport stdio|ws] [--server-cmd CMD | --connect ws://HOST:PORT]
                           [--configs default,base,none,draft-k4,ngram-k4,adaptive,adaptive-nocancel,
                                      adaptive-nocache,reuse,early-answer,adaptive-debounce]
                           [--config NAME=JSON ...] [--engine KEY=VALUE ...] [--option KEY=JSON ...]
                           [--load quiet,busy] [--repeat N] [--speed 1.0] [--out FOLDER]
    python -m bench.replay ... --plan                 (print what would run, as JSON; run nothing)
    python -m bench.replay --judge CASES.json         (the verdict of right() on each {ghost, before, after, final})

The configuration ``default`` sends no options at all: the server runs with its own defaults (lsp/config.py's
``ServerConfig``, recorded in the results as they were read there), so the replay measures what users get.
``base`` is the replay's old fixed options (maxTokens 32, fixed 30 ms debounce, no reuse, no early answer, no
adaptive debounce, no speculation): a default that loses to it anywhere is a bug. The other named configurations
are, as before, ``base``'s options (speculation aside) plus their own; ``--config NAME=JSON`` is the server's
defaults plus JSON (e.g. ``--config 'adaptive-debounce-on={"adaptiveDebounce": true}'``).

The headline figure (first in the report) is **right before the next key**: the share of *all* keystrokes whose
ghost text arrived before the next key and was right (see :func:`right`). Then the share with any ghost text before
the next key, then the answered p50/p95. ``--load quiet,busy`` runs every round once on the machine as it is and
once with ``bench.load --cores 1`` (a bounded busy loop, as a build) running next to the server; each trace's typing
rhythm (``bench.make_traces --rhythm``) is a condition of its own in the report.

For every configuration (all in one run, one after another, each against a fresh server unless ``--connect``):
``initialize`` with the configuration's initialization options, wait for the engine, then for each trace
``didOpen``, ``completer/didMoveCursor`` where the first keystroke will be, 100 ms after the open (the user put
the cursor there; the editors of ``editors/`` report a cursor that rested 100 ms), and, at the trace's times (divided
by ``--speed``), per keystroke one incremental ``didChange`` and one ``textDocument/inlineCompletion`` at the
cursor. A response counts as *shown* if it has ghost text and arrives before the next edit; later ones are stale
and ignored, as editors do. With cancellation on, the client sends ``$/cancelRequest`` for the stale request (as
VS Code does) and the server aborts it; with it off (``cancelStaleRequests: false``) the client sends no cancel and
the server runs every request to the end. At an
``accept`` point the user presses Tab if the ghost text shown then is a prefix of the intended text: the replay
inserts it (one ``didChange``), skips the trace's keystrokes that typed the same text and pulls the rest of the
trace earlier by the time they took. Engine counters come from ``completer/stats`` (differences before/after).

Writes ``replay.json``, ``replay.md`` and ``replay.png`` (see bench/report.py) to ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from bench.record import loadavg as _loadavg, machine
from bench.report import first_line
from completer.engine.base import counted_between
from lsp import trace as tr
from lsp.client import Client, RpcError, Server

HERE = Path(__file__).resolve().parent
# today's lifecycle unless a configuration turns an issue-13 mechanism on (the server's defaults may differ)
BASE_OPTIONS = {"maxTokens": 32, "debounceMs": 30, "reuseInFlight": False, "earlyAnswer": False, "partialAnswerMs": 0,
                "adaptiveDebounce": False, "warmOnCursor": False}
DEFAULT = "default"     # no options: the server's own defaults
CURSOR_REST_S = 0.1     # the editors report a cursor that rested this long (completer/didMoveCursor)
CONFIGS: dict[str, dict] = {
    DEFAULT: {},
    # the replay's old base options with no speculation: the fixed point every default must beat or tie
    "base": {**BASE_OPTIONS, "engine": {"speculation": "none"}},
    "none": {"engine": {"speculation": "none"}},
    "draft-k4": {"engine": {"speculation": "draft", "num_speculative_tokens": 4}},
    "ngram-k4": {"engine": {"speculation": "ngram", "num_speculative_tokens": 4}},
    "adaptive": {"engine": {"speculation": "draft", "num_speculative_tokens": "adaptive"}},
    "adaptive-nocancel": {"engine": {"speculation": "draft", "num_speculative_tokens": "adaptive"},
                          "cancelStaleRequests": False},
    "adaptive-nocache": {"engine": {"speculation": "draft", "num_speculative_tokens": "adaptive",
                                    "prefix_cache": False}},
    # issue 13, each on top of the one before: keep the engine request a keystroke types along with; answer at the
    # end of the first line and finish the block in the background; a debounce learned from the typing rhythm
    "reuse": {"engine": {"speculation": "draft", "num_speculative_tokens": "adaptive"}, "reuseInFlight": True},
    "early-answer": {"engine": {"speculation": "draft", "num_speculative_tokens": "adaptive"}, "reuseInFlight": True,
                     "earlyAnswer": True},
    "adaptive-debounce": {"engine": {"speculation": "draft", "num_speculative_tokens": "adaptive"},
                          "reuseInFlight": True, "earlyAnswer": True, "adaptiveDebounce": True},
}
# configurations given as they are (not over BASE_OPTIONS)
AS_GIVEN = (DEFAULT, "base")
LOADS = ("quiet", "busy")
SERVER_CMD = "serverCmd"  # in a --config: this configuration's server command (e.g. another checkout's)
DRAIN_S = 20.0          # after a trace, wait at most this long for answers still outstanding
MAX_ASKS = 8            # a keystroke's requests after partial answers, at most (the server gives one per text)
LOAD_BOUND_S = 1800.0   # the busy condition's load generator stops by itself after this long at the latest


def server_defaults() -> dict:
    """The server's own defaults, as ``initialize`` without options gives them (lsp/config.py)."""
    from lsp.config import ServerConfig

    return ServerConfig().to_json()


def effective(options: dict) -> dict | None:
    """The settings a server runs with after ``initialize`` with ``options`` (None: options the server refuses)."""
    from lsp.config import ConfigError, ServerConfig

    try:
        return ServerConfig.from_options({k: v for k, v in options.items() if k != SERVER_CMD}).to_json()
    except ConfigError:
        return None


def merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out



def skip_typed_by_accept(ev, docs: dict, trace_docs: dict, syncing: set) -> bool:
    """True for an event of a document in ``syncing`` (an accepted completion inserted text the trace types later):
    the user would not type it, so it is skipped; its edit still moves the trace's own copy of the document, and
    once that copy equals the replayed one (``docs``) the document leaves ``syncing``."""
    if ev.uri not in syncing or (ev.edit is None and ev.accept is None):
        return False
    if ev.edit is not None:
        trace_docs[ev.uri] = tr.apply_edit(trace_docs[ev.uri], ev.edit)[0]
        if trace_docs[ev.uri] == docs[ev.uri]:
            syncing.discard(ev.uri)
    return True


class Replayer:
    """Replays one trace on an initialized connection; collects one record per edit the client sent."""

    def __init__(self, client: Client, cancel: bool, speed: float, tick=None):
        self.client, self.cancel, self.speed, self.tick = client, cancel, speed, tick or (lambda: None)

    async def run(self, name: str, trace: tr.Trace) -> dict:
        c = self.client
        h = trace.header
        docs = {h.uri: h.text}            # what the server has (trace edits + accepted ghost text)
        trace_docs = dict(docs)           # what the trace alone would give
        versions = {h.uri: 1}
        await c.notify("textDocument/didOpen", {"textDocument": {"uri": h.uri, "languageId": h.language_id,
                                                                 "version": 1, "text": h.text}})
        records: list[dict] = []
        latest: dict | None = None        # the record of the newest request (the only one that may show)
        syncing: set[str] = set()
        shift = 0.0
        prev_t = 0.0
        accept_points = accepted = saved = 0
        t0 = time.perf_counter()
        waits = []
        befores: dict[int, tuple[str, str]] = {}   # id(record) -> the document before / after its cursor ("right")

        target = t0

        async def send_edit(uri: str, edit: dict, kind: str, cursor: dict | None) -> None:
            nonlocal latest
            docs[uri], off = tr.apply_edit(docs[uri], edit)
            versions[uri] += 1
            if latest is not None:
                latest["next_key"] = True     # what it shows from now on came after the next key
            if latest is not None and latest["status"] == "pending":
                latest["status"] = "stale"
                if self.cancel:
                    await c.notify("$/cancelRequest", {"id": latest["id"]})
            now = time.perf_counter()
            await c.notify("textDocument/didChange", {
                "textDocument": {"uri": uri, "version": versions[uri]}, "contentChanges": [edit]})
            pos = cursor or tr.position_of(docs[uri], off)
            rid, fut = await c.request("textDocument/inlineCompletion", {
                "textDocument": {"uri": uri}, "position": pos, "context": {"triggerKind": 2}})
            rec = {"trace": name, "kind": kind, "t": now - t0, "lag_ms": max(0.0, (now - target) * 1000),
                   "id": rid, "status": "pending", "latency_ms": None,
                   "ghost": None, "gap_ms": None, "offset": off, "uri": uri}
            records.append(rec)
            befores[id(rec)] = (docs[uri][:off], docs[uri][off:])
            latest = rec
            waits.append(asyncio.ensure_future(self._answer(rec, fut, now, pos)))

        cursor_reported = False
        for ev in trace.events:
            if not cursor_reported and ev.edit is not None and "range" in ev.edit:
                # the user put the cursor where they start typing: reported after it rested CURSOR_REST_S, as the
                # editors of editors/ do (completer/didMoveCursor, lsp/warm.py), when the trace leaves the time
                cursor_reported = True
                at = t0 + CURSOR_REST_S / self.speed
                if t0 + ev.t_ms / 1000 / self.speed > at:
                    await asyncio.sleep(max(0.0, at - time.perf_counter()))
                    await c.notify("completer/didMoveCursor", {"textDocument": {"uri": ev.uri},
                                                               "position": ev.edit["range"]["start"]})
            if skip_typed_by_accept(ev, docs, trace_docs, syncing):
                # pull the rest of the trace earlier by the time the skipped events took
                shift += ev.t_ms - prev_t
                prev_t = ev.t_ms
                self.tick()
                continue
            target = t0 + (ev.t_ms - shift) / 1000 / self.speed
            delay = target - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            self.tick()
            if ev.open is not None:
                docs[ev.uri] = trace_docs[ev.uri] = ev.open["text"]
                versions[ev.uri] = 1
                await c.notify("textDocument/didOpen", {"textDocument": {
                    "uri": ev.uri, "languageId": ev.open["languageId"], "version": 1, "text": ev.open["text"]}})
            elif ev.edit is not None:
                trace_docs[ev.uri] = tr.apply_edit(trace_docs[ev.uri], ev.edit)[0]
                await send_edit(ev.uri, ev.edit, "key", ev.cursor)
            elif ev.accept is not None:
                accept_points += 1
                g = latest["ghost"] if latest is not None and latest["status"] == "shown" else None
                if g and g.strip() and ev.accept["intended"].startswith(g) and latest["uri"] == ev.uri:
                    accepted += 1
                    saved += len(g)
                    latest["accepted"] = True
                    await send_edit(ev.uri, tr.insert_edit(docs[ev.uri], latest["offset"], g), "accept", None)
                    syncing.add(ev.uri)
            elif ev.reject is not None:
                if latest is not None and latest["status"] == "shown":
                    latest["rejected"] = True
                    latest = None
            prev_t = ev.t_ms
        end = time.perf_counter()
        for a, b in zip(records, records[1:]):
            a["gap_ms"] = (b["t"] - a["t"]) * 1000
        if records:
            records[-1]["gap_ms"] = float("inf")
        if waits:
            await asyncio.wait(waits, timeout=DRAIN_S)
        for w in waits:
            w.cancel()
        for rec in records:
            if rec["status"] == "shown":
                rec["right"] = right(rec["ghost"], *befores[id(rec)], docs[rec["uri"]])
        await c.notify("textDocument/didClose", {"textDocument": {"uri": h.uri}})
        return {"name": name, "rhythm": h.meta.get("rhythm", "medium"),
                "records": records, "accept_points": accept_points, "accepted": accepted, "chars_saved": saved,
                "chars_typed": sum(len(e.edit["text"]) for e in trace.events if e.edit is not None),
                "duration_s": end - t0, "final_equals_trace": docs[h.uri] == trace_docs[h.uri]}

    async def _answer(self, rec: dict, fut: asyncio.Future, sent: float, pos: dict | None = None) -> None:
        try:
            got, msg = await fut
        except (ConnectionError, asyncio.CancelledError):
            if rec["status"] == "pending":
                rec["status"] = "unanswered"
            return
        res = msg.get("result")
        if isinstance(res, dict) and res.get("partial") is True and pos is not None:
            # a partial answer (the client declared partialGhost, as the editors do): shown, and asked again at
            # once for the same position, as the editors do; what comes before the next key replaces it
            await self._shown_answer(rec, got, sent, msg)
            rec["partial_answers"] = rec.get("partial_answers", 0) + 1
            while rec["status"] == "shown" and not rec.get("next_key") and rec["partial_answers"] < MAX_ASKS:
                _, fut = await self.client.request("textDocument/inlineCompletion", {
                    "textDocument": {"uri": rec["uri"]}, "position": pos, "context": {"triggerKind": 2}})
                rec["asked_again"] = rec.get("asked_again", 0) + 1
                try:
                    got, msg = await fut
                except (ConnectionError, asyncio.CancelledError):
                    return
                res = msg.get("result")
                text = _first_text(res) if "error" not in msg else None
                if rec.get("next_key") or not text:
                    return
                rec["ghost"] = text
                rec["grown_ms"] = (got - sent) * 1000
                if not (isinstance(res, dict) and res.get("partial") is True):
                    return
                rec["partial_answers"] += 1
            return
        await self._shown_answer(rec, got, sent, msg)

    async def _shown_answer(self, rec: dict, got: float, sent: float, msg: dict) -> None:
        rec["answer_ms"] = (got - sent) * 1000
        if "error" in msg:
            code = msg["error"].get("code")
            rec["error"] = code
            rec["error_message"] = str(msg["error"].get("message"))[:200]
            if rec["status"] == "pending":
                rec["status"] = "cancelled" if code == -32800 else "error"
            return
        text = _first_text(msg.get("result"))
        if rec["status"] == "pending":
            if text:
                rec.update(status="shown", ghost=text, latency_ms=rec["answer_ms"])
            else:
                rec["status"] = "empty"
        else:                             # a late answer (not shown): what it was, for bench.why
            rec["late_ghost"] = text or ""


def _first_text(res) -> str | None:
    """The first item's text of an inline completion result."""
    items = (res.get("items") or []) if isinstance(res, dict) else (res or [])
    text = items[0].get("insertText") if items else None
    return text.get("value") if isinstance(text, dict) else text


def right(ghost: str, before: str, after: str, final: str) -> bool:
    """Whether ghost text shown with the document ``before`` + ``after`` (the cursor between them) was right: what
    the user then typed (or accepted) there, the text the document ``final`` (after the trace) holds between
    ``before`` and ``after``, starts with the ghost text's first line (through its first non-blank line, trailing
    blanks aside). Strict: the document before the cursor must be unchanged (a typo answered is never right), and
    ghost text that repeats what already stood after the cursor is not what the user typed (an editor shows it as a
    duplicate); only the first line counts because that is what a keystroke's ghost text is judged by, and the rest
    of a block may still be right or wrong later."""
    if not ghost.strip() or not final.startswith(before) or not final.endswith(after) \
            or len(final) < len(before) + len(after):
        return False
    typed = final[len(before):len(final) - len(after)]
    return typed.startswith(first_line(ghost))


async def run_config(name: str, options: dict, traces: list[tuple[str, tr.Trace]], args, tick) -> dict:
    # a configuration may run its own server command ("serverCmd", not sent to the server): two checkouts of the
    # server (a base commit and a change) interleaved round by round in one run, so the machine's load hits both alike
    options = dict(options)
    server_cmd = options.pop(SERVER_CMD, None) or args.server_cmd
    server = Server(args.transport, server_cmd, args.connect)
    client = await server.start()
    try:
        await client.call("initialize", {
            "processId": None, "rootUri": None, "initializationOptions": options,
            # as the editors of editors/ do: they ask again at once on a partial answer (lsp/README.md)
            "capabilities": {"general": {"positionEncodings": ["utf-16"]},
                             "textDocument": {"inlineCompletion": {}}, "experimental": {"partialGhost": True}}},
            timeout=120)
        await client.notify("initialized", {})
        t_ready = time.perf_counter()
        before = await client.wait_ready(args.ready_timeout)
        ready_s = time.perf_counter() - t_ready
        cancel = options.get("cancelStaleRequests", True)
        rep = Replayer(client, cancel=cancel, speed=args.speed, tick=tick)
        per_trace = [await rep.run(n, t) for n, t in traces]
        after = await client.call("completer/stats", {})
    finally:
        await server.stop(client)
    return {"name": name, "options": options, "server_cmd": server_cmd, "engine_ready_s": ready_s, "traces": per_trace,
            "server": counted_between(before.get("server"), after.get("server")),
            "engine": counted_between(before.get("engine"), after.get("engine")),
            "engine_config": (after.get("config") or {}).get("engine"), "prompt": after.get("prompt"),
            "messages": client.messages[-20:]}


def start_load(cores: int):
    """The busy condition's load: ``python -m bench.load --cores N``, bounded by LOAD_BOUND_S whatever happens."""
    import subprocess

    return subprocess.Popen([sys.executable, "-m", "bench.load", "--cores", str(cores), "--seconds",
                             str(LOAD_BOUND_S)], cwd=HERE.parent, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def stop_load(proc) -> None:
    import subprocess

    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def parse_kv(items: list[str], what: str) -> dict:
    out = {}
    for it in items or []:
        if "=" not in it:
            raise SystemExit(f"{what}: expected KEY=VALUE, got {it!r}")
        k, v = it.split("=", 1)
        try:
            out[k] = json.loads(v)
        except json.JSONDecodeError:
            out[k] = v
    return out


def house_info(model: str | None = None) -> dict | None:
    """Which shipped house pair ran (its training metadata), so results say what model produced them: the pair of
    ``model``, the engine's model setting (None: the embedded engine's default), read from that pair's folder
    (``house:target`` -> completer/models/house/, ``house:v2/target`` -> completer/models/house/v2/); None for a
    model that is not a shipped house model."""
    from completer.engine.config import DEFAULT, default_model

    spec = default_model() if model in (None, DEFAULT) else model
    if not spec.startswith("house:"):
        return None
    house = HERE.parent / "completer" / "models" / "house"
    folder = (house / spec.split(":", 1)[1]).parent
    info: dict = {"model": spec, "folder": folder.relative_to(HERE.parent).as_posix()}
    try:
        meta = json.loads((folder / "train_meta.json").read_text())
        info.update({k: meta.get(k) for k in ("command", "preset", "device", "steps", "seed")})
    except (OSError, ValueError):
        pass
    try:
        for ln in (folder / "REPORT.md").read_text().splitlines():
            if ln.strip().startswith("trained-on:"):
                info["trained_on"] = ln.split(":", 1)[1].strip()
    except OSError:
        pass
    return info


def houses_used(results: list[dict], base: dict) -> dict | None:
    """:func:`house_info` of the model the configurations ran (the engine's model as the server reported it, else
    as configured, else the default); with several models, ``{model: info}``."""
    models = sorted({(r.get("engine_config") or {}).get("model") or (r.get("options") or {}).get("engine", {}).get(
        "model") or (base.get("engine") or {}).get("model") or "" for r in results} or {""})
    if len(models) == 1:
        return house_info(models[0] or None)
    return {m or "default": house_info(m or None) for m in models}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="*", default=[str(HERE / "traces")], help="trace files or folders")
    ap.add_argument("--transport", choices=["stdio", "ws"], default="stdio")
    ap.add_argument("--server-cmd", help="command that starts the server (default: this Python's lsp.server)")
    ap.add_argument("--connect", help="ws://HOST:PORT of a running server (one connection per configuration)")
    ap.add_argument("--configs", default=f"{DEFAULT},base",
                    help=f"comma-separated, from {', '.join(CONFIGS)} (default: {DEFAULT},base)")
    ap.add_argument("--config", action="append", metavar="NAME=JSON",
                    help="an extra configuration: initialization options merged over the server's defaults (and "
                         "--engine/--option); a \"serverCmd\" key "
                         "gives it its own server command (e.g. 'cd /tmp/base && exec python -m lsp.server --stdio' "
                         "in sh -c), so two checkouts can be interleaved")
    ap.add_argument("--engine", action="append", metavar="KEY=VALUE", help="engine setting for every configuration")
    ap.add_argument("--option", action="append", metavar="KEY=JSON", help="server option for every configuration")
    ap.add_argument("--speed", type=float, default=1.0, help="replay this many times faster than the trace")
    ap.add_argument("--load", default="quiet",
                    help=f"comma-separated machine conditions, from {', '.join(LOADS)}: busy runs `python -m "
                         "bench.load --cores N` (--load-cores) next to the server during each configuration")
    ap.add_argument("--load-cores", type=int, default=1, help="busy cores of the busy condition (default 1)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="rounds: every configuration once per round, interleaved, so that a change of the machine's "
                         "load hits all of them alike; the report adds medians over the rounds")
    ap.add_argument("--pause-ms", type=float, default=500.0, help="a gap this long after a keystroke is a pause")
    ap.add_argument("--out", type=Path, default=None,
                    help="output folder (default: a new bench/results/replay-<UTC time>/, never the committed "
                         "results)")
    ap.add_argument("--name", default="replay", help="output file stem")
    ap.add_argument("--ready-timeout", type=float, default=600.0, help="seconds to wait for the engine to load")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--plan", action="store_true",
                    help="run nothing: print the configurations (options sent, settings the server runs with), the "
                         "server's defaults, the machine conditions and the house pair, as JSON")
    ap.add_argument("--judge", type=Path, metavar="CASES.json",
                    help="run nothing: print the right-before-the-next-key verdict (see right()) of each case "
                         "{ghost, before, after, final} of CASES.json, as a JSON list")
    return ap


def plan(args) -> dict:
    """What ``args`` would run (``--plan``): each configuration's options and effective settings, and the rest."""
    chosen, loads = configurations(args)
    return {"server_defaults": server_defaults(), "loads": loads,
            "configs": {n: {"options": o, "effective": effective(o)} for n, o in chosen.items()},
            "house": houses_used([{"options": o} for o in chosen.values()],
                                 {"engine": parse_kv(args.engine, "--engine")})}


def configurations(args) -> tuple[dict[str, dict], list[str]]:
    """The configurations to run (name -> initialization options) and the machine conditions, from the command
    line: ``default`` and ``base`` as given, the other named ones over ``base``'s options, ``--config`` ones over the
    server's defaults; ``--engine``/``--option`` on top of each. SystemExit names a bad one."""
    common = merge({"engine": parse_kv(args.engine, "--engine")}, parse_kv(args.option, "--option"))
    if not common["engine"]:
        del common["engine"]
    base = merge(BASE_OPTIONS, common)
    chosen = {}
    for n in [x for x in args.configs.split(",") if x]:
        if n not in CONFIGS:
            raise SystemExit(f"unknown configuration {n!r}; known: {', '.join(CONFIGS)}")
        chosen[n] = merge(CONFIGS[n], common) if n in AS_GIVEN else merge(base, CONFIGS[n])
    for item in args.config or []:
        n, _, js = item.partition("=")
        try:
            chosen[n] = merge(common, json.loads(js))
        except json.JSONDecodeError as e:
            raise SystemExit(f"--config {n}: not JSON: {e}") from None
    loads = [x for x in args.load.split(",") if x]
    bad = [x for x in loads if x not in LOADS]
    if bad or not loads:
        raise SystemExit(f"--load: expected a comma-separated list of {', '.join(LOADS)}, got {args.load!r}")
    for n, opts in chosen.items():
        if effective(opts) is None:
            raise SystemExit(f"configuration {n!r}: the server would refuse its options {json.dumps(opts)}")
    return chosen, loads


async def amain(args) -> dict:
    traces = tr.load_all(args.traces)
    if not traces:
        raise SystemExit(f"no traces found in {args.traces}")
    chosen, loads = configurations(args)
    total = args.repeat * len(loads) * len(chosen) * sum(len(t.events) for _, t in traces)
    try:
        from tqdm import tqdm
        bar = tqdm(total=total, desc="replay", unit="ev")
        tick = lambda: bar.update(1)  # noqa: E731
    except ImportError:
        bar, tick = None, None
    results = []
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    for rnd in range(args.repeat):
        for cond in loads:
            for n, opts in chosen.items():
                if bar is not None:
                    bar.set_postfix_str(f"{n}, {cond} (round {rnd + 1}/{args.repeat})")
                load_before = _loadavg()
                gen = start_load(args.load_cores) if cond == "busy" else None
                try:
                    res = await run_config(n, opts, traces, args, tick)
                finally:
                    if gen is not None:
                        stop_load(gen)
                res.update(round=rnd + 1, load=cond, loadavg_before=load_before, loadavg=_loadavg(),
                           effective=effective(opts))
                results.append(res)
    if bar is not None:
        bar.close()
    return {"date": started, "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "machine": machine(), "server_defaults": server_defaults(), "loads": loads,
            "load_generator": f"python -m bench.load --cores {args.load_cores} (only in the busy condition)",
            "command": " ".join(["python -m bench.replay"] + [shlex.quote(a) for a in sys.argv[1:]]),
            "transport": "ws (connect)" if args.connect else args.transport, "speed": args.speed,
            "pause_ms": args.pause_ms, "house": houses_used(results, {"engine": parse_kv(args.engine, "--engine")}),
            "traces": [{"name": n, "keystrokes": t.keystrokes, "duration_s": t.events[-1].t_ms / 1000,
                        "language": t.header.language_id, "source": t.header.meta.get("source"),
                        "rhythm": t.header.meta.get("rhythm", "medium")} for n, t in traces],
            "configs": results}


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.judge:
        print(json.dumps([right(c["ghost"], c["before"], c["after"], c["final"])
                          for c in json.loads(args.judge.read_text())]))
        return
    if args.plan:
        print(json.dumps(plan(args), indent=1))
        return
    if args.out is None:
        args.out = HERE / "results" / f"replay-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"
    raw = asyncio.run(amain(args))
    from bench import report

    paths = report.write(raw, args.out, args.name, plot=not args.no_plot)
    print(Path(paths["md"]).read_text())
    print("wrote", ", ".join(str(p) for p in paths.values()))


if __name__ == "__main__":
    main()
