"""Fuzzing the JSON-RPC layer and the handlers of a real ``completer-lsp`` process over stdio (hypothesis).

Every case is followed by a ``completer/health`` request: the server must answer it (it keeps serving). Each
family of bad input has the JSON-RPC error that fits: unparsable bodies -32700 (id null), JSON that is not a
JSON-RPC request -32600, unknown methods -32601, params of the wrong shape, unknown documents and positions past
the end -32602, cancelled requests -32800. Documents must stay equal to an independent reference model
(``tests.helpers.docmodel``) of the edits. Env ``COMPLETER_FUZZ_EXAMPLES`` (default 40; ``python -m bench.reliability --long``: 400)
sets the inputs per test; with
env ``COMPLETER_FUZZ_LOG=FILE`` every case's family and outcome is appended to FILE (JSON lines).
"""

from __future__ import annotations

import json
import os
import string
import sys
from pathlib import Path

import pytest
import pytest_asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lsp.client import Client, Server, frame
from tests.helpers.docmodel import Doc, Invalid, offset, units

DEBUG_SERVER = Path(__file__).with_name("debug_server.py")
pytestmark = pytest.mark.asyncio(loop_scope="module")   # every test talks to the one module-scoped server

MAX_DOC = 200_000
URI = "file:///fuzz/doc.py"
# per-test settings (a global profile would change other suites' hypothesis tests); bench --long raises the count
FUZZ = settings(max_examples=int(os.environ.get("COMPLETER_FUZZ_EXAMPLES", "40")), deadline=None,
                suppress_health_check=list(HealthCheck))


def log(family: str, outcome: str) -> None:
    path = os.environ.get("COMPLETER_FUZZ_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"family": family, "outcome": outcome}) + "\n")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(engine_options, tmp_path_factory):
    """The real server with one read-only request added for these tests (``debug_server.py``)."""
    proc = Server("stdio", [sys.executable, str(DEBUG_SERVER), "--stdio"],
                  log_path=tmp_path_factory.mktemp("fuzz") / "server.log")
    c = await proc.start()
    r = await c.initialize(engine_options, maxTokens=4, debounceMs=20, maxDocumentChars=MAX_DOC)
    assert "result" in r, r
    await c.wait_ready()
    yield c
    await proc.stop(c)


async def errors_before_health(c: Client, data: bytes) -> list[dict]:
    """Send ``data``, then a health request; the error responses the server wrote in between."""
    start = c.mark()
    await c.send_bytes(data)
    h = await c.health()
    assert h["ok"], h
    return [m for m in c.since(start) if "error" in m]


def single_error(errs: list[dict], family: str) -> dict:
    assert len(errs) == 1, errs
    log(family, str(errs[0]["error"]["code"]))
    return errs[0]


# --- the JSON-RPC layer ---------------------------------------------------------------------------------------
def _unparsable(b: bytes) -> bool:
    try:
        json.loads(b)
        return False
    except ValueError:
        return True


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                           lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=5), kids,
                                                                                     max_size=4), max_leaves=10)


@FUZZ
@given(body=st.binary(min_size=1, max_size=300).filter(_unparsable)
       | st.text(min_size=1, max_size=200).map(lambda s: s.encode("utf-8", "surrogatepass")).filter(_unparsable))
async def test_unparsable_bodies_get_parse_error(server, body):
    e = single_error(await errors_before_health(server, frame(body)), "unparsable body")
    assert e["error"]["code"] == -32700 and e["id"] is None


@FUZZ
@given(value=json_values.filter(lambda v: not isinstance(v, dict)))
async def test_json_that_is_not_an_object_is_an_invalid_request(server, value):
    e = single_error(await errors_before_health(server, frame(json.dumps(value).encode())), "non-object JSON")
    assert e["error"]["code"] == -32600


@FUZZ
@given(rid=st.integers(1_000_000, 2**31), version=st.sampled_from([None, "1.0", 2, "2", ""]),
       params=st.sampled_from([{}, None, [], "missing"]))
