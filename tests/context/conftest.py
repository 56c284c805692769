"""Fixtures for the context tests: a token counter (the house tokenizer when shipped, else about 3 chars a token)."""

from __future__ import annotations

import pytest

from completer.models import HOUSE_DIR


def _counter():
    path = HOUSE_DIR / "target" / "tokenizer.json"
    if path.is_file():
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(str(path))
        return lambda s: len(tok.encode(s, add_special_tokens=False).ids)
    return lambda s: len(s) // 3


@pytest.fixture(scope="session")
def count_tokens():
    return _counter()


def at_cursor(src: str) -> tuple[str, int]:
    """Split a sample with one "|" marking the cursor into (text, offset)."""
    assert src.count("|") >= 1
    off = src.index("|")
    return src[:off] + src[off + 1:], off
