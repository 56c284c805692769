"""``completer/didMoveCursor {textDocument: {uri}, position}``: where the user's cursor is, before they type.

An editor sends it when the cursor moves other than by typing (a click, the arrow keys, a jump to a definition,
opening a file), after the cursor has rested a moment (the editors of ``editors/`` wait 100 ms). With
``warmOnCursor`` (the default) the server then prefills, in the background, the prompt a keystroke there would get
into the embedded engine's cache for the document (``Lifecycle.warm``), so that the first keystroke's request runs
its few new tokens instead of the whole prompt: a cold prompt of SmolLM2 takes 0.5-1.4 s on 2 cores (350 tokens),
during which a fast typist's keystrokes got no ghost text (issue 29). The document's next completion request cancels
the warm-up and keeps what it filled. Nothing is answered (a notification); params of the wrong shape are reported to
the user and change nothing; a position the document no longer has (an edit crossed the notification) is ignored.
vLLM and remote engines take no warm-up (an engine request for no tokens does nothing there).
"""

from __future__ import annotations

import logging

from pygls.exceptions import JsonRpcInvalidParams

from .custom import position_params

log = logging.getLogger(__name__)

DID_MOVE_CURSOR = "completer/didMoveCursor"


def did_move_cursor(ls, params) -> None:
    try:
        uri, position = position_params(params)
        if not isinstance(uri, str) or position.line < 0 or position.character < 0:
            raise ValueError("needs textDocument.uri (a string) and position {line, character} (integers >= 0)")
    except ValueError as e:
        ls.notify_user(f"{DID_MOVE_CURSOR}: {e}; ignored")
        return
    try:
        snap, offset = ls.locate(uri, position)
    except JsonRpcInvalidParams as e:            # an unknown document, or a position an edit has since removed
        log.debug("%s ignored: %s", DID_MOVE_CURSOR, e)
        return
    ls.lifecycle.warm(snap, offset, ls.other_documents(uri), ls.documents.trees,
                      ls.context.snippets(uri, snap.position_at(offset)[0]))


def register(server) -> None:
    server.feature(DID_MOVE_CURSOR)(did_move_cursor)
