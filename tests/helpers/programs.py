"""Run a benchmark as a program (``python -m bench.X ARGS``), as its README says to: the tests check a benchmark
through what it writes and prints, never by importing it (tests never import ``bench``, tests/test_layout.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_program(module: str, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    """``python -m module args`` from the repository root; with ``check``, a non-zero exit fails with its output."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"python -m {module} exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n"
                             f"--- stderr\n{proc.stderr[-4000:]}")
    return proc
