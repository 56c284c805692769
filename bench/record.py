"""What every benchmark records and how it writes it: the machine and its load, and the result as ``NAME.json``,
``NAME.md`` and ``NAME.png`` in one folder (the results' layout: bench/README.md).

One writer, so that each result folder reads the same way and a missing matplotlib (a bare GPU machine) still
writes the numbers and says how to draw the plot later.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Callable


def loadavg() -> str | None:
    """The machine's load average line (``/proc/loadavg``), or None where there is none."""
    try:
        return Path("/proc/loadavg").read_text().strip()
    except OSError:
        return None


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        for ln in Path("/proc/cpuinfo").read_text().splitlines():
            if ln.startswith("model name"):
                return ln.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cores() -> int:
    """The cores this process may run on (its affinity), not all the machine has."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def machine(**extra) -> dict:
    """The machine a result was measured on: CPU, cores, platform, Python, torch (when installed), plus ``extra``."""
    info = {"cpu": cpu_model(), "cores": cores(), "platform": platform.platform(), "python": platform.python_version()}
    try:
        import torch

        info["torch"] = torch.__version__
    except ImportError:
        pass
    return {**info, **extra}


def write(out: Path, name: str, data: dict, markdown: str, plot: Callable[[Path], None] | None = None,
          redraw: str | None = None) -> dict[str, Path]:
    """``out/NAME.json`` (``data``), ``out/NAME.md`` (``markdown``) and, with ``plot`` (which draws into the path it
    is given), ``out/NAME.png``. Without matplotlib the plot is skipped with a line saying how to get it (``redraw``:
    the command that draws it afterwards). Returns the paths written, by kind."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / f"{name}.json", "md": out / f"{name}.md"}
    paths["json"].write_text(json.dumps(data, indent=1, default=str) + "\n")
    paths["md"].write_text(markdown)
    if plot is not None:
        try:
            import matplotlib

            matplotlib.use("Agg")
        except ImportError:
            print("matplotlib is not installed: no plot. To draw it: pip install -e '.[bench]' (or pip install "
                  "matplotlib)" + (f", then {redraw}" if redraw else ""))
        else:
            paths["png"] = out / f"{name}.png"
            plot(paths["png"])
    return paths
