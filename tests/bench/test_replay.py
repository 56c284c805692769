"""A tiny real replay: the real server process over stdio (and websockets), a few keystrokes, a tiny engine."""

import argparse
import asyncio
import sys

import pytest

from bench import replay
from lsp import trace as tr

URI = "file:///bench/t.py"
TEXT = "def add(a, b):\n    \n\nprint(add(1, 2))\n"


def _args(transport="stdio"):
    cmd = f"{sys.executable} -m lsp.server --ws 127.0.0.1:0 --allow-client-models" if transport == "ws" else None
    return argparse.Namespace(transport=transport, server_cmd=cmd, connect=None, speed=1.0, ready_timeout=120.0)


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


async def _run(options, trace, transport="stdio"):
    return await replay.run_config("t", options, [("t", trace)], _args(transport), None)


def _options(engine, **kw):
    return replay.merge({"maxTokens": 8, "debounceMs": 0}, {"engine": engine, **kw})


async def test_replay_counts_every_keystroke_and_reads_engine_counters(tiny_options):
    res = await _run(_options(tiny_options), _trace("return"))
    t = res["traces"][0]
    recs = t["records"]
    assert [r["kind"] for r in recs] == ["key"] * 6
    assert all(r["status"] in ("shown", "empty", "stale", "cancelled") for r in recs)
    assert recs[-1]["status"] in ("shown", "empty")              # the last one has no newer edit
    assert res["server"]["requests_received"] == 6
    assert res["engine"]["requests_started"] >= 1
    assert t["final_equals_trace"]
    from bench import report
    s = report.summarize(res, 500)
    assert s["keystrokes"] == 6


async def test_accepting_ghost_text_skips_the_keys_that_typed_it(tiny_options):
    opts = _options(tiny_options, typeThroughCache=False)
    first = await _run(opts, _trace("ret", accept_after=3, intended=""))
    ghost = first["traces"][0]["records"][-1]["ghost"]
    if not ghost or not ghost.strip():
        pytest.skip(f"the tiny random model showed no ghost text here ({ghost!r})")
    # the same keystrokes, then the user wants exactly what was shown and types it (the replay should accept)
    second = await _run(opts, _trace("ret" + ghost + "#", accept_after=3, intended=ghost + "#"))
    t = second["traces"][0]
    assert t["accepted"] == 1 and t["chars_saved"] == len(ghost)
    kinds = [r["kind"] for r in t["records"]]
    assert kinds == ["key"] * 3 + ["accept", "key"]              # the keys typing the ghost text were skipped
    assert t["final_equals_trace"]
    # the skipped keys take no time: "#" is scheduled one inter-key gap after the accept
    acc, last = t["records"][-2:]
    scheduled = (last["t"] - last["lag_ms"] / 1000) - (acc["t"] - acc["lag_ms"] / 1000)
    assert scheduled == pytest.approx(0.25, abs=0.05)


async def test_no_cancel_runs_every_request_to_the_end(tiny_options):
    res = await _run(_options(tiny_options, cancelStaleRequests=False), _trace("pass", gap=20))
    assert res["engine"]["requests_aborted"] == 0
    assert res["server"]["engine_requests"] == 4
    assert res["engine"].get("wasted_tokens", 0) == 0


async def test_websocket_transport(tiny_options):
    res = await _run(_options(tiny_options), _trace("ab"), transport="ws")
    assert [r["kind"] for r in res["traces"][0]["records"]] == ["key", "key"]
    assert res["server"]["requests_received"] == 2


async def test_a_configuration_may_run_its_own_server_command(tiny_options):
    """serverCmd (two checkouts interleaved in one run): the configuration's server is started with it, and the key
    is not sent to the server (which refuses unknown options)."""
    cmd = f"{sys.executable} -m lsp.server --log-level WARNING --stdio"
    res = await _run(_options(tiny_options, serverCmd=cmd), _trace("ab"))
    assert res["server_cmd"] == cmd and "serverCmd" not in res["options"]
    assert res["server"]["requests_received"] == 2
    with pytest.raises(Exception):
        await _run(_options(tiny_options, serverCmd="sh -c 'exit 3'"), _trace("ab"))


def test_cli_rejects_unknown_configuration(capsys):
    with pytest.raises(SystemExit, match="unknown configuration"):
        asyncio.run(replay.amain(replay.build_parser().parse_args(["--configs", "bogus"])))


