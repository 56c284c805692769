"""Prometheus metrics for an operator of a shared completion server (``completer-lsp --tcp|--ws ... --metrics
HOST:PORT``; opt-in, 127.0.0.1 unless an address is given), scraped at ``http://HOST:PORT/metrics``.

Two kinds of source, so the request path stays cheap:

- *events* the request lifecycle reports as they happen (``Metrics.request``, ``Metrics.generation``): requests by
  outcome, keystroke-to-answer latency, TTFT and TPOT. Histograms need every observation, so these are pushed;
- *state* read at scrape time (``_EngineCollector``): the engine's own counters (``Engine.counters()``: tokens
  generated and wasted, draft tokens proposed/accepted per position), the supervisor's (queue depth, restarts,
  refused requests), refused connections (the security policy) and GPU memory. Reading them at scrape time means
  no second copy of numbers that the engine already keeps.

Names follow Prometheus conventions (``completer_`` prefix, base units: seconds and bytes, ``_total`` counters).
The engine's counters start again from 0 when the engine is rebuilt (a restart or new settings); Prometheus'
``rate()`` treats that as a counter reset. Every metric is listed in lsp/README.md.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

if TYPE_CHECKING:
    from .engine_host import EngineHost
    from .security import Policy

log = logging.getLogger(__name__)

OUTCOMES = ("served", "empty", "cache", "reused", "cancelled", "refused", "error")
OUTCOME_KINDS = ("shown", "accepted_full", "accepted_partial", "typed_through", "rejected", "retained_30s",
                 "retained_300s")
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0)
TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)


class Metrics:
    """One per server process (the TCP/websocket connections share it, as they share the engine)."""

    def __init__(self, host: "EngineHost | None" = None, policy: "Policy | None" = None,
                 registry: CollectorRegistry | None = None):
        self.host, self.policy = host, policy
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "completer_requests", "Completion requests by outcome: served (ghost text from the engine), empty (the "
            "engine's text post-processed to nothing), cache (typed through the last ghost text), reused (answered "
            "from a request in flight), cancelled (superseded, edited, $/cancelRequest), refused (engine not "
            "available, server busy, or a request the engine refuses such as a prompt over the model's context), "
            "error (a server or engine fault)", ["outcome"], registry=r)
        for outcome in OUTCOMES:
            self.requests.labels(outcome)           # every outcome exported from the start, at 0
        self.latency = Histogram(
            "completer_request_latency_seconds", "Keystroke to answer: completion request received to answer sent "
            "(answered requests: served, empty, cache, reused)", buckets=LATENCY_BUCKETS, registry=r)
        self.ttft = Histogram("completer_time_to_first_token_seconds",
                              "Engine request sent to its first generated text", buckets=TTFT_BUCKETS, registry=r)
        self.tpot = Histogram("completer_time_per_output_token_seconds",
                              "Time per generated token after the first, per engine request", buckets=TPOT_BUCKETS,
                              registry=r)
        self.outcomes = Counter(
            "completer_outcomes", "Shown completions by what became of them, per language: shown, accepted_full, "
            "accepted_partial (a word or a line), typed_through, rejected (lsp/outcomes.py)", ["language", "outcome"],
            registry=r)
        self.outcome_chars = Counter(
            "completer_outcome_chars", "Characters of ghost text per language: shown, accepted (accepted_full + "
            "accepted_partial), typed_through, retained_30s / retained_300s (accepted characters still in the document "
            "30 s / 5 min later)", ["language", "outcome"], registry=r)
        r.register(_EngineCollector(self))
        self.server = None

    # --- events (called by lsp.lifecycle) -----------------------------------------------------------------
    def request(self, outcome: str, seconds: float | None = None) -> None:
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}; known: {OUTCOMES}")
        self.requests.labels(outcome).inc()
        if seconds is not None and outcome in ("served", "empty", "cache", "reused"):
            self.latency.observe(seconds)

    def outcome(self, language: str, outcome: str, chars: int = 0, count: bool = True) -> None:
        """A shown completion's outcome (``lsp.outcomes``): counted (unless ``count`` is False: more characters of
        one already counted), and its characters."""
        if outcome not in OUTCOME_KINDS:
            raise ValueError(f"unknown outcome {outcome!r}; known: {OUTCOME_KINDS}")
        if count and not outcome.startswith("retained"):
            self.outcomes.labels(language, outcome).inc()
        if chars:
            self.outcome_chars.labels(language, outcome).inc(chars)

    def generation(self, ttft_s: float | None, tpot_s: float | None) -> None:
        if ttft_s is not None:
            self.ttft.observe(ttft_s)
        if tpot_s is not None:
            self.tpot.observe(tpot_s)

    # --- serving ------------------------------------------------------------------------------------------
    def serve(self, host: str, port: int) -> int:
        """Serve ``/metrics`` on ``host:port`` in a daemon thread; returns the port (``0`` picks a free one)."""
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        self.server = server
        bound = server.server_address[1]
        log.info("metrics on http://%s:%d/metrics", host, bound)
        return bound

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server = None


def add_arguments(ap) -> None:
    """``--metrics [HOST:]PORT`` on ``completer-lsp``'s parser."""
    ap.add_argument("--metrics", metavar="HOST:PORT", default=None,
                    help="serve Prometheus metrics at http://HOST:PORT/metrics (TCP/websocket servers only; HOST "
                         "defaults to 127.0.0.1; PORT 0 picks a free port, logged at start)")


