"""Over stdio the server's log reaches the editor as window/logMessage with the record's own message type, so a
warning is not filed as an error (Neovim's :LspLog showed everything on stderr as [ERROR])."""

import json
import logging
import subprocess
import sys

from lsprotocol import types

from lsp.client_log import message_type


def test_levels_map_to_lsp_message_types():
    assert message_type(logging.ERROR) == types.MessageType.Error
    assert message_type(logging.WARNING) == types.MessageType.Warning
    assert message_type(logging.INFO) == types.MessageType.Info
    assert message_type(logging.DEBUG) == types.MessageType.Log


def _frame(obj: dict) -> bytes:
    body = json.dumps(obj).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def _messages(data: bytes) -> list[dict]:
    out = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        n = int(next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[1])
        out.append(json.loads(rest[:n]))
        data = rest[n:]
    return out


def test_a_warning_is_a_warning_log_message_not_stderr():
    """A didChange for a document never opened: the server warns (and tells the user); the log line arrives as
    window/logMessage type Warning, and stderr stays quiet."""
    msgs = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"processId": None, "rootUri": None, "capabilities": {},
                    "initializationOptions": {"engine": {"speculation": "none"}}}},
        {"jsonrpc": "2.0", "method": "initialized", "params": {}},
        {"jsonrpc": "2.0", "method": "textDocument/didChange",
         "params": {"textDocument": {"uri": "file:///never-opened.py", "version": 2},
                    "contentChanges": [{"text": "x"}]}},
        {"jsonrpc": "2.0", "id": 2, "method": "shutdown", "params": None},
        {"jsonrpc": "2.0", "method": "exit", "params": None},
    ]
    r = subprocess.run([sys.executable, "-m", "lsp.server", "--stdio"], input=b"".join(map(_frame, msgs)),
                       capture_output=True, timeout=120)
    got = _messages(r.stdout)
    logs = [m["params"] for m in got if m.get("method") == "window/logMessage"]
    warnings = [p for p in logs if "never-opened" in p["message"]]
    assert warnings and all(p["type"] == types.MessageType.Warning.value for p in warnings), logs
    assert b"never-opened" not in r.stderr, r.stderr.decode()
