"""argparse value types shared by the two command lines, ``completer`` (completer/cli.py) and ``completer-lsp``
(lsp/server.py), so a value is refused with the same message by both."""

from __future__ import annotations

import argparse


def positive_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n
