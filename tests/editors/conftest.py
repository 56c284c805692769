"""Editor-client tests: each client (VS Code extension logic, Neovim plugin, Monaco web page) against the real
``completer-lsp`` and the shipped house pair (tests.helpers.editor_tools says how missing tools are handled)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

# the tests import these from tests.helpers.editor_tools; the line below keeps ``from conftest import ...`` in a
# test file not yet moved over working (remove once none is left)
from tests.helpers.editor_tools import EDITORS, ROOT, SERVER_CMD, require_tool, which  # noqa: F401

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def engine_options(house_options) -> dict:
    return house_options


@pytest.fixture(scope="session")
def client_env(engine_options) -> dict:
    """Environment the clients' own test runners read: how to start the server and which engine to ask for."""
    env = dict(os.environ)
    env["COMPLETER_LSP_CMD"] = json.dumps(SERVER_CMD)
    env["COMPLETER_ENGINE"] = json.dumps(engine_options)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env
