"""Editor-client tests: each client (VS Code extension logic, Neovim plugin, Monaco web page) against the real
``completer-lsp`` and the shipped house pair (tests.helpers.editor_tools says how missing tools are handled)."""

from __future__ import annotations

import json
import os

import pytest

from tests.helpers.editor_tools import ROOT, SERVER_CMD


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
