"""SIGTERM ends the TCP/websocket server the way Ctrl-C does (the serving task is cancelled and its finally closes
the engine), with exit status 0 — not killed mid-flight, which left vLLM's engine-core process running."""

import os
import signal
import subprocess
import sys
import time

import pytest


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)      # as a shell starts `completer-lsp --ws ... &`, or nohup


@pytest.mark.parametrize("sigint", ["as-is", "ignored"])
@pytest.mark.parametrize("transport", ["--ws", "--tcp"])
def test_sigterm_is_a_clean_exit(transport, sigint):
    """Also when the server inherited SIGINT ignored (started in the background): SIGTERM used to raise SIGINT,
    which then did nothing, and the server never ended."""
    proc = subprocess.Popen([sys.executable, "-m", "lsp.server", transport, "127.0.0.1:0", "--log-level", "INFO"],
                            stderr=subprocess.PIPE, text=True, cwd=os.getcwd(),
                            preexec_fn=_ignore_sigint if sigint == "ignored" else None)
    try:
        deadline = time.monotonic() + 60
        for line in proc.stderr:                                   # wait until it listens
            if "listening on" in line or time.monotonic() > deadline:
                break
        assert proc.poll() is None, "server ended before listening"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _frame(obj: dict) -> bytes:
    import json

    body = json.dumps(obj).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


@pytest.mark.parametrize("sigint", ["as-is", "ignored"])
def test_sigterm_ends_the_stdio_server_while_its_stdin_stays_open(sigint):
    """An editor ending the server sends `exit` and SIGTERM at once, and keeps the pipe open until the process ends.
    When the signal won, the interpreter's teardown joined the thread blocked reading stdin and the server never
    ended (the VS Code extension's node tests hung 300 s in CI)."""
    proc = subprocess.Popen([sys.executable, "-m", "lsp.server", "--stdio", "--log-level", "WARNING"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=os.getcwd(),
                            preexec_fn=_ignore_sigint if sigint == "ignored" else None)
    try:
        proc.stdin.write(_frame({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                 "params": {"processId": None, "rootUri": None, "capabilities": {}}}))
        proc.stdin.flush()
        header = proc.stdout.readline()                           # the answer: it is serving
        assert header.startswith(b"Content-Length"), header
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0                         # stdin still open
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdin.close()
        proc.stdout.close()


def test_sigterm_while_the_engine_loads_ends_the_ws_server_at_once():
    """`kill PID` took 3-17 s: asyncio's shutdown waited for the thread loading the model, then the interpreter's
    teardown. The engine starts with the first client's initialize; the signal comes while it loads or just after."""
    import json
    import re

    from websockets.sync.client import connect

    proc = subprocess.Popen([sys.executable, "-m", "lsp.server", "--ws", "127.0.0.1:0"], stderr=subprocess.PIPE,
                            text=True, cwd=os.getcwd())
    try:
        port = None
        for line in proc.stderr:
            if m := re.search(r"completer-lsp listening on ws .*?(\d+)\)", line):
                port = int(m.group(1))
                break
        assert port is not None, "server ended before listening"
        with connect(f"ws://127.0.0.1:{port}") as ws:
            ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                "params": {"processId": None, "rootUri": None, "capabilities": {}}}))
            assert json.loads(ws.recv())["id"] == 1                  # the engine is loading now
            ws.send(json.dumps({"jsonrpc": "2.0", "method": "initialized", "params": {}}))
            time.sleep(0.5)
            sent = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=8) == 0, "SIGTERM did not end the server within 8 s"
        print(f"ended {time.monotonic() - sent:.2f} s after SIGTERM")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
