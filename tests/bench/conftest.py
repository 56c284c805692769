"""Fixtures for the benchmark tests: the repo root on sys.path (for ``bench``), a tiny random-weight model pair."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session")
def tiny_engine(tmp_path_factory) -> dict:
    """Engine options for a tiny random pair (built by the e2e fixture's builder): fast on any CPU."""
    spec = importlib.util.spec_from_file_location("_e2e_conftest_for_bench", ROOT / "tests" / "e2e" / "conftest.py")
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(ROOT / "tests" / "e2e"))
    spec.loader.exec_module(mod)
    target, draft = mod._tiny_pair(tmp_path_factory.mktemp("bench-tiny-pair"))
    return {"model": target, "draft": draft, "device": "cpu"}
