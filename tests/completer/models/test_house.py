"""The shipped house pair is where the package looks for it, and it is what the end-to-end and editor tests run.

An earlier helper computed the house folder relative to its own file, one level too high (outside the repository),
found nothing, and quietly fell back to a tiny random pair: the end-to-end tests never ran the shipped models
their docstrings promised. These tests fail (they do not skip) when the pair cannot be found.
"""

from __future__ import annotations

from completer.models import HOUSE_DIR, resolve_model
from tests.helpers import tiny_models


def test_house_pair_is_shipped_inside_the_package():
    assert tiny_models.house_missing() == [], "the shipped house pair is incomplete"
    import completer

    assert HOUSE_DIR.resolve().is_relative_to(next(iter(completer.__path__)))
    for name in tiny_models.HOUSE_NAMES:
        assert resolve_model(f"house:{name}") == HOUSE_DIR / name


def test_end_to_end_and_editor_tests_run_the_house_pair(house_options):
    assert house_options["model"] == "house:target" and house_options["draft"] == "house:draft"
    for spec in (house_options["model"], house_options["draft"]):
        assert (resolve_model(spec) / "model.safetensors").is_file()
