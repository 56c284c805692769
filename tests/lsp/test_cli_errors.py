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
