"""Reliability fixtures: the tiny random-weight pair (tests/conftest.py) as the engine the language-server processes
run, so that fault, fuzz and security tests are fast on any CPU."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def engine_options(tiny_options) -> dict:
    return tiny_options
