"""Fixtures for the context tests: a token counter (the house tokenizer when shipped, else about 3 chars a token)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from context_samples import token_counter  # noqa: E402


@pytest.fixture(scope="session")
def count_tokens():
    return token_counter()
