"""Where the files shipped inside the package are, for the modules of every layer that need to recognise them
(``completer.models`` resolves ``house:<name>`` with it, ``completer.prompt`` knows a house model's template by it)."""

from __future__ import annotations

from pathlib import Path

HOUSE_DIR = Path(__file__).parent / "models" / "house"    # the house models (house:<name>)
