"""The connection's inbox (lsp.inbox): stale completion requests collapsed per document, $/cancelRequest of a
waiting request, "busy" over capacity, edits never dropped or reordered, and the pump handing messages over in order.
"""

from __future__ import annotations

import asyncio
import json

from lsp.client import frame
from lsp.inbox import REQUEST_CANCELLED, REQUEST_FAILED, Inbox, frame_reader, pump


def msg(method: str, params: dict, id=None) -> bytes:
    m = {"jsonrpc": "2.0", "method": method, "params": params}
    if id is not None:
        m["id"] = id
    return json.dumps(m).encode()


def inline(id, uri="file:///a.py", line=0):
    return msg("textDocument/inlineCompletion",
               {"textDocument": {"uri": uri}, "position": {"line": line, "character": 0}}, id)


def change(version, uri="file:///a.py", text="x"):
    return msg("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                          "contentChanges": [{"text": text}]})


def make(capacity=16):
    replies: list[tuple] = []
    return Inbox(lambda i, code, text: replies.append((i, code, text)), capacity=capacity), replies


async def drain(inbox: Inbox) -> list[dict]:
    inbox.close()
    out = []
    while (b := await inbox.get()) is not None:
        out.append(json.loads(b))
    return out


async def test_a_newer_completion_request_supersedes_the_waiting_one_of_the_same_document():
    inbox, replies = make()
    for i, body in enumerate([inline(1), change(2), inline(2), inline(3, uri="file:///b.py"), change(3),
                              inline(4)]):
        inbox.put(body)
    handled = await drain(inbox)
    assert [(m.get("id"), m["method"]) for m in handled] == [
        (None, "textDocument/didChange"), (3, "textDocument/inlineCompletion"), (None, "textDocument/didChange"),
        (4, "textDocument/inlineCompletion")]
    assert [(i, code) for i, code, _ in replies] == [(1, REQUEST_CANCELLED), (2, REQUEST_CANCELLED)]
    assert inbox.stats.superseded == 2 and inbox.stats.received == 6


async def test_cancel_request_removes_a_waiting_request_and_is_answered():
    inbox, replies = make()
    inbox.put(inline(7))
    inbox.put(msg("$/cancelRequest", {"id": 7}))
    inbox.put(msg("$/cancelRequest", {"id": 99}))          # not waiting here: goes to pygls as usual
    handled = await drain(inbox)
    assert [m["method"] for m in handled] == ["$/cancelRequest"]
    assert replies[0][:2] == (7, REQUEST_CANCELLED) and inbox.stats.cancelled == 1


async def test_over_capacity_a_completion_is_refused_as_busy_but_edits_are_kept():
    inbox, replies = make(capacity=2)
    inbox.put(inline(1, uri="file:///a.py"))
    inbox.put(inline(2, uri="file:///b.py"))
    inbox.put(change(2, uri="file:///c.py"))
    inbox.put(inline(3, uri="file:///c.py"))              # a third waiting request: busy
    for v in range(3, 40):
        inbox.put(change(v, uri="file:///c.py", text=str(v)))
    handled = await drain(inbox)
    assert replies == [(3, REQUEST_FAILED, replies[0][2])] and "server busy" in replies[0][2]
    edits = [m["params"]["textDocument"]["version"] for m in handled if m["method"] == "textDocument/didChange"]
    assert edits == list(range(2, 40))                    # every edit, in order
    assert inbox.stats.busy == 1


async def test_pump_hands_frames_to_the_protocol_in_order_and_stops_at_end_of_input():
    frames = [inline(1), change(2), inline(2)]
    data = b"".join(frame(f) for f in frames)
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()

    class Protocol:
        def __init__(self):
            self.seen = []

        def structure_message(self, d):
            return d

        def handle_message(self, m):
            self.seen.append((m.get("id"), m["method"]))

    inbox, replies = make()
    p = Protocol()
    await pump(frame_reader(reader), inbox, p)
    # all three frames were buffered: the reader put them before the handler ran, so request 1 was superseded
    assert p.seen == [(None, "textDocument/didChange"), (2, "textDocument/inlineCompletion")]
    assert replies[0][:2] == (1, REQUEST_CANCELLED)


async def test_a_completion_request_that_waited_too_long_is_busy_and_edits_still_go_through():
    now = [0.0]
    replies: list[tuple] = []
    inbox = Inbox(lambda i, code, text: replies.append((i, code, text)), max_wait_s=0.5, clock=lambda: now[0])
    inbox.put(inline(1))
    inbox.put(change(2))
    inbox.put(inline(2, uri="file:///b.py"))
    now[0] = 0.6                                  # the server fell 600 ms behind
    inbox.put(inline(3, uri="file:///c.py"))      # just arrived: handled
    handled = await drain(inbox)
    assert [(m.get("id"), m["method"]) for m in handled] == [
        (None, "textDocument/didChange"), (3, "textDocument/inlineCompletion")]
    assert [(i, code) for i, code, _ in replies] == [(1, REQUEST_FAILED), (2, REQUEST_FAILED)]
    assert "server busy" in replies[0][2] and inbox.stats.late == 2


async def test_the_handler_task_sees_when_its_message_arrived():
    from lsp.inbox import ARRIVED

    now = [5.0]
    inbox = Inbox(lambda *a: None, clock=lambda: now[0])
    inbox.put(inline(1))
    now[0] = 5.2
    assert await inbox.get() is not None
    seen = await asyncio.get_running_loop().create_task(asyncio.sleep(0, ARRIVED.get()))   # a task made now
    assert seen == 5.0


async def test_a_waiting_completion_is_answered_busy_at_its_deadline_even_if_the_handler_never_comes():
    """Issue 13: the "busy" answer for a request still waiting max_wait_s after it was read comes from a timer set
    on arrival, not from the handler reaching it (a handler behind other messages would answer late); the edit
    waiting with it is kept."""
    replies: list[tuple] = []
    inbox = Inbox(lambda i, code, text: replies.append((i, code, text)), max_wait_s=0.05)
    inbox.put(inline(1))
    inbox.put(change(2))
    inbox.put(inline(2, uri="file:///b.py"))
    taken = await inbox.get()                     # the didChange's turn never comes before the deadline
    assert json.loads(taken)["id"] == 1           # request 1 was handed over in time: its answer is the handler's
    await asyncio.sleep(0.2)
    assert [(i, code) for i, code, _ in replies] == [(2, REQUEST_FAILED)]
    assert "server busy" in replies[0][2] and inbox.stats.late == 1 and len(inbox) == 1
    handled = await drain(inbox)
    assert [m["method"] for m in handled] == ["textDocument/didChange"]
