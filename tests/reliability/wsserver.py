"""Start a real ``completer-lsp --ws`` process on a free loopback port (read from its log) for tests and benchmarks."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LISTEN = re.compile(r"listening on ws .*?(\d+)\)")


class WsServer:
    def __init__(self, *args: str, env: dict | None = None, host: str = "127.0.0.1", log_path=None,
                 timeout: float = 60.0):
        if log_path is None:
            fd, log_path = tempfile.mkstemp(prefix="completer-ws-", suffix=".log")
            os.close(fd)
        self.log_path = Path(log_path)
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "lsp.server", "--ws", f"{host}:0",
                                      "--log-level", "WARNING", *args],
                                     stderr=self._log, stdout=subprocess.DEVNULL, cwd=ROOT,
                                     env={**os.environ, **(env or {})})
        self.port = self._wait_port(timeout)
        self.url = f"ws://127.0.0.1:{self.port}"

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def _wait_port(self, timeout: float) -> int:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            text = self.log_text()
            m = LISTEN.search(text)
            if m:
                return int(m.group(1))
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited rc={self.proc.returncode}: {text[-2000:]}")
            time.sleep(0.05)
        raise TimeoutError("server did not start listening")

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


class WsClient:
    """A minimal async JSON-RPC client over one websocket connection (requests matched to responses by id)."""

    def __init__(self, ws):
        import asyncio

        self.ws = ws
        self._next = 0
        self._waiting: dict = {}
        self.notifications: list[dict] = []
        self._task = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def connect(cls, url: str, **kw) -> "WsClient":
        from websockets.asyncio.client import connect

        return cls(await connect(url, **kw))

    async def _read(self) -> None:
        import json

        try:
            async for raw in self.ws:
                msg = json.loads(raw)
                msg["_received"] = time.monotonic()      # arrival time, for latency measurements
                fut = self._waiting.pop(msg.get("id"), None) if "method" not in msg else None
                if fut is not None and not fut.done():
                    fut.set_result(msg)
                elif "method" in msg:
                    self.notifications.append(msg)
        except Exception:
            pass
        finally:
            for fut in self._waiting.values():
                if not fut.done():
                    fut.set_exception(ConnectionError("websocket closed"))
                    fut.exception()                      # retrieved: a caller that stopped waiting is no error

    async def send(self, obj) -> None:
        import json

        await self.ws.send(json.dumps(obj))

    def request_nowait(self, method: str, params=None):
        import asyncio

        self._next += 1
        rid = self._next
        fut = asyncio.get_running_loop().create_future()
        self._waiting[rid] = fut
        asyncio.get_running_loop().create_task(
            self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}))
        return rid, fut

    async def request(self, method: str, params=None, timeout: float = 60.0) -> dict:
        import asyncio

        _, fut = self.request_nowait(method, params)
        return await asyncio.wait_for(fut, timeout)

    async def notify(self, method: str, params=None) -> None:
        await self.send({"jsonrpc": "2.0", "method": method, "params": params})

    async def initialize(self, engine_options: dict, **options) -> dict:
        r = await self.request("initialize", {"processId": None, "rootUri": None, "capabilities": {},
                                              "initializationOptions": {"engine": engine_options, **options}})
        await self.notify("initialized", {})
        return r

    async def wait_engine(self, timeout: float = 120.0) -> None:
        import asyncio

        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while loop.time() < end:
            h = (await self.request("completer/health", {}))["result"]
            if h["engineReady"]:
                return
            if h["engineError"]:
                raise AssertionError(h["engineError"])
            await asyncio.sleep(0.1)
        raise TimeoutError("engine not ready")

    async def close(self) -> None:
        await self.ws.close()
        self._task.cancel()
