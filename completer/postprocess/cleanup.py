"""Filters on the raw text: model end tokens, line ends, trailing whitespace."""

from __future__ import annotations

from completer.prompt import ALL_END_TOKENS, END_TOKENS

from .context import Context


def cut_at_end_token(text: str, ctx: Context) -> str:
    """End-of-text / file-separator tokens the model family emits end the completion (the engine may have been
    asked to stop on EOS only); a template without a list of its own is cut at every family's."""
    for end in END_TOKENS.get(ctx.template, ALL_END_TOKENS):
        cut = text.find(end)
        if cut >= 0:
            text = text[:cut]
    return text


def normalize_newlines(text: str, ctx: Context) -> str:
    """Filters work on ``\\n``; ``restore_crlf`` puts the document's line ends back at the end."""
    return text.replace("\r\n", "\n")


def strip_trailing_whitespace(text: str, ctx: Context) -> str:
    """Trailing spaces and blank lines are nothing the user wants to accept; whitespace alone is no completion."""
    text = text.rstrip()
    return text if text.strip() else ""


EMPTY_COMMENTS = frozenset({"#", "//", "///", "//!", "/*", "/**", "*", "--"})


def drop_empty_comment(text: str, ctx: Context) -> str:
    """A comment marker with nothing after it (``#``, ``//``, ``///``) is no completion: accepting it gives the
    user one more thing to type or delete (a small model on a blank line often writes just that and stops)."""
    return "" if text.strip() in EMPTY_COMMENTS else text


def restore_crlf(text: str, ctx: Context) -> str:
    """CRLF documents get CRLF ghost text."""
    return text.replace("\n", "\r\n") if ctx.crlf else text
