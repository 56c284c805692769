"""Fixtures for the prompt, context and postprocess tests: a token counter (the house tokenizer when shipped, else
about 3 characters a token)."""

from __future__ import annotations

import pytest

from tests.helpers.context_samples import token_counter


@pytest.fixture(scope="session")
def count_tokens():
    return token_counter()
