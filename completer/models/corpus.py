"""Training corpus: Python source that exists on every machine, with a held-out split by file.

Roots: the running interpreter's standard library and its installed packages (site-packages). Files are deduplicated
by content. A file is *held out* when a stable hash of its path relative to its root falls in the lowest
``HELDOUT_PERCENT`` buckets, so ``asyncio/base_events.py`` is held out on every machine and Python version, and
training never sees it; the typing-trace benchmark draws its files from the held-out split.

Public API: ``iter_files(split)`` yields ``(relpath, path)``; ``read_source(path)`` returns the text or None;
``is_heldout(relpath)``.
"""

from __future__ import annotations

import hashlib
import site
import sys
import sysconfig
from pathlib import Path
from typing import Iterator

HELDOUT_PERCENT = 5
MIN_BYTES, MAX_BYTES = 200, 256 * 1024
SKIP_PARTS = {"__pycache__", "node_modules", ".git"}


def roots() -> list[Path]:
    paths = [sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    try:
        paths += site.getsitepackages()
    except AttributeError:  # some virtualenvs
        pass
    out: list[Path] = []
    for p in paths:
        p = Path(p).resolve()
        if p.is_dir() and p not in out:
            out.append(p)
    return out


def is_heldout(relpath: str) -> bool:
    h = int(hashlib.sha1(relpath.encode()).hexdigest()[:8], 16)
    return h % 100 < HELDOUT_PERCENT


def read_source(path: Path) -> str | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if not MIN_BYTES <= len(data) <= MAX_BYTES or b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def iter_files(split: str = "train") -> Iterator[tuple[str, Path]]:
    """Deduplicated ``(relpath, path)`` of one split ("train", "heldout" or "all"), in a deterministic order."""
    if split not in ("train", "heldout", "all"):
        raise ValueError(f"split must be train, heldout or all, got {split!r}")
    rs = roots()
    seen: set[str] = set()
    for root in rs:
        nested = [r for r in rs if r != root and root in r.parents]    # site-packages inside the stdlib dir
        for path in sorted(root.rglob("*.py")):
            if SKIP_PARTS.intersection(path.parts) or any(n in path.parents for n in nested):
                continue
            rel = path.relative_to(root).as_posix()
            if split != "all" and is_heldout(rel) != (split == "heldout"):
                continue
            try:
                data = path.read_bytes()
            except OSError:
                continue
            digest = hashlib.sha1(data).hexdigest()
            if digest in seen:
                continue
            seen.add(digest)
            yield rel, path


def iter_texts(split: str = "train", max_bytes: int | None = None) -> Iterator[tuple[str, str]]:
    """``(relpath, text)`` of readable files of ``split``, stopping after ``max_bytes`` of text."""
    total = 0
    for rel, path in iter_files(split):
        text = read_source(path)
        if text is None:
            continue
        yield rel, text
        total += len(text)
        if max_bytes is not None and total >= max_bytes:
            return


if __name__ == "__main__":  # python -m completer.models.corpus [split]
    split = sys.argv[1] if len(sys.argv) > 1 else "heldout"
    n = size = 0
    for rel, text in iter_texts(split):
        n, size = n + 1, size + len(text)
    print(f"{split}: {n} files, {size / 1e6:.1f} MB of text from {', '.join(map(str, roots()))}")
