"""Shared test settings. Each area keeps its own fixtures in tests/<area>/conftest.py."""