def test_right_is_the_first_line_the_user_then_typed_at_the_cursor():
    final = "x = 1\nif x:\n    y = compute(x)\n"
    assert replay.right("1\n", "x = ", "\nif x:\n    y = compute(x)\n", final)
    assert replay.right("comp", "x = 1\nif x:\n    y = ", "\n", final)          # a correct part of the line
    assert not replay.right("comb(x)", "x = 1\nif x:\n    y = ", "\n", final)
    assert replay.right("\n    y = compute(x)\n    z", "x = 1\nif x:", "\n", final)  # block: its first line
    assert not replay.right("1", "x = 2", "", final)                               # the text before changed (typo)
    assert not replay.right("  \n", "x = ", "\n", final)                         # nothing to show is not right
    # strict: text that already stood after the cursor is not what the user typed (an editor shows a duplicate)
    assert not replay.right("\n    y = compute(x)", "x = 1\nif x:", "\n    y = compute(x)\n", final)
    assert not replay.right("compute(x)", "x = 1\nif x:\n    y = ", "compute(x)\n", final)
    # nor is a ghost longer than what was typed before the text after the cursor
    assert not replay.right("compute(x)\n", "x = 1\nif x:\n    y = ", "(x)\n", final)
    assert replay.right("compute", "x = 1\nif x:\n    y = ", "(x)\n", final)
    assert not replay.right("1", "x = ", "zzz", final)                              # the text after changed


def test_default_configuration_is_the_servers_own_defaults_and_base_stays():
    from lsp.config import ServerConfig

    assert replay.CONFIGS["default"] == {}                      # no options sent: what a user's editor gets
    assert replay.server_defaults() == ServerConfig().to_json()
    assert replay.effective({}) == ServerConfig().to_json()
    base = replay.effective(replay.CONFIGS["base"])
    assert base["maxTokens"] == 32 and base["debounceMs"] == 30 and base["engine"]["speculation"] == "none"
    assert not base["reuseInFlight"] and not base["adaptiveDebounce"] and not base["earlyAnswer"]
    assert replay.effective({"maxTokens": "many"}) is None      # options the server refuses


def test_cli_configurations_default_and_base_and_over_the_defaults():
    args = replay.build_parser().parse_args(["--configs", "default,base,reuse", "--config", 'x={"maxTokens": 16}',
                                             "--engine", "threads=1", "--load", "quiet,busy"])
    chosen, loads = replay.configurations(args)
    assert loads == ["quiet", "busy"]
    assert chosen["default"] == {"engine": {"threads": 1}}               # the server's defaults, --engine aside
    assert chosen["base"]["maxTokens"] == 32 and chosen["base"]["engine"] == {"speculation": "none", "threads": 1}
    assert chosen["reuse"]["reuseInFlight"] is True and chosen["reuse"]["maxTokens"] == 32   # over base's options
    assert chosen["x"] == {"engine": {"threads": 1}, "maxTokens": 16}    # --config: over the server's defaults
    assert replay.build_parser().parse_args([]).configs == "default,base"
    with pytest.raises(SystemExit, match="--load"):
        replay.configurations(replay.build_parser().parse_args(["--load", "noisy"]))
    with pytest.raises(SystemExit, match="would refuse"):
        replay.configurations(replay.build_parser().parse_args(["--config", 'y={"maxTokens": 0}']))


def test_house_info_is_the_pair_that_ran():
    """Results name the house pair the engine ran: house v2 (the default) from house/v2/, v1 from house/; a model
    that is not a shipped house model has none."""
    v2 = replay.house_info(None)
    assert v2["model"] == "house:v2/target" and v2["folder"] == "completer/models/house/v2"
    assert "--corpus .corpus/train.jsonl.xz" in v2["command"] and v2["trained_on"] == "nvidia-h200"
    assert replay.house_info("house:v2/target") == v2
    v1 = replay.house_info("house:target")
    assert v1["folder"] == "completer/models/house" and "--corpus" not in v1["command"]
    assert replay.house_info("/models/Qwen2.5-Coder-7B") is None
    ran = [{"engine_config": {"model": "house:target"}, "options": {}}]
    assert replay.houses_used(ran, {"engine": {}}) == v1
    assert replay.houses_used([{"options": {}}], {"engine": {}}) == v2        # nothing reported: the default
    both = replay.houses_used(ran + [{"engine_config": {"model": "house:v2/target"}}], {})
    assert both == {"house:target": v1, "house:v2/target": v2}
