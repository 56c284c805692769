"""Who may drive the server, and with how much: listener exposure, websocket handshake checks, size limits, models.

The threat: a completion server listens on a socket on a developer's machine. Any web page the developer opens can
try to connect to ``ws://127.0.0.1:PORT`` (browsers send an ``Origin`` header, which is how we tell them apart), and
anyone on the network can connect to a listener bound to a non-loopback address. And whoever drives the server can
name a model in its settings, which makes the server read files. So:

- listeners bind 127.0.0.1 unless told otherwise; binding any other address needs a token (``--ws-token`` or env
  ``COMPLETER_WS_TOKEN``), which clients send as ``Authorization: Bearer <token>`` or a ``?token=<token>`` query
  parameter (compared in constant time); a token, once set, is required on loopback too;
- the websocket handshake's ``Origin`` must match an allowlist (default: no Origin at all, i.e. a non-browser client,
  ``http://localhost:*``, ``http://127.0.0.1:*``, ``vscode-webview://*``; ``--allow-origin`` adds patterns); anything
  else gets HTTP 403 before a single JSON-RPC message is read;
- a websocket message may be at most ``--max-message-bytes`` (websockets ``max_size``: the connection is closed with
  code 1009); over stdio/TCP a JSON-RPC frame whose ``Content-Length`` exceeds the limit is skipped unread and
  answered with -32600, and the connection keeps serving (:class:`FrameLimitReader`);
- models: a client (over TCP or websocket) may only name ``house:*`` models, the models given on the server's command
  line (``--allow-model``), or models inside the folders of ``--allow-model-dir``; ``--allow-client-models`` lifts the
  restriction. Over stdio the client is the process that started the server (the editor, as the same user), so it
  may name any model, as it could have put it on the command line.

Everything here is plain functions and small dataclasses; ``lsp.server`` and ``lsp.transports`` call them.
"""

from __future__ import annotations

import argparse
import fnmatch
import hmac
import http
import ipaddress
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable
from urllib.parse import parse_qs, urlsplit

from completer.arguments import positive_int

log = logging.getLogger(__name__)

TOKEN_ENV = "COMPLETER_WS_TOKEN"
DEFAULT_ORIGINS = (None, "http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*", "vscode-webview://*")
DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024      # 16 MiB: a large file plus JSON escaping fits


class SecurityError(ValueError):
    """A refused configuration or request; the message says what is refused and which option allows it."""


