"""``completer-lsp`` on the command line: what a user sees when starting it goes wrong (issue 14)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("transport", ["--tcp", "--ws"])
def test_a_port_in_use_is_one_line_naming_it_and_a_failing_exit_code(transport):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "lsp.server", transport, f"127.0.0.1:{port}"], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [
        f"completer-lsp: cannot listen on 127.0.0.1:{port}: the port is already in use (another completer-lsp?)"]


def test_the_listening_line_is_info_and_shown_at_the_default_level():
    """It is the server's normal output (clients read the port from it), not a WARNING; shown also when a client
    asks for --log-level WARNING."""
    import signal

    for extra in ([], ["--log-level", "WARNING"]):
        proc = subprocess.Popen([sys.executable, "-m", "lsp.server", "--ws", "127.0.0.1:0", *extra], cwd=ROOT,
                                stderr=subprocess.PIPE, text=True)
        try:
            line = proc.stderr.readline()
            assert " INFO " in line and "completer-lsp listening on ws ('127.0.0.1'," in line, line
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


def test_on_a_terminal_with_no_arguments_it_says_what_it_is():
    """`completer-lsp` typed in a terminal used to sit silent, waiting for LSP on stdin."""
    import os
    import pty
    import signal
    import time

    main, tty = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "lsp.server"], cwd=ROOT, stdin=tty, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    os.close(tty)
    try:
        first = proc.stderr.readline()
        assert first.startswith("completer-lsp: a language server. It speaks LSP"), first
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        os.close(main)


def test_a_pipe_gets_no_banner():
    r = subprocess.run([sys.executable, "-m", "lsp.server"], cwd=ROOT, input="", capture_output=True, text=True,
                       timeout=120)
    assert "a language server" not in r.stderr and r.stdout == ""


def test_allow_model_is_the_allowlist_and_model_its_old_spelling():
    from lsp.server import parse_args

    assert parse_args(["--allow-model", "/a", "--model", "/b"]).model == ["/a", "/b"]
    r = subprocess.run([sys.executable, "-m", "lsp.server", "--help"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert "--allow-model NAME, --model NAME" in r.stdout and "It loads nothing" in " ".join(r.stdout.split())
