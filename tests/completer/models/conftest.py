import pytest

from completer.models import HOUSE_DIR


@pytest.fixture(scope="session")
def house():
    if not (HOUSE_DIR / "target" / "config.json").is_file():
        pytest.skip("no shipped house pair in completer/models/house")
    return HOUSE_DIR