# --- listener exposure ----------------------------------------------------------------------------------------
def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``; False for wildcards (``""``, ``0.0.0.0``, ``::``) and names."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """Refuse to listen on a non-loopback address without a token."""
    if not is_loopback(host) and not token:
        raise SecurityError(
            f"refusing to listen on {host or '*'!r} (not a loopback address) without a token: anyone who can reach "
            f"this machine could use the server. Pass --ws-token TOKEN (or set {TOKEN_ENV}) and give clients the "
            f"token, or bind 127.0.0.1")


# --- the websocket handshake --------------------------------------------------------------------------------------
def origin_allowed(origin: str | None, allowed: Iterable[str | None]) -> bool:
    """``origin`` (None = header absent) against patterns with ``*`` wildcards (``http://localhost:*``)."""
    for pattern in allowed:
        if pattern is None:
            if origin is None:
                return True
        elif origin is not None and fnmatch.fnmatchcase(origin.lower(), pattern.lower()):
            return True
    return False


def token_from(headers: Any, path: str) -> str | None:
    """The token a client sent: ``Authorization: Bearer T`` or ``?token=T``."""
    auth = headers.get("Authorization") if headers is not None else None
    if auth:
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    values = parse_qs(urlsplit(path).query).get("token")
    return values[0] if values else None


def token_ok(sent: str | None, expected: str) -> bool:
    return sent is not None and hmac.compare_digest(sent.encode("utf-8", "surrogatepass"),
                                                    expected.encode("utf-8", "surrogatepass"))


def check_handshake(headers: Any, path: str, policy: "Policy") -> tuple[int, str] | None:
    """None if the handshake may proceed, else (HTTP status, reason) to refuse it with."""
    origin = headers.get("Origin") if headers is not None else None
    if not origin_allowed(origin, policy.origins):
        return (http.HTTPStatus.FORBIDDEN,
                f"origin {origin!r} is not allowed (the server's --allow-origin list decides which web pages may "
                f"connect)\n")
    if policy.token and not token_ok(token_from(headers, path), policy.token):
        return http.HTTPStatus.FORBIDDEN, "missing or wrong token (send Authorization: Bearer TOKEN)\n"
    return None


def process_request(policy: "Policy") -> Callable:
    """A ``process_request`` hook for ``websockets.asyncio.server.serve``: refuse bad handshakes with HTTP 403."""

    def hook(connection, request):
        refused = check_handshake(request.headers, request.path, policy)
        if refused is None:
            return None
        status, reason = refused
        policy.refused_handshakes += 1
        log.warning("refused websocket handshake from %s: %s", getattr(connection, "remote_address", "?"),
                    reason.strip())
        return connection.respond(status, reason)

    return hook


def ws_serve_kwargs(policy: "Policy") -> dict:
    """Keyword arguments for ``websockets.asyncio.server.serve``."""
    return {"process_request": process_request(policy), "max_size": policy.max_message_bytes}


# --- stdio/TCP frame limit ----------------------------------------------------------------------------------------
class FrameLimitReader:
    """Wraps a pygls ``AsyncReader``: a frame with a ``Content-Length`` over the limit is skipped without buffering
    it, answered with -32600 (via ``on_oversize(length)``), and the next frame is handed to pygls instead.

    pygls' ``run_async`` reads headers with ``readline()`` and the body with ``readexactly(n)``; this reader passes
    both through and only steps in when ``n`` is over the limit, or a header line is absurdly long (it is then
    read in bounded pieces that match no header, so pygls ignores it instead of buffering it whole).
    """

    CHUNK = 1 << 16
    MAX_HEADER_LINE = 8192          # a header line longer than this is read (and ignored) in pieces
    _DROPPED = b"X-Completer-Dropped: header line too long\r\n"

    def __init__(self, reader, max_bytes: int, on_oversize: Callable[[int], None]):
        self._reader, self.max_bytes, self._on_oversize = reader, max_bytes, on_oversize
        self.skipped = 0

    async def readline(self) -> bytes:
        stdin = getattr(self._reader, "stdin", None)
        if stdin is not None:           # pygls' StdinAsyncReader: bound the line, so memory stays bounded
            return await self._reader.loop.run_in_executor(self._reader.executor, stdin.readline,
                                                           self.MAX_HEADER_LINE)
        try:
            return await self._reader.readline()
        except ValueError:              # asyncio.StreamReader: line over its limit (dropped from its buffer)
            return self._DROPPED

    async def readexactly(self, n: int) -> bytes:
        while n > self.max_bytes:
            await self._discard(n)
            self.skipped += 1
            self._on_oversize(n)
            n = await self._next_length()
            if n is None:
                return b""                      # end of input: pygls stops its loop
        return await self._reader.readexactly(n)

    async def _discard(self, n: int) -> None:
        while n > 0:
            k = min(n, self.CHUNK)
            await self._reader.readexactly(k)
            n -= k

    async def _next_length(self) -> int | None:
        """The next frame's Content-Length, its headers read as pygls would (None at end of input)."""
        from .inbox import content_length

        return await content_length(self._reader.readline)


# --- models a client may name -------------------------------------------------------------------------------------
def model_allowed(name: str | None, policy: "Policy") -> bool:
    if name is None or policy.allow_client_models or name.startswith("house:") or name in policy.server_models:
        return True
    path = Path(name).expanduser()
    if not path.is_absolute():
        return False       # relative paths and hub ids depend on the server's cwd/cache: not for remote clients
    try:
        real = path.resolve()
    except (OSError, RuntimeError):
        return False
    for folder in policy.model_dirs:
        try:
            real.relative_to(folder.resolve())
            return True
        except ValueError:
            continue
    return False


def check_models(config, policy: "Policy") -> None:
    """Raise SecurityError if ``config`` (an EngineConfig) names a model the client may not load."""
    for what in ("model", "draft", "drafter"):      # drafter: the EAGLE-3 folder vLLM loads for speculation="eagle3"
        name = getattr(config, what, None)
        if not model_allowed(name, policy):
            raise SecurityError(
                f"{what} {name!r} is not allowed: clients may name house:* models, the server's --allow-model models and "
                f"models under --allow-model-dir folders (the operator can pass --allow-client-models)")


# --- the policy ---------------------------------------------------------------------------------------------------
@dataclass
class Policy:
    token: str | None = None
    origins: tuple[str | None, ...] = DEFAULT_ORIGINS
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    allow_client_models: bool = True      # in-process servers and stdio; from_args narrows it for TCP/websocket
    server_models: frozenset[str] = frozenset()
    model_dirs: tuple[Path, ...] = ()
    refused_handshakes: int = field(default=0, compare=False)

    @classmethod
    def from_args(cls, args: argparse.Namespace, transport: str) -> "Policy":
        """Policy for ``transport`` ("stdio" | "tcp" | "ws") from the options of :func:`add_arguments`."""
        token = args.ws_token or os.environ.get(TOKEN_ENV) or None
        origins = DEFAULT_ORIGINS + tuple(args.allow_origin or ())
        models = frozenset(m for m in (args.model or ()) if m)
        return cls(token=token, origins=origins, max_message_bytes=args.max_message_bytes,
                   allow_client_models=args.allow_client_models or transport == "stdio",
                   server_models=models, model_dirs=tuple(Path(d) for d in (args.allow_model_dir or ())))


def add_arguments(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("security")
    g.add_argument("--ws-token", default=None,
                   help=f"token websocket clients must send (Authorization: Bearer, or ?token=); needed to bind a "
                        f"non-loopback address (default: env {TOKEN_ENV})")
    g.add_argument("--allow-origin", action="append", metavar="PATTERN",
                   help="also accept websocket handshakes with this Origin (wildcards: https://ide.example.com:*)")
    g.add_argument("--max-message-bytes", type=positive_int, default=DEFAULT_MAX_MESSAGE_BYTES,
                   help=f"largest JSON-RPC message accepted (default {DEFAULT_MAX_MESSAGE_BYTES})")
    g.add_argument("--allow-model", "--model", dest="model", action="append", metavar="NAME",
                   help="allow TCP/websocket clients to name this model (folder, GGUF file or hub id) in their "
                        "settings (repeatable). It loads nothing: the model served is the one the client's settings "
                        "name (engine.model, engine.draft). --model is the old spelling of this option")
    g.add_argument("--allow-model-dir", action="append", metavar="DIR",
                   help="TCP/websocket clients may name models inside this folder (repeatable)")
    g.add_argument("--allow-client-models", action="store_true",
                   help="TCP/websocket clients may name any model path (trusted clients only)")
