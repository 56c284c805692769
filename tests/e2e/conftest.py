"""End-to-end fixtures: the real ``completer-lsp`` process, a real client (pytest-lsp over stdio), a real engine.

The engine runs the shipped house pair when it is there; otherwise (early in the project, before the models land)
a tiny random-weight pair built here in a second, so the protocol and lifecycle are still exercised end to end.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import pytest_asyncio
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

sys.path.insert(0, str(Path(__file__).parent))
from e2e_helpers import init_params, wait_engine_ready  # noqa: E402

sys.path.append(str(Path(__file__).parents[1]))       # tests/engine_models.py
import engine_models  # noqa: E402

SERVER = [sys.executable, "-m", "lsp.server", "--log-level", "WARNING"]


# every setting a test may change, at its value for tests (maxTokens small so the suite stays fast)
TEST_DEFAULTS = {"maxTokens": 16, "debounceMs": 5, "contextBudgetTokens": 1024, "cancelStaleRequests": True,
                 "typeThroughCache": True, "template": "auto"}


@pytest.fixture(scope="session")
def engine_options(tmp_path_factory) -> dict:
    return engine_models.engine_options(tmp_path_factory.mktemp("tiny-pair"))


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER), scope="module")
async def lsp_server(lsp_client: LanguageClient, engine_options):
    """One server process per test module (starting one costs seconds: torch import, model load)."""
    await lsp_client.initialize_session(init_params(engine_options))
    await wait_engine_ready(lsp_client)
    yield
    await lsp_client.shutdown_session()


@pytest_asyncio.fixture(loop_scope="module")
async def client(lsp_server, engine_options):
    """The module's server, reset to the test settings (engine rebuilt only if a test changed it)."""
    lsp_server.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings=init_params(engine_options).initialization_options | TEST_DEFAULTS))
    await wait_engine_ready(lsp_server)
    lsp_server.messages.clear()
    return lsp_server


