"""Helpers the end-to-end tests share (imported by path: tests run with --import-mode=importlib)."""

from __future__ import annotations

import asyncio
import json

from lsprotocol import types

SERVER_MODULE = "lsp.server"


def init_params(engine_options: dict, encodings=None, **options) -> types.InitializeParams:
    general = types.GeneralClientCapabilities(position_encodings=encodings) if encodings else None
    return types.InitializeParams(
        capabilities=types.ClientCapabilities(general=general),
        initialization_options={"engine": engine_options, "maxTokens": 16, "debounceMs": 5, **options},
    )


async def stats(client) -> dict:
    return _plain(await client.protocol.send_request_async("completer/stats", {}))


def _plain(obj):
    """pygls hands unknown-method results back as namespace objects; turn them into dicts."""
    if hasattr(obj, "_asdict"):
        return {k: _plain(v) for k, v in obj._asdict().items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(x) for x in obj]
    if hasattr(obj, "__dict__") and not isinstance(obj, type):
        return {k: _plain(v) for k, v in vars(obj).items()}
    return obj


async def wait_engine_ready(client, timeout: float = 120.0) -> dict:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:
        s = await stats(client)
        if s["engineReady"]:
            return s
        assert s["engineError"] is None, s["engineError"]
        await asyncio.sleep(0.1)
    raise AssertionError("engine did not become ready")


def open_doc(client, uri: str, text: str, language: str = "python", version: int = 1) -> None:
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id=language, version=version, text=text)))


def edit(client, uri: str, version: int, start: tuple[int, int], end: tuple[int, int], text: str) -> None:
    rng = types.Range(start=types.Position(*start), end=types.Position(*end))
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
        content_changes=[types.TextDocumentContentChangePartial(range=rng, text=text)]))


def inline_params(uri: str, line: int, character: int) -> types.InlineCompletionParams:
    return types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=line, character=character),
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic))


# --- raw LSP framing (stdio / TCP) ---
def frame(msg: dict) -> bytes:
    body = json.dumps(msg).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


async def read_message(stdout) -> dict:
    length = 0
    while True:
        line = await stdout.readline()
        assert line, "server closed stdout"
        if line.startswith(b"Content-Length:"):
            length = int(line.split(b":")[1])
        elif line == b"\r\n" and length:
            return json.loads(await stdout.readexactly(length))


async def response(stdout, msg_id) -> dict:
    while True:
        msg = await asyncio.wait_for(read_message(stdout), 60)
        if msg.get("id") == msg_id and "method" not in msg:
            return msg
