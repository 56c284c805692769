"""Editor-client tests: each client (VS Code extension logic, Neovim plugin, Monaco web page) against the real
``completer-lsp`` and a real engine. A missing tool (nvim, node, chromium, node_modules) skips with a reason,
except in CI (``CI=true``), where it is a failure: ``editors/ci-setup.sh`` installs all of them.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))        # the tests import helpers from this conftest
sys.path.append(str(Path(__file__).parents[1]))       # tests/engine_models.py
import engine_models  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EDITORS = ROOT / "editors"
SERVER_CMD = [sys.executable, "-m", "lsp.server", "--log-level", "WARNING"]


def require_tool(path: str | Path | None, what: str) -> str:
    """``path`` if it exists; else skip (outside CI) or fail (in CI)."""
    if path and Path(path).exists():
        return str(path)
    reason = f"{what} is not installed (run editors/ci-setup.sh)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason}; CI must run the editor tests")
    pytest.skip(reason)


def which(name: str) -> str | None:
    venv_bin = Path(sys.executable).parent / name
    return str(venv_bin) if venv_bin.exists() else shutil.which(name)


@pytest.fixture(scope="session")
def engine_options(tmp_path_factory) -> dict:
    return engine_models.engine_options(tmp_path_factory.mktemp("editors-engine"))


@pytest.fixture(scope="session")
def client_env(engine_options) -> dict:
    """Environment the clients' own test runners read: how to start the server and which engine to ask for."""
    env = dict(os.environ)
    env["COMPLETER_LSP_CMD"] = json.dumps(SERVER_CMD)
    env["COMPLETER_ENGINE"] = json.dumps(engine_options)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env
