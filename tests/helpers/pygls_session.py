"""Helpers for tests that drive the server through pytest-lsp's client (pygls, typed lsprotocol messages): a
second, independent implementation of the protocol's client side checks the server's messages against the spec.
The wait-for-ready loop is ``lsp.client.wait_ready``, shared with every other client."""

from __future__ import annotations

from lsprotocol import types

from lsp.client import wait_ready


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


async def wait_engine_ready(client, timeout: float = 300.0) -> dict:
    return await wait_ready(lambda: stats(client), timeout)


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
