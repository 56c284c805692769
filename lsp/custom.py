"""The server's own requests, for tests, benchmarks and editors:

- ``completer/stats`` -> the lifecycle's counters, the engine's counters, documents, settings (``server.stats``);
- ``completer/health`` -> ``{"ok", "engineReady", "engineError", "engineLoadingS"}`` (seconds the engine has been
  starting, null when it is not starting);
- ``completer/prompt`` ``{textDocument: {uri}, position}`` -> the prompt plan the engine would get there (prompt,
  mode, stop, context, snippets, language, template, promptTokens, maxTokens, indent); no engine request.
"""

from __future__ import annotations

from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams

from completer import pipeline

from .engine_host import EngineUnavailable
from .lifecycle import source

REQUEST_FAILED = -32803


def refusal(message: str) -> JsonRpcException:
    """-32803 for a request the server refuses on purpose (the engine is loading or failed to start, the prompt is
    over the model's context): logged as one line (``lsp.client_errors``), not as a server bug's traceback."""
    e = JsonRpcException(message, code=REQUEST_FAILED)
    e.refusal = True
    return e


def _field(obj: Any, name: str) -> Any:
    """A field of custom-request params (pygls passes them as namespace objects, or dicts)."""
    if isinstance(obj, dict):
        return obj[name]
    return getattr(obj, name)


def stats(ls, params: Any) -> dict:
    return ls.stats()


def health(ls, params: Any) -> dict:
    return {"ok": ls.engine_host.error is None, "engineReady": ls.engine_host.ready,
            "engineError": ls.engine_host.error, "engineLoadingS": ls.engine_host.loading_s}


def position_params(params: Any) -> tuple[Any, types.Position]:
    """``textDocument.uri`` and ``position`` of a custom message's params (completer/prompt,
    completer/didMoveCursor); ValueError saying what is missing or not a number."""
    try:
        uri = _field(_field(params, "textDocument"), "uri")
        pos = _field(params, "position")
        return uri, types.Position(line=int(_field(pos, "line")), character=int(_field(pos, "character")))
    except (KeyError, AttributeError, TypeError, ValueError) as e:
        raise ValueError(str(e)) from None


async def prompt(ls, params: Any) -> dict:
    """The prompt plan the engine would get at a position (no engine request): for tests and debugging."""
    try:
        uri, position = position_params(params)
    except ValueError as e:
        raise JsonRpcInvalidParams(f"completer/prompt needs textDocument.uri and position: {e}") from None
    snap, offset = ls.locate(uri, position)
    try:
        engine = await ls.engine_host.get(ls.config.engine_start_timeout_s)
    except EngineUnavailable as e:
        raise refusal(str(e)) from None
    try:
        plan = pipeline.plan(source(snap), offset, engine, ls.config.settings(),
                             [source(o) for o in ls.other_documents(uri)], ls.documents.trees,
                             ls.context.snippets(uri, position.line))
    except ValueError as e:
        raise JsonRpcException(f"completer/prompt failed: {e}", code=REQUEST_FAILED) from None
    return {"prompt": plan.prompt, "mode": plan.mode, "stop": list(plan.stop), "context": plan.context,
            "snippets": list(plan.snippets), "language": plan.language, "template": plan.template,
            "promptTokens": plan.prompt_tokens, "maxTokens": plan.max_tokens, "indent": plan.indent}


def register(server) -> None:
    server.feature("completer/stats")(stats)
    server.feature("completer/health")(health)
    server.feature("completer/prompt")(prompt)
