"""The server's per-message shortcuts (issue 13) behave as the paths they replace: one cattrs converter for every
connection, document-sync notifications handled without pygls' generic notification path, line starts from line
lengths, the adaptive debounce's wait counted by bisection."""

from __future__ import annotations

import json
import logging
import random
import re

from lsp import documents, rhythm
from lsp.engine_host import EngineHost
from lsp.server import build_server

URI = "file:///a.py"


class _Writer:
    def __init__(self):
        self.sent: list[dict] = []

    def write(self, data: bytes) -> None:
        self.sent.append(json.loads(data))


def _server():
    server = build_server(EngineHost())
    writer = _Writer()
    server.protocol.set_writer(writer, include_headers=False)
    return server, writer


def _feed(server, method: str, params: dict, msg_id=None) -> None:
    msg = {"jsonrpc": "2.0", "method": method, "params": params}
    if msg_id is not None:
        msg["id"] = msg_id
    server.protocol.handle_message(json.loads(json.dumps(msg), object_hook=server.protocol.structure_message))


def _change(version: int, line: int, col: int, text: str) -> dict:
    pos = {"line": line, "character": col}
    return {"textDocument": {"uri": URI, "version": version},
            "contentChanges": [{"range": {"start": pos, "end": pos}, "text": text}]}


def test_connections_share_one_converter():
    a, b = build_server(EngineHost()), build_server(EngineHost())
    assert a.protocol._converter is b.protocol._converter
    assert a.documents is not b.documents and a.lifecycle is not b.lifecycle   # the state stays per connection


def test_document_sync_notifications_edit_the_document_in_order():
    server, writer = _server()
    _feed(server, "textDocument/didOpen", {"textDocument": {"uri": URI, "languageId": "python", "version": 1,
                                                            "text": "def f():\n    return 1\n"}})
    for v, ch in enumerate("+ 2", start=2):
        _feed(server, "textDocument/didChange", _change(v, 1, 12 + v - 2, ch))
    snap = server.documents.get(URI)
    assert (snap.text, snap.version) == ("def f():\n    return 1+ 2\n", 4)
    assert writer.sent == []
    _feed(server, "textDocument/didClose", {"textDocument": {"uri": URI}})
    assert URI not in server.documents


def test_a_bad_edit_is_reported_to_the_user_and_the_text_kept():
    server, writer = _server()
    _feed(server, "textDocument/didOpen", {"textDocument": {"uri": URI, "languageId": "python", "version": 1,
                                                            "text": "x = 1\n"}})
    _feed(server, "textDocument/didChange", _change(2, 7, 0, "y"))       # line 7 of a 2-line document
    assert server.documents.get(URI).text == "x = 1\n"
    assert [m["method"] for m in writer.sent] == ["window/showMessage"]
    assert "line 7" in writer.sent[0]["params"]["message"]


def test_a_handler_that_fails_is_reported_as_a_server_error(caplog):
    server, _ = _server()
    _feed(server, "textDocument/didOpen", {"textDocument": {"uri": URI, "languageId": "python", "version": 1,
                                                            "text": "x = 1\n"}})

    def broken(*args, **kwargs):
        raise RuntimeError("the store broke")

    server.documents.change = broken
    with caplog.at_level(logging.ERROR, logger="completer.lsp"):
        _feed(server, "textDocument/didChange", _change(2, 0, 5, "2"))
    assert any("server error" in r.getMessage() and "the store broke" in r.getMessage() for r in caplog.records)


_EOL = re.compile(r"\r\n|\r|\n")


def test_line_starts_are_the_regular_expressions():
    rng = random.Random(5)
    texts = ["", "a", "\n", "\n\n", "a\nb", "a\n", "é\U0001F600\nx", "x\r\ny\rz\n", "\r", "\r\n\r\n"]
    texts += ["".join(rng.choice("ab \n\r\té") for _ in range(rng.randrange(60))) for _ in range(3000)]
    for t in texts:
        assert documents.line_starts(t) == [0] + [m.end() for m in _EOL.finditer(t)], repr(t)


def _superseded_wait_by_definition(gaps, engine_ms, hi):
    g = sorted(gaps)
    for w in [0.0] + [x for x in g if x < hi]:
        longer = [x for x in g if x > w]
        if not longer:
            return w
        if sum(1 for x in longer if x < w + engine_ms) <= rhythm.RISK * len(longer):
            return w
    return hi


def test_superseded_wait_is_the_definitions():
    rng = random.Random(11)
    for _ in range(5000):
        gaps = [rng.choice([rng.uniform(0, 1001), float(rng.randrange(0, 300, 10)), 1001.0])
                for _ in range(rng.randrange(0, 70))]
        engine_ms = rng.choice([0.0, 50.0, rng.uniform(0, 800)])
        hi = rng.choice([0.0, 300.0, rng.uniform(0, 1200)])
        assert rhythm.superseded_wait(gaps, engine_ms, hi) == _superseded_wait_by_definition(gaps, engine_ms, hi)
