"""Fixtures for the benchmark tests: the repo root on sys.path (for ``bench``), a tiny random-weight model pair."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session")
def tiny_engine(tmp_path_factory) -> dict:
    """Engine options for a tiny random pair (tests/engine_models.py): fast on any CPU."""
    sys.path.insert(0, str(ROOT / "tests"))
    import engine_models

    target, draft = engine_models.tiny_pair(tmp_path_factory.mktemp("bench-tiny-pair"))
    return {"model": target, "draft": draft, "device": "cpu"}
