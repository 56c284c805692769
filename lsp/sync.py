"""Document sync: ``didOpen``, ``didChange``, ``didClose``, ``didSave`` into the connection's ``DocumentStore`` (and
the events the context sources and the outcome tracker learn from: ``lsp/context_sources.py``, ``lsp/outcomes.py``).

Positions are in the negotiated encoding, versions are checked, edits apply all or nothing (``lsp.documents``). An
edit supersedes the document's completion in flight (``Lifecycle.document_changed``). A bad edit is a notification's
error: it is reported with ``window/showMessage`` and the document keeps its last good text.
"""

from __future__ import annotations

from lsprotocol import types

from .context_sources import edit_ranges
from .documents import Change, DocumentError


def did_open(ls, p: types.DidOpenTextDocumentParams) -> None:
    d = p.text_document
    try:
        if d.uri in ls.documents:
            ls.lifecycle.document_changed(d.uri)
        ls.documents.open(d.uri, d.text, d.version, d.language_id)
    except DocumentError as e:
        ls.notify_user(str(e))
        return
    ls.context.opened(d.uri, d.text)


def did_change(ls, p: types.DidChangeTextDocumentParams) -> None:
    uri = p.text_document.uri
    changes = []
    for c in p.content_changes:
        r = getattr(c, "range", None)
        changes.append(Change(c.text, None if r is None else
                              ((r.start.line, r.start.character), (r.end.line, r.end.character))))
    try:
        snap = ls.documents.change(uri, p.text_document.version, changes)
    except DocumentError as e:
        ls.lifecycle.document_changed(uri)
        ls.notify_user(str(e))
        return
    ls.lifecycle.document_changed(uri, snap)
    ls.context.changed(uri, edit_ranges(changes))
    ls.outcomes.changed(snap)


def did_save(ls, p: types.DidSaveTextDocumentParams) -> None:
    if p.text_document.uri in ls.documents:
        ls.context.saved(p.text_document.uri)


def did_close(ls, p: types.DidCloseTextDocumentParams) -> None:
    ls.lifecycle.document_closed(p.text_document.uri)
    ls.context.closed(p.text_document.uri)
    ls.outcomes.closed(p.text_document.uri)
    try:
        ls.documents.close(p.text_document.uri)
    except DocumentError as e:
        ls.notify_user(str(e), types.MessageType.Warning)


def register(server) -> None:
    server.feature(types.TEXT_DOCUMENT_DID_OPEN)(did_open)
    server.feature(types.TEXT_DOCUMENT_DID_CHANGE)(did_change)
    server.feature(types.TEXT_DOCUMENT_DID_CLOSE)(did_close)
    server.feature(types.TEXT_DOCUMENT_DID_SAVE)(did_save)
