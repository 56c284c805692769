"""The real server over stdio with pytest-lsp's client: ghost text, cancellation, type-through, encodings."""

from __future__ import annotations

import asyncio

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from tests.helpers.pygls_session import edit, inline_params, open_doc, stats, wait_engine_ready

URI = "file:///work/example.py"
PY = "import os\n\n\ndef read_config(path):\n    with open(path) as f:\n        return f.read()\n\n\ndef main():\n    "

pytestmark = pytest.mark.asyncio(loop_scope="module")   # one server per module (conftest)


# cursor positions to try for ghost text (a model may rightly answer nothing at one of them)
CANDIDATES = [(9, 4), (4, 4), (3, 16), (4, 13), (5, 15), (0, 7)]


def code(e: BaseException) -> int | None:
    return getattr(e, "code", None)


async def configure(client, **settings) -> None:
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=settings))
    await stats(client)  # requests are handled in order: the notification has been applied


async def first_nonempty(client, uri, positions):
    """The first (line, character, text) whose inline completion is non-empty (models may legitimately answer
    nothing at a given spot; the test needs ghost text to type through)."""
    for line, ch in positions:
        res = await client.text_document_inline_completion_async(inline_params(uri, line, ch))
        if res.items and res.items[0].insert_text:
            return line, ch, res.items[0].insert_text
    pytest.fail(f"no ghost text at any of {positions}")


async def test_ghost_text_for_python_file(client):
    open_doc(client, URI, PY)
    before = await stats(client)
    res = await client.text_document_inline_completion_async(inline_params(URI, 9, 4))
    assert isinstance(res, types.InlineCompletionList)
    after = await stats(client)
    assert after["server"]["engine_requests"] == before["server"]["engine_requests"] + 1
    assert after["engine"]["generated_tokens"] > before["engine"]["generated_tokens"]
    assert after["engine"]["prompt_tokens"] > before["engine"]["prompt_tokens"]
    line, ch, text = await first_nonempty(client, URI, CANDIDATES)
    res = await client.text_document_inline_completion_async(inline_params(URI, line, ch))
    item = res.items[0]
    assert item.insert_text == text
    assert (item.range.start.line, item.range.start.character) == (line, ch) == (item.range.end.line,
                                                                                   item.range.end.character)


async def test_the_server_runs_the_shipped_house_pair(client):
    """What the end-to-end tests promise: the engine behind the server is the shipped pair, not a stand-in."""
    engine = (await stats(client))["config"]["engine"]
    assert (engine["model"], engine["draft"]) == ("house:v2/target", "house:v2/draft"), engine   # house_options


async def _start_inflight(client, uri, line, ch, msg_id=None):
    """Send an inline completion and wait until its engine request has started."""
    base = (await stats(client))["server"]["engine_requests"]
    fut = asyncio.ensure_future(client.protocol.send_request_async(
        types.TEXT_DOCUMENT_INLINE_COMPLETION, inline_params(uri, line, ch), msg_id=msg_id))
    for _ in range(400):
        s = await stats(client)
        if s["server"]["engine_requests"] > base or fut.done():
            return fut
        await asyncio.sleep(0.005)
    pytest.fail("engine request never started")


async def _cancel_with(client, how) -> tuple[dict, dict]:
    """Start long requests until one is still running when ``how`` strikes; returns stats before/after."""
    await configure(client, maxTokens=400, debounceMs=0, typeThroughCache=False, reuseInFlight=False)
    text = PY
    open_doc(client, URI, text)
    version = 1
    missed = []    # attempts whose engine request ended by itself before the strike reached the server
    for attempt in range(8):
        before = await stats(client)
        fut = await _start_inflight(client, URI, 9, 4, msg_id=f"long-{attempt}")
        if fut.done():  # finished before we could strike: try again
            missed.append("answered before the strike was sent")
            continue
        version += 1
        await how(client, version, f"long-{attempt}")
        try:
            await fut
        except JsonRpcException as e:
            assert code(e) == -32800, e
        else:
            # The model ended its completion (a stop string, end of text) between the check above and the strike
            # reaching the server: answered, nothing left to cancel. A server that never cancels fails every try.
            missed.append("answered: the engine request had ended before the strike")
            continue
        for _ in range(200):  # the abort lands within one engine step
            after = await stats(client)
            if after["engine"]["requests_aborted"] > before["engine"]["requests_aborted"]:
                return before, after
            await asyncio.sleep(0.01)
        # cancelled, but its engine request had already ended (the answer was being written when the strike came)
        missed.append(f"cancelled, but no engine request was running to abort: {after['engine']}")
    pytest.fail(f"no try caught an engine request running: {missed}")


async def test_edit_cancels_inflight_request_and_aborts_engine(client):
    async def type_a_key(client, version, _):
        edit(client, URI, version, (9, 4), (9, 4), "x")

    before, after = await _cancel_with(client, type_a_key)
    assert after["server"]["requests_cancelled"] >= before["server"]["requests_cancelled"] + 1
    assert after["server"]["requests_superseded"] >= before["server"]["requests_superseded"] + 1
    assert after["server"]["inflight"] == 0


async def test_cancel_request_gives_32800_and_aborts_engine(client):
    async def cancel(client, _version, msg_id):
        client.protocol.notify("$/cancelRequest", types.CancelParams(id=msg_id))

    before, after = await _cancel_with(client, cancel)
    assert after["server"]["requests_cancelled"] >= before["server"]["requests_cancelled"] + 1


