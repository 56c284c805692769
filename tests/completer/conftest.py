"""Fixtures for the prompt, context and postprocess tests: a token counter (the shipped house tokenizer's)."""

from __future__ import annotations

import pytest

from tests.helpers.context_samples import token_counter


@pytest.fixture(scope="session")
def count_tokens(house_tokenizer):
    return token_counter(house_tokenizer)
