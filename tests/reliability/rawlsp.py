"""A raw JSON-RPC client for a real ``completer-lsp`` process over stdio: it sends arbitrary bytes (broken frames,
bad JSON, invalid UTF-8) and records every message the server writes, in order. Used by the fuzz tests and by
``bench/reliability.py``."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEBUG_SERVER = [sys.executable, str(Path(__file__).with_name("debug_server.py"))]


class ServerGone(RuntimeError):
    pass


def frame(body: bytes, extra_headers: bytes = b"") -> bytes:
    return b"Content-Length: %d\r\n" % len(body) + extra_headers + b"\r\n" + body


class RawClient:
    def __init__(self, args=(), env: dict | None = None, stderr_path: str | os.PathLike | None = None):
        self._stderr = open(stderr_path, "wb") if stderr_path else subprocess.DEVNULL
        self.proc = subprocess.Popen([*DEBUG_SERVER, "--stdio", *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._stderr, cwd=ROOT,
                                     env={**os.environ, **(env or {})})
        self.messages: list[dict] = []
        self._cond = threading.Condition()
        self._ids = itertools.count(1)
        self._closed = False
        threading.Thread(target=self._read, daemon=True).start()

    # --- reading ------------------------------------------------------------------------------------------
    def _read(self) -> None:
        out = self.proc.stdout
        try:
            while True:
                length = None
                while True:
                    line = out.readline()
                    if not line:
                        return
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                    elif line == b"\r\n" and length is not None:
                        break
                msg = json.loads(out.read(length))
                with self._cond:
                    self.messages.append(msg)
                    self._cond.notify_all()
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()

    def wait_for(self, pred, timeout: float = 30.0, start: int = 0) -> dict:
        end = time.monotonic() + timeout
        with self._cond:
            while True:
                for m in self.messages[start:]:
                    if pred(m):
                        return m
                if self._closed:
                    raise ServerGone(f"server exited (rc={self.proc.poll()})")
                left = end - time.monotonic()
                if left <= 0:
                    raise TimeoutError("no matching message from the server")
                self._cond.wait(left)

    def mark(self) -> int:
        with self._cond:
            return len(self.messages)

    def since(self, start: int) -> list[dict]:
        with self._cond:
            return list(self.messages[start:])

    # --- writing ------------------------------------------------------------------------------------------
    def send_bytes(self, data: bytes) -> None:
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise ServerGone(f"server exited (rc={self.proc.poll()})") from e

    def send(self, obj) -> None:
        self.send_bytes(frame(json.dumps(obj).encode()))

    def notify(self, method: str, params=None) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def request_async(self, method: str, params=None) -> int:
        rid = next(self._ids)
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return rid

    def response(self, rid, timeout: float = 60.0, start: int = 0) -> dict:
        return self.wait_for(lambda m: m.get("id") == rid and ("result" in m or "error" in m), timeout, start)

    def request(self, method: str, params=None, timeout: float = 60.0) -> dict:
        start = self.mark()
        return self.response(self.request_async(method, params), timeout, start)

    def health(self, timeout: float = 30.0) -> dict:
        r = self.request("completer/health", {}, timeout)
        if "result" not in r:
            raise AssertionError(f"health request failed: {r}")
        return r["result"]

    def initialize(self, engine_options: dict, **options) -> dict:
        r = self.request("initialize", {"processId": None, "rootUri": None, "capabilities": {},
                                        "initializationOptions": {"engine": engine_options, **options}})
        self.notify("initialized", {})
        return r

    def wait_engine(self, timeout: float = 120.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            h = self.health()
            if h["engineReady"]:
                return
            if h["engineError"]:
                raise AssertionError(h["engineError"])
            time.sleep(0.1)
        raise TimeoutError("engine not ready")

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.request("shutdown", None, timeout=10)
                self.notify("exit")
                self.proc.wait(timeout=10)
            except Exception:
                self.proc.kill()
                self.proc.wait()
        if self._stderr is not subprocess.DEVNULL:
            self._stderr.close()