async def test_newer_request_supersedes_older(client):
    async def newer(client, _version, _):
        newer.result = await client.text_document_inline_completion_async(inline_params(URI, 4, 4))

    await _cancel_with(client, newer)
    assert isinstance(newer.result, types.InlineCompletionList)   # the newer one is answered


async def test_typing_through_ghost_text_uses_no_engine_request(client):
    await configure(client, maxTokens=12)
    open_doc(client, URI, PY)
    line, ch, text = await first_nonempty(client, URI, CANDIDATES)
    before = await stats(client)
    version = 1
    typed = 0
    while typed < min(3, len(text) - 1) and text[typed] != "\n":
        version += 1
        edit(client, URI, version, (line, ch + typed), (line, ch + typed), text[typed])
        typed += 1
        res = await client.text_document_inline_completion_async(inline_params(URI, line, ch + typed))
        assert res.items[0].insert_text == text[typed:]
    after = await stats(client)
    assert typed >= 1
    assert after["server"]["served_from_cache"] == before["server"]["served_from_cache"] + typed
    assert after["server"]["engine_requests"] == before["server"]["engine_requests"]
    assert after["engine"]["requests_started"] == before["engine"]["requests_started"]
    # typing something else leaves the cache: the engine is asked again
    version += 1
    edit(client, URI, version, (line, ch + typed), (line, ch + typed), "\u00a7")
    await client.text_document_inline_completion_async(inline_params(URI, line, ch + typed + 1))
    assert (await stats(client))["server"]["engine_requests"] == after["server"]["engine_requests"] + 1


async def test_utf16_positions_after_emoji_and_cjk(client):
    uri = "file:///work/emoji.py"
    line_text = "greeting = '😀 你好' + na"          # 😀 is 2 UTF-16 units, 你好 one each
    open_doc(client, uri, f"import os\n{line_text}")
    utf16_end = len(line_text.encode("utf-16-le")) // 2
    assert utf16_end == len(line_text) + 1
    await configure(client, maxTokens=6)
    res = await client.text_document_inline_completion_async(inline_params(uri, 1, utf16_end))
    assert isinstance(res, types.InlineCompletionList)
    for item in res.items:
        assert (item.range.start.line, item.range.start.character) == (1, utf16_end)
    # the document the server holds matches ours after an edit addressed in UTF-16 past the emoji
    edit(client, uri, 2, (1, utf16_end), (1, utf16_end), "me")
    s = await stats(client)
    assert s["positionEncoding"] == "utf-16"
    # inside the surrogate pair of the emoji: a clear -32602, and the server keeps serving
    inside = len("greeting = '") + 1
    with pytest.raises(JsonRpcException) as err:
        await client.text_document_inline_completion_async(inline_params(uri, 1, inside))
    assert code(err.value) == -32602 and "surrogate" in str(err.value)
    res = await client.text_document_inline_completion_async(inline_params(uri, 1, utf16_end + 2))
    assert isinstance(res, types.InlineCompletionList)


async def test_bad_positions_and_unknown_documents(client):
    open_doc(client, URI, "x = 1\n")
    with pytest.raises(JsonRpcException) as err:
        await client.text_document_inline_completion_async(inline_params("file:///nope.py", 0, 0))
    assert code(err.value) == -32602 and "not open" in str(err.value)
    with pytest.raises(JsonRpcException) as err:
        await client.text_document_inline_completion_async(inline_params(URI, 5, 0))
    assert code(err.value) == -32602 and "past the end" in str(err.value)
    # a character past the end of a line means the line end (LSP), and the item's range says so
    res = await client.text_document_inline_completion_async(inline_params(URI, 0, 99))
    assert all(i.range.start.character == len("x = 1") for i in res.items)
    # an out-of-order change is refused, reported, and the text stays
    edit(client, URI, 1, (0, 0), (0, 0), "lost?")
    await stats(client)
    assert any("out-of-order" in m.message for m in client.messages)


async def test_completion_fallback_returns_the_same_completion(client):
    open_doc(client, URI, PY)
    line, ch, text = await first_nonempty(client, URI, CANDIDATES)
    res = await client.text_document_completion_async(types.CompletionParams(
        text_document=types.TextDocumentIdentifier(uri=URI), position=types.Position(line=line, character=ch)))
    assert isinstance(res, types.CompletionList) and len(res.items) == 1
    item = res.items[0]
    assert item.text_edit.new_text == text
    assert item.text_edit.range.start == types.Position(line=line, character=ch)


async def test_did_change_configuration(client):
    await configure(client, maxTokens=3, debounceMs=0, typeThroughCache=False)
    s = await stats(client)
    assert s["config"]["maxTokens"] == 3 and s["config"]["typeThroughCache"] is False
    open_doc(client, URI, PY)
    await client.text_document_inline_completion_async(inline_params(URI, 9, 4))
    after = await stats(client)
    assert after["engine"]["generated_tokens"] - s["engine"]["generated_tokens"] <= 3
    # bad settings: reported, previous settings kept
    await configure(client, maxTokens="lots")
    assert (await stats(client))["config"]["maxTokens"] == 3
    assert any("maxTokens" in m.message for m in client.messages)
    # engine settings rebuild the engine (fresh counters), the server keeps answering
    await configure(client, engine={"speculation": "ngram"})
    s = await wait_engine_ready(client)
    assert s["config"]["engine"]["speculation"] == "ngram" and s["engine"]["requests_started"] == 0
    res = await client.text_document_inline_completion_async(inline_params(URI, 9, 4))
    assert isinstance(res, types.InlineCompletionList)
    assert (await stats(client))["engine"]["requests_started"] == 1
