"""The connection's session: ``initialize`` (settings, position encoding, engine start), ``didChangeConfiguration``
and ``shutdown``.

Bad ``initializationOptions`` are answered with -32602 naming the field (the client may ``initialize`` again); bad
settings in ``didChangeConfiguration`` (a notification) are reported with ``window/showMessage`` and the previous
settings stay (``lsp.config``). Models a client names are checked against the operator's ``security.Policy``.
"""

from __future__ import annotations

from lsprotocol import types
from pygls.capabilities import ServerCapabilitiesBuilder
from pygls.exceptions import JsonRpcInvalidParams

from . import security
from .config import ConfigError, ServerConfig
from .context_sources import workspace_roots
from .documents import DocumentStore


def initialize(ls, params: types.InitializeParams) -> None:
    try:
        config = ServerConfig.from_options(params.initialization_options)
    except ConfigError as e:
        raise JsonRpcInvalidParams(f"bad initializationOptions: {e}") from None
    try:
        security.check_models(config.engine, ls.policy)
    except security.SecurityError as e:
        raise JsonRpcInvalidParams(f"bad initializationOptions: engine: {e}") from None
    ls.config = config
    experimental = params.capabilities.experimental
    ls.partial_ghost = isinstance(experimental, dict) and experimental.get("partialGhost") is True
    chosen = ServerCapabilitiesBuilder.choose_position_encoding(params.capabilities)  # what pygls advertises
    encoding = getattr(chosen, "value", chosen)
    ls.documents = DocumentStore(encoding, config.max_document_chars)
    ls.context.set_roots(workspace_roots(params))
    ls.engine_host.start(config.engine)


def did_change_configuration(ls, params: types.DidChangeConfigurationParams) -> None:
    try:
        ls.apply_settings(params.settings, "settings")
    except ConfigError as e:
        ls.notify_user(f"settings not applied: {e}")


async def shutdown(ls, params: None) -> None:
    ls.lifecycle.cancel_all()
    ls.context.cancel_all()
    ls.outcomes.cancel_all()
    if ls.exit_hook is None:   # stdio: the only client; TCP/ws connections share the engine with others
        await ls.engine_host.close()


def register(server) -> None:
    server.feature(types.INITIALIZE)(initialize)
    server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)(did_change_configuration)
    server.feature(types.SHUTDOWN)(shutdown)
