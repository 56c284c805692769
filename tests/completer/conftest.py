"""Fixtures for the completer tests: a token counter (the shipped house tokenizer's) for the prompt, context and
postprocess tests; the shipped house pair's folder for the model and training tests (a missing pair fails them, see
tests/conftest.py)."""

from __future__ import annotations

import pytest

from completer.models import HOUSE_DIR
from tests.helpers.context_samples import token_counter


@pytest.fixture(scope="session")
def count_tokens(house_tokenizer):
    return token_counter(house_tokenizer)


@pytest.fixture(scope="session")
def house(house_options):
    return HOUSE_DIR
