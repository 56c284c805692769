"""Training corpus: Python source that exists on every machine, with a held-out split by file.

Roots: the running interpreter's standard library and its installed packages (site-packages). Files are deduplicated
by content. A file is *held out* when a stable hash of its path relative to its root falls in the lowest
``HELDOUT_PERCENT`` buckets, so ``asyncio/base_events.py`` is held out on every machine and Python version, and
training never sees it; the typing-trace benchmark draws its files from the held-out split.

Paths inside a site-/dist-packages folder are taken relative to the innermost one (``attr/_cmp.py`` whether it sits
in a virtualenv or in the system Python's packages), and held-out files whose content also occurs in the train split
(vendored copies) are dropped from the held-out split.

Public API: ``iter_files(split)`` yields ``(relpath, path)``; ``iter_texts(split, max_bytes)`` yields
``(relpath, text)`` of readable files; ``read_source(path)`` returns the text or None; ``is_heldout(relpath)``.
"""

from __future__ import annotations

import hashlib
import site
import sys
import sysconfig
from functools import lru_cache
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


PACKAGE_DIRS = ("site-packages", "dist-packages")


def relative_path(path: Path, root: Path) -> str:
    """``path`` relative to ``root``, or to its innermost site-/dist-packages folder when it has one (so a package
    installed both system-wide and in a virtualenv gets the same relpath, hence the same split)."""
    parts = path.relative_to(root).parts
    cut = max((i + 1 for i, part in enumerate(parts[:-1]) if part in PACKAGE_DIRS), default=0)
    return "/".join(parts[cut:])


@lru_cache(maxsize=1)
def _scan() -> tuple[tuple[str, Path, str, bool], ...]:
    """Every candidate file once: (relpath, path, content sha1, held out by path), deterministic order."""
    out = []
    seen_paths: set[Path] = set()
    for root in roots():
        for path in sorted(root.rglob("*.py")):
            if SKIP_PARTS.intersection(path.parts):
                continue
            real = path.resolve()
            if real in seen_paths:
                continue
            seen_paths.add(real)
            try:
                data = path.read_bytes()
            except OSError:
                continue
            rel = relative_path(path, root)
            out.append((rel, path, hashlib.sha1(data).hexdigest(), is_heldout(rel)))
    return tuple(out)


def iter_files(split: str = "train") -> Iterator[tuple[str, Path]]:
    """Deduplicated ``(relpath, path)`` of one split ("train", "heldout" or "all"), in a deterministic order.

    A held-out file whose content also occurs under a train path (vendored copies, the same package in two
    site-packages) is dropped from the held-out split, so held-out text is never trained on."""
    if split not in ("train", "heldout", "all"):
        raise ValueError(f"split must be train, heldout or all, got {split!r}")
    files = _scan()
    train_digests = {d for _, _, d, h in files if not h} if split == "heldout" else set()
    seen: set[str] = set()
    for rel, path, digest, held in files:
        if split != "all" and held != (split == "heldout"):
            continue
        if digest in seen or digest in train_digests:
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