async def test_requests_without_jsonrpc_2_are_invalid(server, rid, version, params):
    msg = {"id": rid, "method": "completer/health"}
    if version is not None:
        msg["jsonrpc"] = version
    if params != "missing":
        msg["params"] = params
    e = single_error(await errors_before_health(server, frame(json.dumps(msg).encode())), "not JSON-RPC 2.0")
    assert e["error"]["code"] == -32600 and e["id"] == rid


@FUZZ
@given(rid=st.integers(1_000_000, 2**31) | st.text(string.ascii_letters, min_size=1, max_size=8),
       method=st.text(min_size=1, max_size=30).filter(lambda m: not m.startswith("$/")).map(lambda m: "x/" + m),
       params=st.sampled_from(["missing", None, {}, [1, 2], {"a": 1}]))
async def test_unknown_methods_get_method_not_found(server, rid, method, params):
    msg = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params != "missing":
        msg["params"] = params
    e = single_error(await errors_before_health(server, frame(json.dumps(msg).encode())), "unknown method")
    assert e["error"]["code"] == -32601 and e["id"] == rid


not_a_document = st.none() | st.integers() | st.text(max_size=10) | st.lists(st.integers(), max_size=3)
bad_position = st.fixed_dictionaries({"line": st.text(max_size=3) | st.floats(allow_nan=False) | st.none(),
                                      "character": st.integers()})


@FUZZ
@given(rid=st.integers(1_000_000, 2**31),
       method=st.sampled_from(["textDocument/inlineCompletion", "textDocument/completion"]),
       params=st.one_of(
           st.fixed_dictionaries({"textDocument": not_a_document, "position": st.just({"line": 0, "character": 0})}),
           st.fixed_dictionaries({"textDocument": st.just({"uri": URI}), "position": bad_position}),
           st.integers() | st.text(max_size=5) | st.lists(st.integers(), max_size=2)))
async def test_wrong_param_types_get_invalid_params(server, rid, method, params):
    if method == "textDocument/inlineCompletion" and isinstance(params, dict):
        params = {**params, "context": {"triggerKind": 2}}
    msg = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
    e = single_error(await errors_before_health(server, frame(json.dumps(msg).encode())), "wrong param types")
    assert e["error"]["code"] == -32602 and e["id"] == rid


@FUZZ
@given(junk=st.lists(st.text(string.ascii_letters + string.digits + "-: ", max_size=40)
                     .filter(lambda s: not s.lower().startswith("content-length")), min_size=1, max_size=3),
       content_type=st.booleans())
async def test_junk_header_lines_and_extra_headers_are_skipped(server, junk, content_type):
    extra = b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n" if content_type else b""
    body = json.dumps({"jsonrpc": "2.0", "id": 77, "method": "completer/health"}).encode()
    start = server.mark()
    await server.send_bytes(b"".join(j.encode() + b"\r\n" for j in junk if j.strip()) + frame(body, extra))
    assert "result" in await server.response(77, start=start)
    log("junk headers", "served")


# --- handlers: documents, positions, edits ----------------------------------------------------------------------
alphabet = st.sampled_from(list("ab xyz_(){}:=.") + ["\n", "\r\n", "\r", "\t", "é", "中", "😀", "𝄞", "\ud800", "\udbff"])
texts = st.lists(alphabet, max_size=40).map("".join)


async def open_doc(c: Client, uri: str, text: str, version: int = 1) -> None:
    await c.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": version,
                                                       "text": text}})


async def server_doc(c: Client, uri: str) -> dict:
    r = await c.ask("completer/debugDocument", {"uri": uri})
    assert "result" in r, r
    return r["result"]


positions = st.tuples(st.integers(0, 8), st.integers(0, 30))
changes = st.lists(st.tuples(st.none() | st.tuples(positions, positions), texts), min_size=1, max_size=3)


