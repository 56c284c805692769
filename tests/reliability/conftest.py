"""Reliability fixtures: a tiny random-weight model pair (built with the engine tests' builders, loaded by path since
tests run with --import-mode=importlib) and real language-server processes over stdio and websocket."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).parent))


def _engine_builders():
    spec = importlib.util.spec_from_file_location("_engine_conftest", ROOT / "tests" / "engine" / "conftest.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory) -> tuple[Path, Path]:
    b = _engine_builders()
    root = tmp_path_factory.mktemp("tiny")
    b.train_tokenizer(root)
    target = b.build_model(root / "target", root, hidden=64, layers=2, seed=1)
    draft = b.build_draft(root / "draft", target, root)
    return target, draft


@pytest.fixture(scope="session")
def engine_options(tiny_pair) -> dict:
    return {"model": str(tiny_pair[0]), "draft": str(tiny_pair[1]), "device": "cpu"}
