"""``python -m completer``: the ``completer`` command (complete, train, tune, train-drafter)."""

import sys

from .cli import main

sys.exit(main())
