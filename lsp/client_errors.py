"""Client mistakes in the log: one line each, not a Python traceback.

pygls logs every exception a handler raises with ``logger.exception`` -- also the -32602 a server raises on purpose
for a position past the end of a document, and the cattrs exception group of params that do not structure -- so an
editor sending a stale position filled the log with tracebacks that read like server bugs. A :class:`Filter` on the
log handler turns records whose exception is the client's doing into one WARNING line; anything else (a real bug)
keeps its traceback.
"""

from __future__ import annotations

import json
import logging
import re

import cattrs
from cattrs.v import format_exception
from pygls.exceptions import JsonRpcException

# parse error, invalid request, unknown method, invalid params, cancelled by the client, by the server
CLIENT_CODES = {-32700, -32600, -32601, -32602, -32800, -32802}
_EXCEPTION_LINE = re.compile(r"^[\s|]*(\w+(?:Error|Exception): .*)$", re.MULTILINE)


def describe(error: BaseException) -> str:
    """What is wrong with a message's params, one problem per item with where it is (``@ $.params.position``),
    instead of cattrs' "While structuring InlineCompletionParams (1 sub-exception)"."""
    def fmt(exc: BaseException, type_) -> str:
        if isinstance(exc, ValueError) and "should be" in str(exc):   # lsprotocol's range validators say it best
            return str(exc).rstrip(".")
        return format_exception(exc, type_)

    try:
        return "; ".join(cattrs.transform_error(error, format_exception=fmt)) or str(error)
    except Exception:
        return str(error)


def is_client_error(error: BaseException | None) -> bool:
    """Whether ``error`` is what a client sent (bad JSON, bad params, an unknown method, a cancel), not a bug."""
    if isinstance(error, JsonRpcException):
        return getattr(error, "code", None) in CLIENT_CODES
    if isinstance(error, (json.JSONDecodeError, UnicodeDecodeError)):
        return True
    return isinstance(error, cattrs.BaseValidationError)


def one_line(error: BaseException) -> str:
    if isinstance(error, cattrs.BaseValidationError):
        return f"invalid params: {describe(error)}"
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if not isinstance(error, JsonRpcException) else text


class Filter(logging.Filter):
    """On a handler: records carrying a client error lose their traceback and become one WARNING line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "pygls.protocol.json_rpc" and str(record.msg).startswith("Unable to deserialize message"):
            # pygls formats the traceback into the message itself; params that do not structure (ClassValidation-
            # Error) are the client's, answered with -32602 by lsp.server; the last traceback line says why.
            text = record.getMessage()
            if "ClassValidationError" in text:
                causes = _EXCEPTION_LINE.findall(text)      # "ValueError: Position.line should be ..."
                last = causes[-1].strip() if causes else text.splitlines()[0]
                record.msg, record.args = f"client error: unable to structure a message: {last}", ()
                record.levelno, record.levelname = logging.WARNING, "WARNING"
            return True
        error = record.exc_info[1] if record.exc_info else None
        refused = getattr(error, "refusal", False)      # an answer the server gives on purpose (engine loading, a
        if error is not None and (is_client_error(error) or refused):   # prompt over the model's context): no bug
            kind = "refused" if refused else "client error"
            record.msg = f"{kind}: {record.getMessage()}: {one_line(error)}"
            record.args = ()
            record.exc_info = None
            record.exc_text = None
            if record.levelno > logging.WARNING:
                record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True
