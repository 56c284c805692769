"""The shipped house pair's folder for the model tests; a missing pair fails them (see tests/conftest.py)."""

import pytest

from completer.models import HOUSE_DIR


@pytest.fixture(scope="session")
def house(house_options):
    return HOUSE_DIR
