"""``completer-lsp --tcp ... --metrics HOST:PORT``: a real server, real completions over TCP, then a scrape of
``/metrics`` that must show every metric lsp/README.md lists with a plausible value; the example Grafana dashboard
is valid JSON whose panels use only metrics the server exports."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from lsp.client import Server, inline_params
from lsp.metrics import OUTCOMES

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "lsp" / "grafana" / "completer-dashboard.json"
GPU_ONLY = {"completer_gpu_memory_allocated_bytes", "completer_gpu_memory_reserved_bytes",
            "completer_gpu_memory_used_bytes", "completer_gpu_memory_total_bytes"}
METRICS_LINE = re.compile(r"metrics on http://([\d.]+):(\d+)/metrics")


def scrape(url: str) -> dict[str, list]:
    """{sample name: [(labels, value), ...]} of one scrape."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def families(url: str) -> dict[str, tuple[str, frozenset]]:
    """{exported name (counters with _total): (type, label names)} of one scrape."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        if fam.name.endswith("_created"):          # prometheus_client's creation timestamps of its own metrics
            continue
        name = fam.name + "_total" if fam.type == "counter" else fam.name
        labels = {k for s in fam.samples for k in s.labels if k not in ("le", "quantile")}
        out[name] = (fam.type, frozenset(labels))
    return out


def readme_metrics() -> dict[str, tuple[str, frozenset]]:
    """The metrics table of lsp/README.md: {name: (type, label names)}."""
    text = (ROOT / "lsp" / "README.md").read_text()
    section = text[text.index("## Prometheus metrics"):]
    out = {}
    for row in re.findall(r"^\| (`completer_[^|]*) \| (\w+) \|([^|]*)\|", section, re.M):
        labels = frozenset(re.findall(r"`(\w+)`", row[2]))
        for name in re.findall(r"`(completer_\w+)`", row[0]):
            out[name] = (row[1], labels)
    return out


def value(samples, name, **labels) -> float:
    return sum(v for lab, v in samples[name] if all(lab.get(k) == x for k, x in labels.items()))


async def _metrics_url(server: Server, timeout: float = 60) -> str:
    for _ in range(int(timeout / 0.05)):
        m = METRICS_LINE.search(server.log_text())
        if m:
            return f"http://{m.group(1)}:{m.group(2)}/metrics"
        await asyncio.sleep(0.05)
    raise TimeoutError(f"no metrics address in the server log:\n{server.log_text()[-2000:]}")


@pytest.fixture
def speculative_options(tiny_pair) -> dict:
    return {"model": str(tiny_pair[0]), "draft": str(tiny_pair[1]), "speculation": "draft",
            "num_speculative_tokens": 3, "device": "cpu"}


DOC = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    "


async def _serving(server: Server, options: dict, uri: str, max_tokens: int):
    """(client, metrics url) of ``server`` started, initialized with ``options``, engine ready, DOC open at ``uri``."""
    c = await server.start()
    url = await _metrics_url(server)
    assert "result" in await c.initialize(options, maxTokens=max_tokens, debounceMs=0)
    await c.wait_ready()
    await c.open_document(uri, DOC)
    return c, url


async def test_metrics_after_real_completions(speculative_options, tmp_path):
    server = Server("tcp", args=("--metrics", "127.0.0.1:0", "--allow-client-models"), log_path=tmp_path / "tcp.log")
    try:
        uri = "file:///m.py"
        c, url = await _serving(server, speculative_options, uri, 12)
        for _ in range(3):
            res = await c.ask("textDocument/inlineCompletion", inline_params(uri, 4, 4), timeout=300)
            assert "result" in res, res
        # a request superseded by the next keystroke while it waits out a long debounce (a fresh document: nothing
        # cached there): cancelled
        await c.notify("workspace/didChangeConfiguration", {"settings": {"debounceMs": 10000}})
        other = "file:///n.py"
        await c.open_document(other, DOC)
        received = (await c.call("completer/stats", {}))["server"]["requests_received"]
        first = asyncio.ensure_future(c.ask("textDocument/inlineCompletion", inline_params(other, 4, 4), timeout=300))
        while (await c.call("completer/stats", {}))["server"]["requests_received"] == received:
            await asyncio.sleep(0.02)                          # until the request waits in its debounce
        await c.notify("textDocument/didChange", {"textDocument": {"uri": other, "version": 2}, "contentChanges": [
            {"text": DOC + "r"}]})
        assert (await first)["error"]["code"] == -32800
        await c.notify("workspace/didChangeConfiguration", {"settings": {"debounceMs": 0}})
        await c.ask("textDocument/inlineCompletion", inline_params(other, 4, 5), timeout=300)
        stats = await c.call("completer/stats", {})
        m = scrape(url)
        exported = families(url)
    finally:
        await server.stop()

    for outcome in OUTCOMES:                                   # every outcome exported, even at 0
        assert any(lab.get("outcome") == outcome for lab, _ in m["completer_requests_total"])
    answered = sum(value(m, "completer_requests_total", outcome=o) for o in ("served", "empty", "cache", "reused"))
    assert answered >= 4 and value(m, "completer_requests_total", outcome="error") == 0
    assert value(m, "completer_requests_total", outcome="cancelled") == 1
    assert value(m, "completer_requests_total", outcome="served") >= 1
    assert value(m, "completer_request_latency_seconds_count") == answered
    assert 0 < value(m, "completer_request_latency_seconds_sum") < 300 * answered
    n_ttft = value(m, "completer_time_to_first_token_seconds_count")
    assert n_ttft >= 1 and 0 < value(m, "completer_time_to_first_token_seconds_sum") / n_ttft < 60
    n_tpot = value(m, "completer_time_per_output_token_seconds_count")
    assert n_tpot >= 1 and 0 < value(m, "completer_time_per_output_token_seconds_sum") / n_tpot < 10
    assert value(m, "completer_engine_generated_tokens_total") >= 4
    assert value(m, "completer_engine_prompt_tokens_total") > 0
    assert "completer_engine_wasted_tokens_total" in m and "completer_engine_cached_prompt_tokens_total" in m
    proposed = value(m, "completer_engine_draft_tokens_by_position_total", position="0")
    accepted = value(m, "completer_engine_accepted_tokens_by_position_total", position="0")
    assert proposed >= 1 and 0 <= accepted <= proposed
    assert value(m, "completer_engine_draft_tokens_total") >= proposed
    assert value(m, "completer_engine_requests_total", state="started") >= 1
    assert value(m, "completer_engine_queue_depth") == 0           # nothing in flight after the last answer
    assert value(m, "completer_engine_up") == 1 and value(m, "completer_engine_loading_seconds") == 0
    assert value(m, "completer_engine_restarts_total") == 0 and "completer_engine_failures_total" in m
    assert {lab["reason"] for lab, _ in m["completer_engine_requests_refused_total"]} == {"limit", "overload"}
    assert value(m, "completer_connections_refused_total") == 0
    # the same TTFT/TPOT in completer/stats
    assert stats["server"]["last_ttft_ms"] > 0
    assert stats["server"]["last_tpot_ms"] is None or stats["server"]["last_tpot_ms"] > 0

    # lsp/README.md lists every metric, with its type and labels, and only those (GPU memory: where there is a GPU)
    listed = readme_metrics()
    assert {n: t for n, t in listed.items() if n not in GPU_ONLY} == exported
    assert GPU_ONLY <= set(listed)

    # the dashboard loads and only uses metrics that exist
    dash = json.loads(DASHBOARD.read_text())
    exported = {re.sub(r"_(bucket|sum|count|created)$", "", n) for n in m} | set(m) | GPU_ONLY
    ids = [p["id"] for p in dash["panels"]]
    assert dash["title"] and len(ids) == len(set(ids)) >= 8
    for p in dash["panels"]:
        assert p["type"] and p["title"] and set(p["gridPos"]) == {"x", "y", "w", "h"} and p["targets"]
        for t in p["targets"]:
            names = set(re.findall(r"\bcompleter_\w+", t["expr"]))
            assert names, t
            for name in names:
                assert name in exported or re.sub(r"_bucket$", "", name) in exported, (p["title"], name)


def test_metrics_needs_a_network_transport():
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "lsp.server", "--metrics", "127.0.0.1:0"], capture_output=True,
                       text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and "--metrics" in r.stderr


async def test_metrics_count_an_engine_failure_and_its_restart(tiny_options, tmp_path):
    """``--fault-after-steps 1``: the first engine dies inside a model step; the request in flight is an error, the
    supervisor restarts the engine, and /metrics says so (failures, restarts, outcome error, then served again)."""
    server = Server("tcp", args=("--metrics", "127.0.0.1:0", "--allow-client-models", "--fault-after-steps", "1"),
                    log_path=tmp_path / "tcp.log")
    try:
        uri = "file:///f.py"
        c, url = await _serving(server, tiny_options, uri, 8)
        r = await c.ask("textDocument/inlineCompletion", inline_params(uri, 4, 4), timeout=300)
        assert r["error"]["code"] == -32803 and "engine failed" in r["error"]["message"], r
        r = await c.ask("textDocument/inlineCompletion", inline_params(uri, 4, 4), timeout=300)
        assert "result" in r, r
        m = scrape(url)
    finally:
        await server.stop()
    assert value(m, "completer_engine_failures_total") == 1 and value(m, "completer_engine_restarts_total") == 1
    assert value(m, "completer_requests_total", outcome="error") == 1
    assert value(m, "completer_requests_total", outcome="served") + value(
        m, "completer_requests_total", outcome="empty") == 1
    assert value(m, "completer_engine_up") == 1 and value(m, "completer_engine_queue_depth") == 0
    # the rebuilt engine's own counters start again from 0: only the request it served
    assert value(m, "completer_engine_requests_total", state="started") == 1


async def test_metrics_count_requests_refused_while_there_is_no_engine(tmp_path):
    """An engine that cannot start (a model folder that does not exist): completions are refused with its error,
    counted as ``refused``, and the engine is down."""
    server = Server("tcp", args=("--metrics", "127.0.0.1:0", "--allow-client-models"), log_path=tmp_path / "tcp.log")
    try:
        c = await server.start()
        url = await _metrics_url(server)
        assert "result" in await c.initialize({"model": str(tmp_path / "no-model"), "draft": None,
                                               "speculation": "none", "device": "cpu"}, debounceMs=0)
        while not (await c.health())["engineError"]:
            await asyncio.sleep(0.05)
        await c.open_document("file:///r.py", DOC)
        for _ in range(2):
            r = await c.ask("textDocument/inlineCompletion", inline_params("file:///r.py", 4, 4), timeout=60)
            assert r["error"]["code"] == -32803 and "no-model" in r["error"]["message"], r
        m = scrape(url)
    finally:
        await server.stop()
    assert value(m, "completer_requests_total", outcome="refused") == 2
    assert value(m, "completer_requests_total", outcome="error") == 0
    assert value(m, "completer_engine_up") == 0 and value(m, "completer_engine_loading_seconds") == 0
    assert value(m, "completer_request_latency_seconds_count") == 0       # refusals are not answers


def test_gpu_memory_of_every_process_comes_from_nvml_where_there_is_one(monkeypatch):
    """vLLM's engine core holds the GPU memory in a process of its own: the per-GPU figures come from NVML. No GPU
    here, so NVML's three calls are given by a stand-in module; without pynvml (or a driver) there is no metric."""
    import sys
    import types

    from prometheus_client import CollectorRegistry

    from lsp.metrics import Metrics

    nvml = types.ModuleType("pynvml")
    nvml.nvmlInit = nvml.nvmlShutdown = lambda: None
    nvml.nvmlDeviceGetCount = lambda: 2
    nvml.nvmlDeviceGetHandleByIndex = lambda i: i
    nvml.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=(h + 1) * 2**30, total=141 * 2**30)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    reg = Metrics(registry=CollectorRegistry()).registry
    assert reg.get_sample_value("completer_gpu_memory_used_bytes", {"gpu": "1"}) == 2 * 2**30
    assert reg.get_sample_value("completer_gpu_memory_total_bytes", {"gpu": "0"}) == 141 * 2**30

    def no_driver():
        raise RuntimeError("NVML Shared Library Not Found")

    nvml.nvmlInit = no_driver
    assert reg.get_sample_value("completer_gpu_memory_used_bytes", {"gpu": "0"}) is None
    assert reg.get_sample_value("completer_engine_up") == 0                 # the rest of the scrape is unharmed


def test_outcomes_are_counted_per_language_with_their_characters():
    from prometheus_client import generate_latest

    from lsp.metrics import Metrics
    from lsp.outcomes import Outcomes

    m = Metrics()
    o = Outcomes(lambda uri: None, m)
    o.shown("file:///a.go", "go", "x := ", "\n", "compute(a)")
    o.reported("file:///a.go", "compute(a)", "full")
    o.check_retained("file:///a.go", "go", "compute(a)", 5, "30s")     # the document is gone: nothing retained
    text = generate_latest(m.registry).decode()
    assert 'completer_outcomes_total{language="go",outcome="shown"} 1.0' in text
    assert 'completer_outcomes_total{language="go",outcome="accepted_full"} 1.0' in text
    assert 'completer_outcome_chars_total{language="go",outcome="accepted_full"} 10.0' in text
    assert 'outcome="retained_30s"' not in text
    with pytest.raises(ValueError):
        m.outcome("go", "liked")
