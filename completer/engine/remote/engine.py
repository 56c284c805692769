"""The remote backend: the ``Engine`` interface over an OpenAI-compatible ``/v1/completions`` (``vllm serve``).

The language server stays next to the editor and light (tokenizer, tree-sitter, no model); the model runs in an
inference server on another machine (``completer serve`` starts ``vllm serve`` with the project's settings). What
the server gets is what the in-process backends get:

- the prompt as **token ids**, made here by the project's own FIM template and context code with the model's
  ``tokenizer.json`` (vLLM refuses ``suffix``; a text prompt would be re-tokenized by the server, which is not what
  token healing backed up);
- greedy or temperature/top-p sampling with the seed, ``max_tokens``, stop strings (the server cuts the text before
  a stop string and ends with ``finish_reason="stop"``);
- **token healing** (``completer.healing``) through vLLM's ``allowed_token_ids``: each constrained step is a one-token
  request (usually one or two; the server's prefix cache makes their prefills nearly free), then the answer;
- **cancellation**: closing the stream (a newer keystroke, ``abort()``) closes the HTTP response's connection, and
  vLLM's server aborts the request when its client disconnects (the test reads ``vllm:num_requests_running``);
- **affinity** (``affinity.py``): ``X-data-parallel-rank`` from a stable hash of the client and the document when
  ``replicas`` is set, and ``X-Session-Id`` for a router to hash on.

One pooled ``httpx.AsyncClient`` per engine (keep-alive connections reused across keystrokes). The server down or
restarting: each request fails at once with an :class:`EngineError` that names the URL ("inference server
http://... unreachable"), and the next keystroke tries again on a fresh connection: nothing to restart here. The
served model's name and context length are read from ``/v1/models`` on first use and again after a failure (the
server may come back with another ``--max-model-len``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
from typing import Any, AsyncIterator

from ... import healing
from ...prompt import template_for_model
from ..base import Chunk, Counters, EngineError, Request, RequestError, admit, apply_stop, open_model
from ..config import EngineConfig
from ..vllm.engine import race_safe   # a pure function of the request (importing it does not import vLLM)
from . import affinity

log = logging.getLogger(__name__)

# The most allowed_token_ids a healing step sends: vLLM's V2 model runner (GPU, no speculation or EAGLE) keeps at most
# 1024 per request (vllm/v1/worker/gpu/sample/logit_bias.py MAX_NUM_ALLOWED_TOKEN_IDS) and its engine core dies on
# more (completer/engine/vllm/engine.py); the server does not say which runner it uses, so larger sets are not
# constrained: healing stops there and the characters still to re-type go back into the prompt as plain tokens.
MAX_ALLOWED_TOKEN_IDS = 1024


class ServerUnavailable(EngineError):
    """The inference server could not be reached or answered with a server error; the message names its URL.
    Nothing is wrong with the request: the next one tries again."""


def base_url(url: str) -> str:
    """``url`` without a trailing ``/`` or ``/v1`` (the client adds ``/v1/...``)."""
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def completion_body(request: Request, model: str, ids: list[int], *, stream: bool = True,
                    allowed: list[int] | None = None, max_tokens: int | None = None) -> dict:
    """The JSON body of a ``/v1/completions`` request for ``request`` (prompt already token ids). Pure (tested
    without a server). ``allowed``/``max_tokens``: a token-healing step (one token from ``allowed``, no stops)."""
    body: dict[str, Any] = {
        "model": model, "prompt": ids, "max_tokens": request.max_new_tokens if max_tokens is None else max_tokens,
        "temperature": request.temperature, "top_p": 1.0 if request.temperature == 0 else request.top_p,
        "stream": stream, "return_token_ids": True,   # vLLM: each choice carries its token ids
        "skip_special_tokens": True,
    }
    if request.seed is not None:
        body["seed"] = request.seed
    if allowed is None and request.stop:
        body["stop"] = list(request.stop)
    if allowed is not None:
        body["allowed_token_ids"] = allowed
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


class RemoteEngine:
    name = "remote"
    heal_race = True        # token healing raced against the answer (``_heal_race``); False: constrained steps first

    def __init__(self, config: EngineConfig, *, transport: Any = None) -> None:
        if config.backend != "remote":
            raise ValueError(f"RemoteEngine is for backend='remote', got {config.backend!r}")
        try:
            import httpx
        except ImportError as e:
            raise EngineError(f"backend 'remote' needs httpx (pip install httpx): {e}") from e
        self._httpx = httpx
        self.config = config
        self.url = base_url(config.url)
        self.model_path, self.tokenizer = open_model(config.model)     # token ids, FIM template, token healing
        self.n_vocab = self.tokenizer.get_vocab_size()
        self.client_id = config.client_id or affinity.default_client_id()
        headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        t = config.timeout_s
        self._client = httpx.AsyncClient(
            base_url=self.url, headers=headers, transport=transport,
            timeout=httpx.Timeout(t, connect=min(t, 5.0)),        # a dead host fails fast; a slow step may not
            limits=httpx.Limits(max_connections=256, max_keepalive_connections=32, keepalive_expiry=60))
        self._served: str | None = config.served_model
        self.max_model_len: int | None = None          # from /v1/models (vLLM's max_model_len), once known
        self._counters = Counters()
        self._active: dict[str, asyncio.Task] = {}     # request id -> the task reading its stream
        self._aborted: set[str] = set()
        self._background: set[asyncio.Task] = set()   # healing steps a raced answer made unnecessary, finishing
        self._heal_raced = 0                           # healed requests answered by the main request's own tokens
        self._closed = False
        healing.prepare(self.tokenizer)

    # --- Engine protocol ----------------------------------------------------------------------------------
    @functools.cached_property
    def prompt_template(self) -> str:
        return template_for_model(self.model_path)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=True).ids

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def counters(self) -> dict:
        return {**self._counters.snapshot(), "heal_raced": self._heal_raced}

    async def abort(self, request_id: str) -> None:
        task = self._active.get(request_id)
        if task is not None and not task.done():
            self._aborted.add(request_id)
            task.cancel()                  # closes the response: the server sees the client go and aborts

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for task in [*self._active.values(), *self._background]:
            task.cancel()
        await self._client.aclose()

    async def generate(self, request: Request) -> AsyncIterator[Chunk]:
        if self._closed:
            raise EngineError("engine is closed")
        rid = request.request_id
        model = await self._model()
        c = self._counters
        ids = admit(request, closed=self._closed, running=self._active, encode=self.encode, n_vocab=self.n_vocab,
                    positions=self.max_model_len, counters=c)
        headers = affinity.headers_for(self.client_id, request.cache_key, self.config.replicas)
        if request.max_new_tokens == 0:
            c.requests_finished += 1
            yield Chunk(rid, finished=True, finish_reason="length")
            return
        left = request.max_new_tokens
        queue: asyncio.Queue | None = None
        reader: asyncio.Task | None = None
        first = None
        if request.heal:
            try:
                raced = (await self._heal_race(request, ids, model, headers)
                         if self.heal_race and race_safe(request) else None)
                if isinstance(raced, tuple):       # the answer's own first tokens re-typed the removed characters
                    queue, reader, first = raced
                else:
                    heal_ids, extra, tail = await self._heal(request, ids, model, headers, first_step=raced)
            except BaseException:
                c.requests_aborted += 1            # started, so it ends as finished or aborted
                raise
        if request.heal and queue is None:
            c.generated_tokens += len(heal_ids)
            ids = ids + heal_ids + tail
            left -= len(heal_ids)
            extra, stopped = apply_stop(extra, request.stop)
            if stopped or left <= 0:
                c.requests_finished += 1
                yield Chunk(rid, extra, tuple(heal_ids), True, "stop" if stopped else "length")
                return
            if extra or heal_ids:
                yield Chunk(rid, extra, tuple(heal_ids))
        if queue is None or reader is None:
            body = completion_body(request, model, ids, max_tokens=left)
            queue = asyncio.Queue()
            reader = asyncio.get_running_loop().create_task(self._read(body, headers, queue), name=f"remote-{rid}")
        self._active[rid] = reader
        generated, done = 0, False
        try:
            while True:
                item, first = (first, None) if first is not None else (await self._next(queue, reader, rid), None)
                if item is None:                                   # aborted through abort()
                    done = True
                    c.requests_aborted += 1
                    c.wasted_tokens += generated
                    yield Chunk(rid, finished=True, finish_reason="abort")
                    return
                text, new, reason = item
                generated += len(new)
                c.generated_tokens += len(new)
                if reason is not None:
                    done = True
                    reason = reason if reason in ("stop", "length") else "abort"
                    if reason == "abort":
                        c.requests_aborted += 1
                        c.wasted_tokens += generated
                    else:
                        c.requests_finished += 1
                    yield Chunk(rid, text, new, True, reason)
                    return
                if text or new:
                    yield Chunk(rid, text, new)
        except BaseException:
            if not done:
                c.requests_aborted += 1
                c.wasted_tokens += generated
            raise
        finally:
            self._active.pop(rid, None)
            self._aborted.discard(rid)
            if not reader.done() and not done:
                reader.cancel()                # closing the response tells the server to abort the request
            with contextlib.suppress(BaseException):
                await reader                   # finished: it reads the usage event and [DONE], the connection is reused

    # --- HTTP ---------------------------------------------------------------------------------------------
    async def _next(self, queue: asyncio.Queue, reader: asyncio.Task, rid: str):
        """The next parsed delta; None when the request was aborted (deltas the reader had queued before the abort
        are dropped: after abort() only the abort chunk comes); the reader's error raised."""
        if rid in self._aborted:
            return None
        item = await queue.get()
        if isinstance(item, BaseException):
            if isinstance(item, asyncio.CancelledError) and rid in self._aborted:
                return None
            raise item
        return item

    async def _read(self, body: dict, headers: dict, queue: asyncio.Queue) -> None:
        """Stream ``body``'s completion into ``queue``: (text, token ids, finish_reason) per event, or the exception
        that ended it (CancelledError when cancelled: abort, or the consumer went away). Reads to the end (``[DONE]``)
        after the finished event, so that the connection goes back to the pool."""
        try:
            async with self._client.stream("POST", "/v1/completions", json=body, headers=headers) as resp:
                if resp.status_code != 200:
                    await resp.aread()
                    raise self._http_error(resp)
                finished = False
                async for line in resp.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    event = json.loads(data)
                    if "error" in event and not event.get("choices"):
                        raise self._error_event(event)
                    self._counters.cached_prompt_tokens += _cached_tokens(event.get("usage"))   # the last event
                    for choice in event.get("choices") or ():
                        reason = choice.get("finish_reason")
                        finished = finished or reason is not None
                        queue.put_nowait((choice.get("text") or "", tuple(choice.get("token_ids") or ()), reason))
                if not finished:
                    raise ServerUnavailable(f"inference server {self.url} ended the stream before the request "
                                            f"finished (server restarting?)")
        except asyncio.CancelledError as e:
            queue.put_nowait(e)
            raise
        except EngineError as e:
            queue.put_nowait(e)
        except self._httpx.HTTPError as e:
            queue.put_nowait(self._transport_error(e))
        except Exception as e:  # noqa: BLE001 -- a malformed event: the server speaks another protocol
            queue.put_nowait(EngineError(f"inference server {self.url}: unexpected response "
                                         f"({type(e).__name__}: {e})"))

    async def _post(self, body: dict, headers: dict) -> dict:
        """A non-streaming ``/v1/completions`` request (a token-healing step)."""
        try:
            resp = await self._client.post("/v1/completions", json=body, headers=headers)
        except self._httpx.HTTPError as e:
            raise self._transport_error(e) from None
        if resp.status_code != 200:
            raise self._http_error(resp)
        return resp.json()

    async def _model(self) -> str:
        """The served model's name (``served_model``, else the first of ``/v1/models``); reads its context length
        (vLLM's ``max_model_len``) too. Cached until a request fails."""
        if self._served is not None and self.max_model_len is not None:
            return self._served
        try:
            resp = await self._client.get("/v1/models")
        except self._httpx.HTTPError as e:
            raise self._transport_error(e) from None
        if resp.status_code != 200:
            raise self._http_error(resp)
        models = resp.json().get("data") or []
        if not models:
            raise EngineError(f"inference server {self.url} serves no model (/v1/models is empty)")
        chosen = next((m for m in models if m.get("id") == self._served), None) if self._served else models[0]
        if chosen is None:
            raise EngineError(f"inference server {self.url} does not serve {self._served!r}; it serves "
                              f"{[m.get('id') for m in models]}")
        self._served = chosen["id"]
        self.max_model_len = chosen.get("max_model_len") or _config_positions(self.model_path)
        return self._served

    def _forget_server(self) -> None:
        """After a failure: read /v1/models again next time (the server may be back with other settings)."""
        self.max_model_len = None
        if self.config.served_model is None:
            self._served = None

    def _transport_error(self, e: Exception) -> EngineError:
        self._forget_server()
        httpx = self._httpx
        if isinstance(e, (httpx.ConnectError, httpx.ConnectTimeout)):
            return ServerUnavailable(f"inference server {self.url} unreachable ({type(e).__name__}: {e or 'no answer'});"
                                     f" is `completer serve` / `vllm serve` running there?")
        if isinstance(e, httpx.TimeoutException):
            return ServerUnavailable(f"inference server {self.url} did not answer within {self.config.timeout_s:g} s "
                                     f"({type(e).__name__})")
        return ServerUnavailable(f"connection to inference server {self.url} lost ({type(e).__name__}: {e})")

    def _http_error(self, resp) -> EngineError:
        try:
            detail = resp.json()
            detail = (detail.get("error") or {}).get("message") if isinstance(detail.get("error"), dict) else \
                detail.get("message") or detail.get("detail") or detail
        except Exception:  # noqa: BLE001 -- not JSON
            detail = resp.text[:300]
        if resp.status_code in (400, 422):
            log.warning("inference server %s refused a request (HTTP %d): %s", self.url, resp.status_code, detail)
            return RequestError(f"inference server {self.url} refused the request: {detail}")
        self._forget_server()
        if resp.status_code == 404:
            return EngineError(f"inference server {self.url}: {detail} (HTTP 404; served_model={self._served!r}?)")
        if resp.status_code in (401, 403):
            return EngineError(f"inference server {self.url} refused the API key (HTTP {resp.status_code}): {detail}")
        return ServerUnavailable(f"inference server {self.url} failed (HTTP {resp.status_code}): {detail}")

    def _error_event(self, event: dict) -> EngineError:
        err = event["error"]
        msg = err.get("message", err) if isinstance(err, dict) else err
        code = err.get("code") if isinstance(err, dict) else None
        if code in (400, 422):
            return RequestError(f"inference server {self.url} refused the request: {msg}")
        return EngineError(f"inference server {self.url} failed the request: {msg}")

    # --- token healing ------------------------------------------------------------------------------------
    async def _heal_race(self, request: Request, ids: list[int], model: str, headers: dict):
        """Token healing in one round trip when the model agrees with what was typed (as ``VLLMEngine._heal_race``):
        the answer's stream from the backed-up prompt and the first constrained step start together. When the
        answer's first tokens re-type the removed characters, each allowed at its step, they are what the
        constrained steps would pick (greedy), so the answer goes on: returns (its queue, its reader task, its events
        so far as one, the re-typed characters cut). Otherwise the answer is closed (the server aborts it) and the
        constrained step's token is returned (``int``), or None when no step could be raced."""
        allowed = healing.allowed_tokens(self.tokenizer, request.heal, self.n_vocab)
        if not allowed or len(allowed) > MAX_ALLOWED_TOKEN_IDS:
            return None
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        body = completion_body(request, model, ids)
        reader = loop.create_task(self._read(body, headers, queue), name=f"remote-{request.request_id}-race")
        step = loop.create_task(self._post(completion_body(request, model, ids, stream=False, allowed=sorted(allowed),
                                                           max_tokens=1), headers))
        kept = False
        try:
            text, toks, reason = "", (), None
            rest, n, agrees = request.heal, 0, True
            while agrees and rest and reason is None:   # the answer's first events, while they re-type the heal
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                text, toks, reason = text + item[0], toks + item[1], item[2]
                for t in item[1]:                   # the healing steps these tokens answer, while they do
                    if t not in healing.allowed_tokens(self.tokenizer, rest, self.n_vocab):
                        agrees = False
                        break
                    rest, n = healing.advance(rest, self.tokenizer.decode([t], skip_special_tokens=False)), n + 1
                    if not rest:
                        break
            if agrees and n and not rest and text.startswith(request.heal):
                kept = True
                self._heal_raced += 1
                return queue, reader, (text[len(request.heal):], toks, reason)
            self._counters.wasted_tokens += len(toks)
            got = ((await step).get("choices") or [{}])[0].get("token_ids") or []
            return int(got[0]) if got else None
        finally:
            if not kept:
                reader.cancel()                     # closes the answer's stream: the server aborts it
                with contextlib.suppress(BaseException):
                    await reader
            if not step.done():                     # one token, nearly done: let it end and free its connection
                self._background.add(step)
                step.add_done_callback(self._background.discard)
                step.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _heal(self, request: Request, ids: list[int], model: str, headers: dict,
                    first_step: int | None = None) -> tuple[list[int], str, list[int]]:
        """Token healing on the server (as ``VLLMEngine._heal``): (the healing token ids, the text they add after
        ``request.heal``, prompt ids to append after them). Each step is a one-token request with vLLM's
        ``allowed_token_ids``; a step whose allowed set is over MAX_ALLOWED_TOKEN_IDS is not constrained: the
        characters still to re-type go back into the prompt as plain tokens."""
        left, new, text = request.heal, [], ""
        if first_step is not None:                  # the first step's token, taken already (``_heal_race``)
            piece = self.tokenizer.decode([first_step], skip_special_tokens=False)
            new, text, left = [first_step], piece, healing.advance(left, piece)
        while left and len(new) < request.max_new_tokens:
            allowed = healing.allowed_tokens(self.tokenizer, left, self.n_vocab)
            if not allowed:
                break
            if len(allowed) > MAX_ALLOWED_TOKEN_IDS:
                return new, "", self.tokenizer.encode(left, add_special_tokens=False).ids
            body = completion_body(request, model, ids + new, stream=False, allowed=sorted(allowed), max_tokens=1)
            out = await self._post(body, headers)
            choice = (out.get("choices") or [{}])[0]
            got = list(choice.get("token_ids") or ())
            if not got:
                break
            piece = self.tokenizer.decode(got[:1], skip_special_tokens=False)
            new.append(got[0])
            text += piece
            left = healing.advance(left, piece)
        return new, healing.strip_healed(text, request.heal) or "", []


def _cached_tokens(usage: dict | None) -> int:
    details = (usage or {}).get("prompt_tokens_details") or {}
    return int(details.get("cached_tokens") or 0)


def _config_positions(folder) -> int | None:
    try:
        return int(json.loads((folder / "config.json").read_text()).get("max_position_embeddings") or 0) or None
    except (OSError, ValueError):
        return None
