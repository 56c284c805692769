"""A connection's inbound messages between reading and handling: bounded, and collapsed per document when the
server is behind (issue 13, item 4).

pygls reads a frame and handles it before reading the next, so when the event loop is busy (many clients planning
prompts at once) every stale keystroke's completion request still gets parsed, structured and started in turn. Here
a reader task moves frames into an :class:`Inbox` as fast as they arrive and a handler task hands them to pygls in
order. While a message waits in the inbox:

- a completion request (``textDocument/inlineCompletion`` or ``textDocument/completion``) superseded by a newer one
  for the same document is answered -32800 (RequestCancelled) at once, without any work;
- a ``$/cancelRequest`` for a request still waiting answers that request -32800 and removes it;
- over ``capacity`` waiting requests, a new completion request is answered at once with -32803 "server busy" instead
  of queueing without bound;
- a completion request still waiting ``max_wait_s`` after it was read (the server is that far behind) is answered
  -32803 "server busy" then, by a timer set when it was read, not when the handler reaches it, and is not started
  (issue 13: every message answered, refused or superseded within 1 s; the request lifecycle's ``answerBoundMs``
  counts from its arrival too);
- notifications (``didChange`` above all) are never dropped or reordered: every edit is applied, in order. Past
  ``hard_limit`` waiting messages the reader stops reading (the client's writes block), so memory stays bounded.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

log = logging.getLogger(__name__)

COMPLETIONS = ("textDocument/inlineCompletion", "textDocument/completion")
# when the message being handled was read (time.perf_counter()): set by Inbox.get in the pump's task, so the handler
# task pygls creates for it inherits it; the request lifecycle counts answerBoundMs from it
ARRIVED: contextvars.ContextVar[float | None] = contextvars.ContextVar("completer_inbox_arrived", default=None)
REQUEST_CANCELLED = -32800
REQUEST_FAILED = -32803


@dataclass
class _Waiting:
    body: bytes
    id: Any = None                   # request id (None: a notification, or a message we could not read)
    completion_uri: str | None = None
    arrived: float = 0.0             # time.perf_counter() when it was read
    expiry: asyncio.TimerHandle | None = None   # max_wait_s after arrival: answered busy if still waiting


@dataclass
class InboxStats:
    received: int = 0
    superseded: int = 0              # completion requests answered -32800 before handling (newer one, same document)
    cancelled: int = 0               # requests removed by $/cancelRequest before handling
    busy: int = 0                    # completion requests refused over capacity
    late: int = 0                    # completion requests refused because they waited over max_wait_s
    max_depth: int = 0
    depth: int = 0
    waits: int = field(default=0)    # times the reader paused at hard_limit


class Inbox:
    def __init__(self, reply_error: Callable[[Any, int, str], None], capacity: int = 16, hard_limit: int = 512,
                 max_wait_s: float | None = 0.5, clock: Callable[[], float] = time.perf_counter):
        self._reply_error = reply_error
        self.capacity, self.hard_limit, self.max_wait_s = capacity, hard_limit, max_wait_s
        self._clock = clock
        self._queue: deque[_Waiting] = deque()
        self._ready = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._closed = False
        self.stats = InboxStats()

    def __len__(self) -> int:
        return len(self._queue)

    def put(self, body: bytes) -> None:
        self.stats.received += 1
        item, cancel = _classify(body)
        item.arrived = self._clock()
        if item.id is None and item.completion_uri is None:
            if cancel is not None and self._drop(lambda w: w.id == cancel, "cancelled by $/cancelRequest"):
                self.stats.cancelled += 1
                return
        if item.completion_uri is not None:
            n = self._drop(lambda w: w.completion_uri == item.completion_uri,
                           "superseded by a newer completion request for the same document")
            self.stats.superseded += n
            if sum(1 for w in self._queue if w.id is not None) >= self.capacity:
                self.stats.busy += 1
                self._reply_error(item.id, REQUEST_FAILED,
                                  f"server busy: {self.capacity} requests are waiting on this connection; "
                                  f"the completion was not started (ask again)")
                return
        self._queue.append(item)
        if item.completion_uri is not None and self.max_wait_s is not None:
            try:
                item.expiry = asyncio.get_running_loop().call_later(self.max_wait_s, self._expire, item)
            except RuntimeError:           # no running loop (put from plain code): get() still checks the wait
                pass
        self.stats.depth = len(self._queue)
        self.stats.max_depth = max(self.stats.max_depth, self.stats.depth)
        if len(self._queue) >= self.hard_limit:
            self._room.clear()
        self._ready.set()

    async def room(self) -> None:
        """Wait until the inbox is below ``hard_limit`` (the reader's back-pressure)."""
        if not self._room.is_set():
            self.stats.waits += 1
            await self._room.wait()

    async def get(self) -> bytes | None:
        """The next message in arrival order; None once closed and empty. A completion request that waited over
        ``max_wait_s`` is answered "server busy" here and skipped."""
        while True:
            while not self._queue:
                if self._closed:
                    return None
                self._ready.clear()
                await self._ready.wait()
            item = self._queue.popleft()
            if item.expiry is not None:
                item.expiry.cancel()
            self.stats.depth = len(self._queue)
            if len(self._queue) < self.hard_limit:
                self._room.set()
            waited = self._clock() - item.arrived
            if item.completion_uri is not None and self.max_wait_s is not None and waited > self.max_wait_s:
                self._late(item, waited)
                continue
            ARRIVED.set(item.arrived)
            return item.body

    def close(self) -> None:
        self._closed = True
        self._ready.set()

    def _late(self, item: _Waiting, waited: float) -> None:
        self.stats.late += 1
        self._reply_error(item.id, REQUEST_FAILED,
                          f"server busy: the request waited {waited * 1000:.0f} ms for its turn (over "
                          f"{self.max_wait_s * 1000:.0f} ms); not started (ask again)")

    def _expire(self, item: _Waiting) -> None:
        """``max_wait_s`` after ``item`` arrived: answered busy and removed if it is still waiting."""
        item.expiry = None
        for i, w in enumerate(self._queue):
            if w is item:
                del self._queue[i]
                self.stats.depth = len(self._queue)
                if len(self._queue) < self.hard_limit:
                    self._room.set()
                self._late(item, self._clock() - item.arrived)
                return

    def _drop(self, match: Callable[[_Waiting], bool], why: str) -> int:
        gone = [w for w in self._queue if w.id is not None and match(w)]
        for w in gone:
            if w.expiry is not None:
                w.expiry.cancel()
            self._queue.remove(w)
            self._reply_error(w.id, REQUEST_CANCELLED, f"request {w.id!r} {why}")
        self.stats.depth = len(self._queue)
        if gone and len(self._queue) < self.hard_limit:
            self._room.set()
        return len(gone)


def _classify(body: bytes) -> tuple[_Waiting, Any]:
    """The message as it waits (its id, and the document of a completion request), and the id a ``$/cancelRequest``
    names (None for any other message): one JSON parse for both."""
    try:
        msg = json.loads(body)
    except ValueError:
        return _Waiting(body), None               # pygls answers the parse error in order
    if not isinstance(msg, dict):
        return _Waiting(body), None
    mid = msg.get("id")
    if not isinstance(mid, (int, str)) or isinstance(mid, bool):
        return _Waiting(body), _cancel_target(msg)
    uri = None
    if msg.get("method") in COMPLETIONS:
        params = msg.get("params")
        doc = params.get("textDocument") if isinstance(params, dict) else None
        uri = doc.get("uri") if isinstance(doc, dict) and isinstance(doc.get("uri"), str) else None
    return _Waiting(body, mid, uri), None


def _cancel_target(msg: dict) -> Any:
    if msg.get("method") == "$/cancelRequest" and isinstance(msg.get("params"), dict):
        target = msg["params"].get("id")
        return target if isinstance(target, (int, str)) and not isinstance(target, bool) else None
    return None


async def pump(read: Callable[[], Awaitable[bytes | None]], inbox: Inbox, protocol, stop=None,
               error_handler: Callable[[Exception, type], Any] | None = None) -> None:
    """Read messages with ``read()`` (None: the client is gone) into ``inbox`` while a second task hands them to
    ``protocol`` in order; returns when the client is gone (or ``stop`` is set) and the inbox is handled."""
    from pygls.exceptions import JsonRpcException

    async def reader() -> None:
        try:
            while stop is None or not stop.is_set():
                await inbox.room()
                body = await read()
                if body is None:
                    return
                inbox.put(body)
        finally:
            inbox.close()

    async def handler() -> None:
        while (body := await inbox.get()) is not None:
            if stop is not None and stop.is_set():
                return
            try:
                protocol.handle_message(json.loads(body, object_hook=protocol.structure_message))
            except Exception as exc:
                log.exception("Unable to handle message")
                if error_handler:
                    error_handler(exc, JsonRpcException)

    read_task = asyncio.ensure_future(reader())
    try:
        await handler()
    finally:
        if not read_task.done():
            read_task.cancel()
        try:
            await read_task
        except (asyncio.CancelledError, ConnectionError, asyncio.IncompleteReadError):
            pass


async def content_length(readline: Callable[[], Awaitable[bytes]]) -> int | None:
    """Read one frame's headers (as pygls' ``run_async`` does) and return its ``Content-Length``; None at the end
    of input."""
    length = 0
    while True:
        header = await readline()
        if not header:
            return None
        if not length and header.startswith(b"Content-Length: ") and header.endswith(b"\r\n"):
            digits = header[len(b"Content-Length: "):-2]
            if digits.isdigit():
                length = int(digits)
        if length and not header.strip():
            return length


def frame_reader(reader) -> Callable[[], Awaitable[bytes | None]]:
    """``read()`` for LSP's ``Content-Length`` framing over a pygls-style reader (``readline``/``readexactly``);
    None at the end of input."""
    async def read() -> bytes | None:
        length = await content_length(reader.readline)
        if length is None:
            return None
        return await reader.readexactly(length) or None
    return read
