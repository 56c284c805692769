"""The completer language server: builds the pygls server, registers one module per feature, runs a transport.

``completer-lsp [--stdio | --tcp HOST:PORT | --ws HOST:PORT] [--log-file F] [--log-level L]`` (HOST defaults to
127.0.0.1). Settings come from ``initializationOptions`` (see :mod:`lsp.config`).

Every handler is registered the same way (pygls' ``server.feature``), by the module of its feature:
``session`` (initialize, didChangeConfiguration, shutdown), ``sync`` (didOpen, didChange, didClose), ``inline``
(textDocument/inlineCompletion), ``completion`` (textDocument/completion), ``custom`` (completer/stats,
completer/health, completer/prompt), ``outcomes`` (completer/didAccept) and ``warm`` (completer/didMoveCursor).
This module keeps the protocol's error answers and the per-connection ``exit``.

Errors: malformed JSON -> -32700 (id null); a message that is not a JSON-RPC request -> -32600; unknown method ->
-32601; params of the wrong shape, unknown documents, positions past the end of the document or inside a
character -> -32602; a completion superseded by a newer one, by an edit, or by ``$/cancelRequest`` -> -32800; an
engine that failed to start -> -32803 (RequestFailed). Bad edits in ``didChange`` (a notification) are refused as
a whole and reported with ``window/showMessage``; the document keeps its last good text.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import dataclasses
import errno
import json
import logging
import os
import signal
import sys
from concurrent.futures import Future
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams, JsonRpcInvalidRequest
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol, default_converter
from pygls.protocol.language_server import lsp_method
from pygls.feature_manager import is_thread_function

from completer import pipeline
from completer.context.languages import canonical_language
from completer.engine import EngineError
from completer.engine.base import RequestError
from completer.engine.supervisor import supervised

from . import client_errors, completion, custom, inline, metrics, outcomes, security, session, sync, transports, warm
from .client_log import ClientLog
from .context_sources import ContextSources
from .config import ConfigError, ServerConfig
from .documents import DocumentError, DocumentStore, Snapshot
from .engine_host import LOADING_WAIT_S, EngineHost, EngineUnavailable
from .custom import REQUEST_FAILED, refusal
from .lifecycle import Completion, Lifecycle

log = logging.getLogger("completer.lsp")

VERSION = "0.1.0"

USAGE_ON_A_TERMINAL = """\
completer-lsp: a language server. It speaks LSP (JSON-RPC) on stdin/stdout and is started by an editor, not typed
at: see editors/README.md for VS Code, Neovim and the web page. Waiting for LSP messages on stdin (Ctrl-C ends).
  completer-lsp --ws 127.0.0.1:8765     serve websocket clients (the web page) instead
  completer-lsp --help                  every option"""


class _Malformed:
    """A message pygls could not structure (wrong param types); answered with an error instead of dropped."""

    def __init__(self, msg_id: Any, method: str, code: int, message: str):
        self.id, self.method, self.code, self.message = msg_id, method, code, message


# the document-sync notifications' message types (pygls structures each method into its own lsprotocol class)
_DOCUMENT_SYNC = frozenset((types.DidOpenTextDocumentNotification, types.DidChangeTextDocumentNotification,
                            types.DidCloseTextDocumentNotification))


class CompleterProtocol(LanguageServerProtocol):
    """pygls' protocol, plus JSON-RPC errors where pygls only logs, and our own document store."""

    def structure_message(self, data):
        if isinstance(data, dict) and "jsonrpc" in data and "method" in data:
            bad_id = "id" in data and (isinstance(data["id"], bool) or not isinstance(data["id"], (int, str)))
            if bad_id or not isinstance(data["method"], str):
                return _Malformed(None if bad_id else data.get("id"), str(data["method"]), JsonRpcInvalidRequest.CODE,
                                  "invalid request: id must be an integer or a string, method a string")
            if "params" not in data:  # JSON-RPC 2.0 lets a request or notification omit params; pygls requires it
                data = {**data, "params": None}
        try:
            return super().structure_message(data)
        except JsonRpcException as e:
            if isinstance(data, dict) and "method" in data:
                return _Malformed(data.get("id"), str(data["method"]), JsonRpcInvalidParams.CODE,
                                  f"invalid params for {data['method']}: {client_errors.describe(e.__cause__ or e)}")
            raise

    def handle_message(self, message):
        if isinstance(message, _Malformed):
            if message.id is None:      # a notification (e.g. didChange) has no response: tell the user instead
                self._server.notify_user(f"{message.message}; the notification was ignored")
            else:
                self.send_error(message.id, message.code, message.message)
            return
        if not hasattr(message, "jsonrpc") or getattr(message, "jsonrpc", None) != self.VERSION:
            msg_id = message.get("id") if isinstance(message, dict) else getattr(message, "id", None)
            self.send_error(msg_id if isinstance(msg_id, (int, str)) else None, JsonRpcInvalidRequest.CODE,
                            'invalid request: expected a JSON-RPC 2.0 object with "jsonrpc": "2.0"')
            return
        if self._shutdown and getattr(message, "method", None) not in (None, types.EXIT):
            if getattr(message, "id", None) is not None:   # a request after shutdown: answered, not dropped (LSP)
                self.send_error(message.id, JsonRpcInvalidRequest.CODE, "the server is shutting down")
            return
        if type(message) in _DOCUMENT_SYNC and (handler := self._sync_handler(message.method)) is not None:
            contextvars.copy_context().run(self._sync_notification, handler, message.params)
            return
        super().handle_message(message)

    def _sync_handler(self, method: str):
        """The registered feature for a document-sync notification when it is a plain function (None otherwise:
        pygls' own path then runs it)."""
        handler = self.fm.features.get(method)
        if handler is None or asyncio.iscoroutinefunction(handler) or is_thread_function(handler):
            return None
        return handler

    def _sync_notification(self, handler, params) -> None:
        """didOpen/didChange/didClose, one per keystroke: the feature's (synchronous) handler called at once. pygls'
        path for a notification (two runtime Protocol isinstance checks, a uuid4 and a Future per step of a generator
        handler) took more of the event loop than the edit itself at 50 clients (issue 13); an exception is reported
        as pygls reports it."""
        try:
            handler(params)
        except Exception as exc:
            failed: Future = Future()
            failed.set_exception(exc)
            self._check_handler_result(failed)

    def _handle_cancel_notification(self, msg_id):
        """A ``$/cancelRequest`` for a request already answered is normal (the answer and the cancel cross on the
        wire, at every keystroke of a fast typist): a debug line, not pygls' warning that filled the log."""
        if msg_id not in self._request_futures:
            log.debug("$/cancelRequest for %r: already answered", msg_id)
            return
        super()._handle_cancel_notification(msg_id)

    def send_error(self, msg_id: Any, code: int, message: str) -> None:
        self._send_data({"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}})

    @lsp_method(types.EXIT)
    def lsp_exit(self, *args):
        """stdio: end the process (pygls). TCP/websocket: end only this client's connection."""
        hook = getattr(self._server, "exit_hook", None)
        if hook is None:
            yield from super().lsp_exit(*args)
            return
        hook()

    # pygls keeps its own copy of every document (its workspace) before running the feature registered for these
    # notifications; ours is the DocumentStore (lsp/sync.py), so the copy is skipped and only the feature runs.
    def _feature_only(self, method: str, params):
        if (handler := self.fm.features.get(method)) is not None:
            yield handler, (params,), None

    @lsp_method(types.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: types.DidOpenTextDocumentParams):
        yield from self._feature_only(types.TEXT_DOCUMENT_DID_OPEN, params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams):
        yield from self._feature_only(types.TEXT_DOCUMENT_DID_CHANGE, params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: types.DidCloseTextDocumentParams):
        yield from self._feature_only(types.TEXT_DOCUMENT_DID_CLOSE, params)


_CONVERTER = None


def shared_converter():
    """pygls' cattrs converter, one per process: cattrs generates a (de)serialisation function for each LSP type the
    first time a converter meets it, so a converter per connection (pygls' default) cost every new websocket client
    ~18 ms of the event loop (50 clients connecting: ~1 s, issue 13). The converter keeps no connection state."""
    global _CONVERTER
    if _CONVERTER is None:
        _CONVERTER = default_converter()
    return _CONVERTER


class CompleterServer(LanguageServer):
    """One client connection's server. ``policy`` (lsp.security) is the operator's: which models this client may
    name; it comes from the command line through ``build_server``, not from a module global."""

    def __init__(self, engine_host: EngineHost | None = None, policy: security.Policy | None = None):
        super().__init__("completer", VERSION, protocol_cls=CompleterProtocol, converter_factory=shared_converter,
                         text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
        self.config = ServerConfig()
        self.documents = DocumentStore()
        self.engine_host = engine_host or EngineHost()
        self.policy = policy if policy is not None else security.Policy()
        self.lifecycle = Lifecycle(self.engine_host, lambda: self.config)
        self.context = ContextSources(lambda: self.documents, lambda: self.config)
        self.outcomes = outcomes.Outcomes(self._text_of, getattr(self.engine_host, "metrics", None))
        self.exit_hook = None  # set by the TCP/websocket transports: what `exit` does for one connection
        self.inbox = None      # set by the transports: the connection's lsp.inbox.Inbox
        self.partial_ghost = False  # the client asks again on a partial answer (capability experimental.partialGhost)

    # --- errors -------------------------------------------------------------------------------------------
    def report_server_error(self, error: Exception, source) -> None:
        if isinstance(error, (json.JSONDecodeError, UnicodeDecodeError)):
            self.protocol.send_error(None, -32700, f"parse error: {error}")
            return
        if client_errors.is_client_error(error) or getattr(error, "refusal", False):
            return                      # already one line (client_errors.Filter); the client got its answer
        log.error("server error (%s): %s", getattr(source, "__name__", source), error)

    def notify_user(self, message: str, kind: types.MessageType = types.MessageType.Error) -> None:
        log.warning("%s", message)
        try:
            self.window_show_message(types.ShowMessageParams(type=kind, message=f"completer: {message}"))
        except Exception:  # no transport (client gone)
            log.exception("could not send showMessage")

    # --- documents ----------------------------------------------------------------------------------------
    def locate(self, uri: str, position: types.Position) -> tuple[Snapshot, int]:
        """The document's current snapshot and the offset of ``position``; JSON-RPC -32602 when invalid."""
        try:
            snap = self.documents.get(uri)
            return snap, snap.offset_at(position.line, position.character)
        except DocumentError as e:
            raise JsonRpcInvalidParams(str(e)) from None

    def _text_of(self, uri: str) -> str | None:
        return self.documents.get(uri).text if uri in self.documents else None

    def other_documents(self, uri: str) -> list[Snapshot]:
        return [self.documents.get(u) for u in self.documents.uris() if u != uri]

    async def complete_at(self, uri: str, position: types.Position, method: str,
                          selected: types.SelectedCompletionInfo | None = None, partial_ok: bool = False) -> Completion:
        """The lifecycle's completion at ``position``, with engine failures as JSON-RPC errors. ``selected``: the
        suggestion selected in the editor's list (inline completion context): completed as if it were accepted."""
        snap, offset = self.locate(uri, position)
        if selected is not None:
            snap, offset = with_selection(snap, selected)
        snippets = self.context.snippets(uri, snap.position_at(offset)[0])
        try:
            result = await self.lifecycle.complete(snap, offset, self.other_documents(uri), self.documents.trees,
                                                   snippets, partial_ok)
            if result.text:
                self.outcomes.shown(uri, canonical_language(snap.language_id, uri), snap.text[:offset],
                                    snap.text[offset:], result.text)
            return result
        except EngineUnavailable as e:
            raise refusal(str(e)) from None
        except RequestError as e:      # the engine refused this request (e.g. longer than the model's context)
            raise refusal(f"{method} refused: {e}") from None
        except (EngineError, ValueError) as e:
            log.exception("%s failed", method)
            raise JsonRpcException(f"{method} failed: {e}", code=REQUEST_FAILED) from None

    async def close(self) -> None:
        """Abort everything in flight (a vanished client, shutdown)."""
        self.lifecycle.cancel_all()
        self.context.cancel_all()
        self.outcomes.cancel_all()
        await asyncio.sleep(0)

    # --- settings -----------------------------------------------------------------------------------------
    def apply_settings(self, settings: Any, where: str) -> None:
        new = self.config.updated(settings, where)
        try:
            security.check_models(new.engine, self.policy)
        except security.SecurityError as e:
            raise ConfigError(f"{where}.engine: {e}") from None
        engine_changed = new.engine != self.config.engine
        self.config = new
        self.documents.max_chars = new.max_document_chars
        if engine_changed:
            self.lifecycle.cancel_all()
            self.engine_host.start(new.engine)

    def stats(self) -> dict:
        engine = self.engine_host.engine
        return {
            "server": self.lifecycle.snapshot_stats(),
            "engine": engine.counters() if engine is not None else None,
            "engineReady": engine is not None,
            "engineError": self.engine_host.error,
            "engineLoadingS": self.engine_host.loading_s,
            "prompt": prompt_stats(self.config.settings(), engine),
            "documents": len(self.documents),
            "positionEncoding": self.documents.encoding,
            "inbox": dataclasses.asdict(self.inbox.stats) if self.inbox is not None else None,
            "config": self.config.to_json(),
            "context": self.context.snapshot_stats(),
            "outcomes": self.outcomes.snapshot(),
        }


def prompt_stats(settings: pipeline.Settings, engine) -> dict | None:
    """The prompt budget the engine gets (``pipeline.prompt_budget``: cut by coldPromptMs to what it prefills in
    that time) and the cold-prompt speed it measured at start; None before the engine is ready."""
    if engine is None:
        return None
    per_token = getattr(engine, "prompt_s_per_token", None)
    return {"budgetTokens": pipeline.prompt_budget(settings, engine),
            "coldMsPerToken": round(per_token * 1000, 4) if per_token else None}


def with_selection(snap: Snapshot, selected: types.SelectedCompletionInfo) -> tuple[Snapshot, int]:
    """The document as if the suggestion selected in the editor's list replaced its range, and the offset after it:
    editors show only ghost text that extends the selected suggestion (LSP ``selectedCompletionInfo``)."""
    r = selected.range
    try:
        a = snap.offset_at(r.start.line, r.start.character)
        b = snap.offset_at(r.end.line, r.end.character)
    except DocumentError as e:
        raise JsonRpcInvalidParams(f"context.selectedCompletionInfo.range: {e}") from None
    if b < a:
        raise JsonRpcInvalidParams("context.selectedCompletionInfo.range: its end is before its start")
    text = snap.text[:a] + selected.text + snap.text[b:]
    return dataclasses.replace(snap, text=text, _starts=[]), a + len(selected.text)


def build_server(engine_host: EngineHost | None = None, policy: security.Policy | None = None) -> CompleterServer:
    """The server for one connection; ``policy`` defaults to ``security.Policy()`` (in-process use and tests)."""
    server = CompleterServer(engine_host, policy)

    session.register(server)
    sync.register(server)
    custom.register(server)
    outcomes.register(server)
    warm.register(server)
    inline.register(server)
    completion.register(server)
    return server


# --- command line -------------------------------------------------------------------------------------------
def _host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = "", value
    try:
        p = int(port)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT or PORT, got {value!r}") from None
    if not 0 <= p <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 0..65535, got {p}")
    return host or "127.0.0.1", p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="completer-lsp", description="completer language server")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--stdio", action="store_true", help="talk LSP over stdin/stdout (default)")
    g.add_argument("--tcp", type=_host_port, metavar="HOST:PORT", help="listen for TCP clients")
    g.add_argument("--ws", type=_host_port, metavar="HOST:PORT", help="listen for websocket clients")
    ap.add_argument("--log-file", help="write the log here (default: stderr)")
    ap.add_argument("--log-level", default=None, choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
                    help="default: INFO for the server's own lines (listening, engine ready), WARNING for the "
                         "libraries'. Over stdio the log goes to the editor (window/logMessage), with --log-file "
                         "to that file")
    security.add_arguments(ap)
    metrics.add_arguments(ap)
    ap.add_argument("--engine-loading-wait", type=float, default=LOADING_WAIT_S, metavar="S",
                    help="how long a completion request waits for an engine that is starting or restarting before "
                         "it is answered 'engine loading' (default %(default)g s; the start itself may take up to "
                         "the engineStartTimeoutS setting)")
    ap.add_argument("--fault-after-steps", type=int, default=None, metavar="N",
                    help="testing only: the first engine fails inside its model step from step N on (the supervisor "
                         "then errors the requests in flight and restarts it)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    transport = "tcp" if args.tcp else "ws" if args.ws else "stdio"
    if transport == "stdio" and sys.stdin.isatty():
        print(USAGE_ON_A_TERMINAL, file=sys.stderr, flush=True)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    handler: logging.Handler = logging.FileHandler(args.log_file) if args.log_file else logging.StreamHandler(sys.stderr)
    handler.setFormatter(fmt)
    client_log = None
    if transport == "stdio" and not args.log_file:   # the editor gets the log as window/logMessage (lsp/client_log)
        handler = client_log = ClientLog(fallback=handler)
        client_log.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    handler.addFilter(client_errors.Filter())   # a client's mistake is one line, a server bug keeps its traceback
    logging.basicConfig(level=args.log_level or "WARNING", handlers=[handler])
    if args.log_level is None:                  # our own progress lines (listening, engine ready); libraries' warnings
        for name in ("completer", "lsp"):
            logging.getLogger(name).setLevel(logging.INFO)
    logging.getLogger("lsp.listening").setLevel(logging.INFO)   # the port, which clients read from the log
    policy = security.Policy.from_args(args, transport)
    # restarts a failed engine (completer.engine.supervisor); --fault-after-steps is its test hook
    host = EngineHost(supervised(fault_after_steps=args.fault_after_steps, restart_wait_s=args.engine_loading_wait),
                      loading_wait_s=args.engine_loading_wait)
    # SIGTERM (systemd, docker stop, an editor ending the server) takes SIGINT's path: asyncio cancels the serving
    # task, whose finally closes the engine — with vLLM that ends its engine-core process, which otherwise outlives
    # the server (parent 1) holding GPU memory
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        metrics.start(args, host, policy, transport)    # --metrics: Prometheus /metrics in a thread (lsp/metrics.py)
    except (ValueError, OSError) as e:
        print(f"completer-lsp: {e}", file=sys.stderr)
        sys.exit(2)
    try:
        if args.tcp or args.ws:
            bind, port = args.tcp or args.ws
            security.check_bind(bind, policy.token)
            serve = transports.serve_tcp if args.tcp else transports.serve_ws
            try:
                serve(lambda: build_server(host, policy), bind, port, host, policy)
            except KeyboardInterrupt:
                # SIGTERM/SIGINT: asyncio's run has cancelled the serving task, whose finally closed the engine (and
                # with vLLM its engine-core process). The interpreter's own teardown (the model's tensors, torch's
                # threads) took 3-9 s more, so `kill PID` seemed to hang: end here, as the stdio server does
                _exit_now(0)
            except OSError as e:
                if e.errno not in (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL):
                    raise
                why = {errno.EADDRINUSE: "the port is already in use (another completer-lsp?)",
                       errno.EACCES: "permission denied", errno.EADDRNOTAVAIL: "no such local address"}[e.errno]
                print(f"completer-lsp: cannot listen on {bind}:{port}: {why}", file=sys.stderr)
                sys.exit(1)
        else:
            try:
                transports.serve_stdio(build_server(host, policy), host, policy, client_log)
            except SystemExit as e:    # `exit` (pygls calls sys.exit once the connection is closed)
                _exit_now(e.code if isinstance(e.code, int) else 0)
            except KeyboardInterrupt:
                # SIGTERM/SIGINT: asyncio's run has cancelled the serving task, whose finally closed the engine.
                # Ending here, not in the interpreter's teardown: that joins pygls' thread blocked reading stdin,
                # which never returns while the client keeps the pipe open waiting for this process to end (an
                # editor sending `exit` and SIGTERM at once hung there when the signal won the race)
                _exit_now(0)
            _exit_now(0)
    except security.SecurityError as e:
        print(f"completer-lsp: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        pass


def _on_sigterm(signum, frame) -> None:
    """SIGTERM: SIGINT's path, or KeyboardInterrupt itself when SIGINT is ignored -- a server started in the
    background by a shell (``completer-lsp --ws ... &``, nohup, some supervisors) inherits SIGINT ignored, so raising
    SIGINT did nothing and SIGTERM never ended it. Raised here, KeyboardInterrupt unwinds asyncio's run, which cancels
    the serving task (its finally closes the engine)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        raise KeyboardInterrupt
    signal.raise_signal(signal.SIGINT)


def _exit_now(code: int) -> None:
    """End the stdio server at once: requests are answered and the engine is closed by now, and the interpreter's
    own teardown (collecting the model's tensors, joining the thread blocked on stdin) takes seconds, so editors
    restarting the server waited 0.7-3.5 s and sometimes killed it."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":
    main()
