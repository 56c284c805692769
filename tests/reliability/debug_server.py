"""The real ``completer-lsp`` (``lsp.server.main``: same transports, engine host and handlers) plus one read-only
request for tests, ``completer/debugDocument`` ``{uri}`` -> ``{text, version}``, so that a test can compare the
server's documents with a reference model of the edits."""

from __future__ import annotations

import sys

from pygls.exceptions import JsonRpcInvalidParams

from lsp import server as srv
from lsp.documents import DocumentError

_build = srv.build_server


def build_server(*args, **kwargs):
    server = _build(*args, **kwargs)

    @server.feature("completer/debugDocument")
    def debug_document(ls, params):
        uri = getattr(params, "uri", None)
        try:
            snap = ls.documents.get(uri)
        except DocumentError as e:
            raise JsonRpcInvalidParams(str(e)) from None
        return {"text": snap.text, "version": snap.version}

    return server


srv.build_server = build_server

if __name__ == "__main__":
    srv.main(sys.argv[1:])
