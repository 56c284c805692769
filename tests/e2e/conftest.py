"""End-to-end fixtures: the real ``completer-lsp`` process, a real client (pytest-lsp over stdio), a real engine:
the shipped house pair (the tests fail, not skip, when it cannot be found)."""

from __future__ import annotations


import pytest
import pytest_asyncio
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from lsp.client import server_command
from tests.helpers.pygls_session import init_params, wait_engine_ready

SERVER = server_command("stdio")


# every setting a test may change, at its value for tests (maxTokens small so the suite stays fast)
TEST_DEFAULTS = {"maxTokens": 16, "debounceMs": 5, "contextBudgetTokens": 1024, "cancelStaleRequests": True,
                 "typeThroughCache": True, "template": "auto"}


@pytest.fixture(scope="session")
def engine_options(house_options) -> dict:
    return house_options


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


