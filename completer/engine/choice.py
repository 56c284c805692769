"""``speculation="auto"`` (the default): the speculation setting measured fastest for these models on this machine.

Whether speculation pays depends on the hardware and the models (on this project's 2-core CPU the house draft made
the live replay slower than no speculation, ``bench/results/replay-21a8ce7``; on the H200 the house ``draft_model``
is 0.5x of none while an EAGLE-3 drafter at 7B is expected ~2x), so the engine does not hope: ``completer tune``
measures each method and k and saves the winner under the cache folder, keyed by what it measured (backend, target,
draft, drafter, device); an engine with ``speculation="auto"`` takes that saved setting, and with nothing measured
runs without speculation, which is never slower than none.

Pure functions of the config and the files; each backend's engine calls :func:`resolve` as it is built.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import replace
from pathlib import Path

from .config import EngineConfig

log = logging.getLogger(__name__)

AUTO = "auto"
FALLBACK = "none"          # nothing measured for these models here: no speculation (never slower than none)
# the settings a saved choice sets (the drafter: a DFlash winner's folder, measured beside the shipped EAGLE-3 one)
CHOSEN = ("speculation", "num_speculative_tokens", "drafter")


def choices_dir() -> Path:
    """Where ``completer tune`` saves its choices: ``$COMPLETER_TUNE_DIR``, else ``tune`` in the cache folder
    (``$COMPLETER_CACHE``, else ``~/.cache/completer``)."""
    if os.environ.get("COMPLETER_TUNE_DIR"):
        return Path(os.environ["COMPLETER_TUNE_DIR"])
    from ..models.gguf import cache_root          # the cache's root is the GGUF cache's parent

    return cache_root().parent / "tune"


def measured_for(config: EngineConfig) -> dict:
    """What a tune measurement is valid for: the backend, the models and the device of ``config``."""
    return {"backend": config.backend, "model": config.model, "draft": config.draft,
            "drafter": config.drafter if config.backend == "vllm" else None, "device": config.device}


def choice_path(config: EngineConfig) -> Path:
    key = json.dumps(measured_for(config), sort_keys=True)
    return choices_dir() / f"{config.backend}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def saved(config: EngineConfig) -> dict | None:
    """The saved ``completer tune`` result for ``config``'s models here, with the settings it sets under
    ``"chosen"``, or None (none saved, or unreadable: a warning names the file, and the engine runs as if nothing
    were measured)."""
    path = choice_path(config)
    if not path.is_file():
        return None
    try:
        result = json.loads(path.read_text())
        if result.get("measured_for") != measured_for(config):
            raise ValueError("it was measured for other settings")
        chosen = {k: result["settings"][k] for k in CHOSEN if k in result["settings"]}
        EngineConfig(**{**measured_for(config), **chosen})     # a setting this version refuses: ignored
        return {**result, "chosen": chosen}
    except (OSError, ValueError, KeyError, TypeError) as e:
        log.warning("ignoring the saved speculation choice %s (%s); run `completer tune` again", path, e)
        return None


def resolve(config: EngineConfig) -> tuple[EngineConfig, str]:
    """``config`` with a concrete speculation setting, and why it is that one. Anything but ``"auto"`` is kept."""
    if config.speculation != AUTO:
        return config, "set"
    result = saved(config)
    if result is None:
        return replace(config, speculation=FALLBACK), "auto: nothing measured here (run `completer tune`)"
    chosen = result["chosen"]
    return (replace(config, **chosen),
            f"auto: {result.get('winner', chosen['speculation'])} measured fastest by `completer tune` on "
            f"{result.get('date', '?')} ({choice_path(config)})")