@FUZZ
@given(initial=texts, edits=st.lists(st.tuples(st.integers(-1, 3), changes), min_size=1, max_size=8))
async def test_documents_equal_a_reference_model_of_the_edits(server, initial, edits):
    model = Doc(initial, 1)
    await open_doc(server, URI, initial)
    refused = 0
    for step, chs in edits:
        version = model.version + step              # step <= 0: stale or repeated version, must be refused
        wire = [{"text": t} if r is None else
                {"range": {"start": {"line": r[0][0], "character": r[0][1]},
                           "end": {"line": r[1][0], "character": r[1][1]}}, "text": t} for r, t in chs]
        await server.notify("textDocument/didChange", {"textDocument": {"uri": URI, "version": version},
                                                 "contentChanges": wire})
        refused += not model.change(version, chs, MAX_DOC)
    got = await server_doc(server, URI)
    assert units(got["text"]) == model.u and got["version"] == model.version
    log("document edits", f"{len(edits)} edits, {refused} refused, equal")


@FUZZ
@given(text=texts, pos=st.tuples(st.integers(-2, 10), st.integers(-2, 60)))
async def test_positions_past_the_end_or_inside_a_character(server, text, pos):
    await open_doc(server, URI, text)
    r = await server.ask("textDocument/inlineCompletion",
                       {"textDocument": {"uri": URI}, "position": {"line": pos[0], "character": pos[1]},
                        "context": {"triggerKind": 2}})
    try:
        offset(units(text), *pos)
        valid = True
    except Invalid:
        valid = False
    if valid:
        assert "result" in r, r
        log("positions", "valid: answered")
    else:
        assert r["error"]["code"] == -32602, r
        log("positions", "invalid: -32602")
    assert (await server.health())["ok"]


@FUZZ
@given(uri=st.text(min_size=1, max_size=30).map(lambda s: "file:///nowhere/" + s))
async def test_unknown_documents(server, uri):
    r = await server.ask("textDocument/inlineCompletion", {"textDocument": {"uri": uri},
                                                         "position": {"line": 0, "character": 0},
                                                         "context": {"triggerKind": 2}})
    assert r["error"]["code"] == -32602 and "not open" in r["error"]["message"], r
    await server.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2},
                                             "contentChanges": [{"text": "x"}]})
    await server.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    assert (await server.health())["ok"]
    log("unknown documents", "-32602")


async def test_huge_documents_and_lines(server):
    big = "x = 1\n" * (MAX_DOC // 6 + 10)                 # over maxDocumentChars: refused, not opened
    uri = "file:///fuzz/huge.py"
    start = server.mark()
    await open_doc(server, uri, big)
    msg = await server.wait_for(lambda m: m.get("method") == "window/showMessage", start=start)
    assert "maxDocumentChars" in msg["params"]["message"]
    r = await server.ask("completer/debugDocument", {"uri": uri})
    assert r["error"]["code"] == -32602
    line = "y" * (MAX_DOC - 10)                          # one huge line under the limit: completion still works
    await open_doc(server, uri, line)
    r = await server.ask("textDocument/inlineCompletion", {"textDocument": {"uri": uri},
                                                         "position": {"line": 0, "character": len(line)},
                                                         "context": {"triggerKind": 2}}, timeout=120)
    # a ghost text, or (when the prompt cannot be cut below the model's context) a clear error naming the limit
    assert "result" in r or (r["error"]["code"] == -32803 and "exceeds" in r["error"]["message"]), r
    # an edit that would push it over the limit is refused as a whole
    await server.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2},
                                             "contentChanges": [{"range": {"start": {"line": 0, "character": 0},
                                                                           "end": {"line": 0, "character": 0}},
                                                                 "text": "z" * 100}]})
    assert await server_doc(server, uri) == {"text": line, "version": 1}
    log("huge documents", "refused over the limit, served under it")


async def test_cancelled_requests_get_request_cancelled(server):
    await open_doc(server, URI, "def f(x):\n    return ")
    codes = []
    for _ in range(5):
        start = server.mark()
        rid, _ = await server.request("textDocument/inlineCompletion",
                                   {"textDocument": {"uri": URI}, "position": {"line": 1, "character": 11},
                                    "context": {"triggerKind": 2}})
        await server.notify("$/cancelRequest", {"id": rid})
        r = await server.response(rid, start=start)
        codes.append(r["error"]["code"] if "error" in r else "result")
    assert codes.count(-32800) >= 4, codes             # cancelled inside the 20 ms debounce
    log("cancel", f"{codes.count(-32800)}/5 -32800")
    assert (await server.health())["ok"]
