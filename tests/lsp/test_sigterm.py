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