def parse_address(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    try:
        p = int(port)
    except ValueError:
        raise ValueError(f"--metrics: expected HOST:PORT or PORT, got {value!r}") from None
    if not 0 <= p <= 65535:
        raise ValueError(f"--metrics: port must be 0..65535, got {p}")
    return (host if sep and host else "127.0.0.1"), p


def start(args, host: "EngineHost", policy: "Policy", transport: str) -> "Metrics | None":
    """The process's metrics when ``--metrics`` was given (attached to the engine host, served in a thread)."""
    if not getattr(args, "metrics", None):
        return None
    if transport == "stdio":
        raise ValueError("--metrics needs --tcp or --ws (a stdio server belongs to one editor; scrape a shared one)")
    bind, port = parse_address(args.metrics)
    m = Metrics(host, policy)
    bound = m.serve(bind, port)
    host.metrics = m
    print(f"completer-lsp: metrics on http://{bind}:{bound}/metrics", file=sys.stderr, flush=True)
    return m


class _EngineCollector:
    """Engine, supervisor, policy and GPU state, read when Prometheus scrapes."""

    def __init__(self, metrics: Metrics):
        self.m = metrics

    def describe(self):
        return []          # the metric set depends on the engine (speculation, GPU): no fixed description

    def collect(self):
        engine = self.m.host.engine if self.m.host is not None else None
        up = GaugeMetricFamily("completer_engine_up", "1 when the engine is loaded and serving")
        up.add_metric([], 1.0 if engine is not None else 0.0)
        yield up
        loading = GaugeMetricFamily("completer_engine_loading_seconds",
                                    "Seconds the engine has been starting (0 when it is not starting)")
        loading.add_metric([], float((self.m.host.loading_s if self.m.host is not None else None) or 0.0))
        yield loading
        c: dict = {}
        if engine is not None:
            try:
                c = engine.counters()
            except Exception:  # noqa: BLE001 -- a scrape must not fail because the engine is mid-restart
                log.exception("engine counters unavailable")
        sup = c.get("supervisor") or {}
        for name, key, doc in (
                ("completer_engine_generated_tokens", "generated_tokens", "Tokens generated by the engine"),
                ("completer_engine_wasted_tokens", "wasted_tokens",
                 "Tokens generated for requests that were later aborted"),
                ("completer_engine_prompt_tokens", "prompt_tokens", "Prompt tokens of engine requests"),
                ("completer_engine_cached_prompt_tokens", "cached_prompt_tokens",
                 "Prompt tokens whose KV cache was reused instead of computed"),
                ("completer_engine_draft_tokens", "draft_tokens", "Draft tokens proposed by speculation"),
                ("completer_engine_accepted_tokens", "accepted_tokens", "Draft tokens accepted by the target")):
            fam = CounterMetricFamily(name, doc)
            fam.add_metric([], float(c.get(key) or 0))
            yield fam
        for name, key, doc in (
                ("completer_engine_draft_tokens_by_position", "draft_per_position",
                 "Draft tokens proposed at position i of a draft (0 = first)"),
                ("completer_engine_accepted_tokens_by_position", "accepted_per_position",
                 "Draft tokens accepted at position i of a draft (0 = first)")):
            fam = CounterMetricFamily(name, doc, labels=["position"])
            for i, n in enumerate(c.get(key) or []):
                fam.add_metric([str(i)], float(n))
            yield fam
        reqs = CounterMetricFamily("completer_engine_requests", "Engine requests by how they ended",
                                   labels=["state"])
        for state in ("started", "finished", "aborted"):
            reqs.add_metric([state], float(c.get(f"requests_{state}") or 0))
        yield reqs
        depth = GaugeMetricFamily("completer_engine_queue_depth", "Engine requests in flight (running or waiting)")
        inflight = sup.get("inflight")
        if inflight is None:
            inflight = (c.get("requests_started") or 0) - (c.get("requests_finished") or 0) - (
                c.get("requests_aborted") or 0)
        depth.add_metric([], float(max(0, inflight)))
        yield depth
        restarts = CounterMetricFamily("completer_engine_restarts", "Engines rebuilt by the supervisor after a failure")
        restarts.add_metric([], float(sup.get("restarts") or 0))
        yield restarts
        failures = CounterMetricFamily("completer_engine_failures", "Engine failures seen by the supervisor")
        failures.add_metric([], float(sup.get("engine_failures") or 0))
        yield failures
        refused = CounterMetricFamily("completer_engine_requests_refused",
                                      "Engine requests refused by the supervisor's limits", labels=["reason"])
        refused.add_metric(["limit"], float(sup.get("requests_refused") or 0))
        refused.add_metric(["overload"], float(sup.get("requests_shed") or 0))
        yield refused
        conns = CounterMetricFamily("completer_connections_refused",
                                    "TCP/websocket connections refused by the security policy (token, origin, size)")
        conns.add_metric([], float(getattr(self.m.policy, "refused_handshakes", 0) or 0))
        yield conns
        yield from _gpu_memory()
        yield from _nvml_memory()


def _nvml_memory():
    """Memory in use on each GPU of the machine, read from NVML (``pynvml``, which vLLM installs): it counts the
    vLLM engine-core process, which runs apart from the server. Nothing where there is no NVML or no GPU."""
    try:
        import pynvml
    except ImportError:
        return
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 -- no driver, no GPU: no metric
        return
    try:
        used = GaugeMetricFamily("completer_gpu_memory_used_bytes",
                                 "GPU memory in use on the device, by every process (NVML)", labels=["gpu"])
        total = GaugeMetricFamily("completer_gpu_memory_total_bytes", "GPU memory of the device (NVML)",
                                  labels=["gpu"])
        for i in range(pynvml.nvmlDeviceGetCount()):
            info = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i))
            used.add_metric([str(i)], float(info.used))
            total.add_metric([str(i)], float(info.total))
        yield used
        yield total
    except Exception:  # noqa: BLE001 -- no GPU metrics rather than a failed scrape
        log.exception("NVML memory unavailable")
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def _gpu_memory():
    """Memory the process holds on each CUDA device (only where there is one and torch has used it)."""
    try:
        import torch
        if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
            return
        used = GaugeMetricFamily("completer_gpu_memory_allocated_bytes", "GPU memory held by tensors",
                                 labels=["device"])
        reserved = GaugeMetricFamily("completer_gpu_memory_reserved_bytes",
                                     "GPU memory reserved by the caching allocator", labels=["device"])
        for i in range(torch.cuda.device_count()):
            used.add_metric([f"cuda:{i}"], float(torch.cuda.memory_allocated(i)))
            reserved.add_metric([f"cuda:{i}"], float(torch.cuda.memory_reserved(i)))
        yield used
        yield reserved
    except Exception:  # noqa: BLE001 -- no GPU metrics rather than a failed scrape
        log.exception("GPU memory unavailable")
