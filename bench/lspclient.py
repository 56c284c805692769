"""A minimal asyncio JSON-RPC/LSP client over stdio (Content-Length frames) or websockets (one message a frame).

Only the standard library and ``websockets``: the vLLM helper runs the replay on a bare GPU machine.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import shlex
import sys
import time
from typing import Any


class RpcError(Exception):
    def __init__(self, error: dict):
        super().__init__(f"{error.get('code')}: {error.get('message')}")
        self.code = error.get("code")


class Client:
    """Send requests/notifications; responses resolve futures; server->client requests get a null result."""

    def __init__(self, send, recv, close):
        self._send, self._recv, self._close = send, recv, close
        self._ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future] = {}
        self.messages: list[dict] = []        # window/showMessage etc. from the server
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        try:
            while True:
                msg = await self._recv()
                if msg is None:
                    break
                if "id" in msg and ("result" in msg or "error" in msg) and "method" not in msg:
                    fut = self.pending.pop(msg["id"], None)
                    if fut is not None and not fut.done():
                        fut.set_result((time.perf_counter(), msg))
                elif "method" in msg and "id" in msg:
                    await self._send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
                elif "method" in msg:
                    self.messages.append(msg)
        finally:
            for fut in self.pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError("server closed the connection"))

    async def request(self, method: str, params: Any) -> tuple[int, asyncio.Future]:
        """Send a request; returns (id, future of (receive time, response message))."""
        rid = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        self.pending[rid] = fut
        await self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return rid, fut

    async def call(self, method: str, params: Any, timeout: float = 300.0) -> Any:
        _, fut = await self.request(method, params)
        _, msg = await asyncio.wait_for(fut, timeout)
        if "error" in msg:
            raise RpcError(msg["error"])
        return msg["result"]

    async def notify(self, method: str, params: Any) -> None:
        await self._send({"jsonrpc": "2.0", "method": method, "params": params})

    async def close(self) -> None:
        self._reader.cancel()
        await self._close()


async def _stdio(cmd: list[str]) -> tuple[Client, asyncio.subprocess.Process]:
    proc = await asyncio.create_subprocess_exec(*cmd, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.DEVNULL)
    lock = asyncio.Lock()

    async def send(msg: dict) -> None:
        body = json.dumps(msg).encode()
        async with lock:
            proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
            await proc.stdin.drain()

    async def recv() -> dict | None:
        length = None
        while True:
            line = await proc.stdout.readline()
            if not line:
                return None
            line = line.strip()
            if not line:
                break
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        return json.loads(await proc.stdout.readexactly(length))

    async def close() -> None:
        if proc.stdin and not proc.stdin.is_closing():
            proc.stdin.close()

    return Client(send, recv, close), proc


async def _ws(url: str) -> Client:
    import websockets

    ws = await websockets.connect(url, max_size=None)

    async def send(msg: dict) -> None:
        await ws.send(json.dumps(msg))

    async def recv() -> dict | None:
        try:
            return json.loads(await ws.recv())
        except websockets.ConnectionClosed:
            return None

    return Client(send, recv, ws.close)


class Server:
    """A server the replay talks to: spawned (stdio or ws) or already listening (``connect``)."""

    def __init__(self, transport: str, server_cmd: str | None = None, connect: str | None = None):
        self.transport, self.connect_url = transport, connect
        default = f"{shlex.quote(sys.executable)} -m lsp.server --log-level WARNING"
        default += " --stdio" if transport == "stdio" else " --ws 127.0.0.1:0"
        self.cmd = shlex.split(server_cmd or default)
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> Client:
        if self.connect_url:
            return await _ws(self.connect_url)
        if self.transport == "stdio":
            client, self.proc = await _stdio(self.cmd)
            return client
        self.proc = await asyncio.create_subprocess_exec(*self.cmd, stdin=asyncio.subprocess.DEVNULL,
                                                         stdout=asyncio.subprocess.DEVNULL,
                                                         stderr=asyncio.subprocess.PIPE)
        port = None
        while port is None:
            line = await asyncio.wait_for(self.proc.stderr.readline(), 120)
            if not line:
                raise RuntimeError(f"server exited before listening: {' '.join(self.cmd)}")
            m = re.search(rb"listening on ws \('([^']+)', (\d+)", line)
            if m:
                host, port = m.group(1).decode(), int(m.group(2))
        asyncio.ensure_future(self._drain())
        return await _ws(f"ws://{host}:{port}")

    async def _drain(self) -> None:
        while self.proc and await self.proc.stderr.readline():
            pass

    async def stop(self, client: Client) -> None:
        try:
            await client.call("shutdown", None, timeout=10)
            await client.notify("exit", None)
        except Exception:
            pass
        await client.close()
        if self.proc is not None:
            if self.transport == "ws" and self.proc.returncode is None:
                self.proc.terminate()       # a listener outlives its connections: end the one we started
            try:
                await asyncio.wait_for(self.proc.wait(), 10)
            except asyncio.TimeoutError:
                self.proc.terminate()
                await self.proc.wait()
