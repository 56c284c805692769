"""The stdio server's log goes to the editor as ``window/logMessage``, each record with its LSP message type.

An editor that starts ``completer-lsp --stdio`` files everything the server writes on stderr under one level:
Neovim's ``:LspLog`` showed every warning and the "engine ready" line as ``[ERROR]``. Sent as ``window/logMessage``
instead, a warning is a Warning, an info line Info (LSP ``MessageType``), and the editor shows each as such (Neovim's
log levels, VS Code's output channel). Until the connection runs (start-up), after it ends, and with ``--log-file``
the records go where they went before.
"""

from __future__ import annotations

import asyncio
import logging
import threading

from lsprotocol import types


def message_type(levelno: int) -> types.MessageType:
    if levelno >= logging.ERROR:
        return types.MessageType.Error
    if levelno >= logging.WARNING:
        return types.MessageType.Warning
    if levelno >= logging.INFO:
        return types.MessageType.Info
    return types.MessageType.Log


class ClientLog(logging.Handler):
    """Sends records to the connected client; ``fallback`` (stderr) takes them while none is connected."""

    def __init__(self, fallback: logging.Handler):
        super().__init__()
        self.fallback = fallback
        self._server = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sending = threading.local()          # a record logged while sending one goes to the fallback

    def connect(self, server, loop: asyncio.AbstractEventLoop) -> None:
        self._server, self._loop = server, loop

    def disconnect(self) -> None:
        self._server, self._loop = None, None

    def emit(self, record: logging.LogRecord) -> None:
        server, loop = self._server, self._loop
        if server is None or loop is None or loop.is_closed() or getattr(self._sending, "on", False):
            self.fallback.handle(record)
            return
        params = types.LogMessageParams(type=message_type(record.levelno), message=self.format(record))
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._send(server, params)
        else:                                      # an engine or reader thread: sent from the server's loop
            loop.call_soon_threadsafe(self._send, server, params)

    def _send(self, server, params: types.LogMessageParams) -> None:
        self._sending.on = True
        try:
            server.window_log_message(params)
        except Exception:                          # the client is gone
            pass
        finally:
            self._sending.on = False
