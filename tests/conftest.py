"""Fixtures every test folder may use: the tiny random-weight pair and engine factories on it and on the house pair.

Their code lives in ``tests.helpers`` (importable by name: pyproject's ``pythonpath`` puts the repository root on
``sys.path``); a folder's own conftest.py keeps only what that folder needs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import tiny_models


@pytest.fixture(scope="session", autouse=True)
def _no_saved_speculation_choice(tmp_path_factory):
    """Engines with speculation="auto" (the default) take what `completer tune` saved on this machine: tests, and
    the servers they start (the environment is inherited), see an empty folder instead, so they run the same
    everywhere (no speculation unless a test sets one)."""
    import os

    os.environ["COMPLETER_TUNE_DIR"] = str(tmp_path_factory.mktemp("tune-choices"))


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory) -> tuple[Path, Path]:
    """(target, draft) folders of the tiny pair, built once per test session."""
    return tiny_models.tiny_pair(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="session")
def tiny_options(tiny_pair) -> dict:
    """``initializationOptions.engine`` for the tiny pair on CPU."""
    return {"model": str(tiny_pair[0]), "draft": str(tiny_pair[1]), "device": "cpu"}


@pytest.fixture(scope="session")
def house_options() -> dict:
    """``initializationOptions.engine`` for the shipped house pair on CPU: what the end-to-end and editor tests run.
    A missing pair fails the test that asks for it (a skip would hide that the shipped models are gone)."""
    missing = tiny_models.house_missing()
    if missing:
        pytest.fail(f"the shipped house pair is incomplete; missing: {', '.join(missing)}")
    return tiny_models.house_options()


@pytest.fixture(scope="session")
def house_tokenizer(house_options):
    """The shipped house tokenizer (fails, like ``house_options``, when the pair is missing)."""
    return tiny_models.house_tokenizer()


@pytest.fixture
def make_engine(tiny_pair):
    """Factory: make_engine(**EngineConfig overrides) on the tiny pair, CPU; closed after the test."""
    factory, close = tiny_models.engine_factory(dict(model=str(tiny_pair[0]), draft=str(tiny_pair[1]), device="cpu"))
    yield factory
    close()


@pytest.fixture
def house_engine():
    """Factory like make_engine, on the shipped house pair."""
    factory, close = tiny_models.engine_factory(tiny_models.house_options())
    yield factory
    close()


@pytest.fixture(scope="session")
def other_vocab_draft(tmp_path_factory) -> Path:
    """A draft whose tokenizer has another vocabulary (speculation with it must be refused)."""
    root = tmp_path_factory.mktemp("othervocab")
    tiny_models.train_tokenizer(root, vocab_size=300)
    return tiny_models.build_model(root / "draft", root, hidden=32, layers=1, seed=5, vocab=300)
