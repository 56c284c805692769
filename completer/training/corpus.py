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
import json
import platform
import random
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


# --- the v2 corpus: several languages, from a committed manifest, carried as an archive --------------------------------
MANIFEST = Path(__file__).with_name("corpus_manifest.json")
QUALITY_MANIFEST = Path(__file__).resolve().parents[2] / "bench" / "quality_manifest.json"


def load_manifest(path: str | Path = MANIFEST) -> dict:
    return json.loads(Path(path).read_text())


def _order(relpath: str) -> str:
    return hashlib.sha1(b"order:" + relpath.encode()).hexdigest()


def source_roots(source: dict) -> list[tuple[Path, bool]]:
    """(folder, is_python) for each root of a manifest source: ``python:stdlib`` / ``python:site-packages`` are the
    running interpreter's (as v1), other roots are absolute folders (missing ones are skipped)."""
    out: list[tuple[Path, bool]] = []
    for r in source["roots"]:
        if r == "python:stdlib":
            out.append((Path(sysconfig.get_paths()["stdlib"]).resolve(), True))
        elif r == "python:site-packages":
            out += [(p, True) for p in roots()[1:]]
        elif Path(r).is_dir():
            out.append((Path(r).resolve(), False))
    return out


def _python_rel(path: Path, root: Path) -> str:
    return relative_path(path, root)


def scan_source(source: dict, max_line_chars: int, skip_paths: set[Path] = frozenset()) -> list[dict]:
    """Readable text files of one manifest source: ``{rel, path, digest, held, language}`` (relpath: v1's for
    Python, the absolute path without its leading ``/`` otherwise), deterministic order, duplicates by real path
    dropped; files with a line longer than ``max_line_chars`` (minified or generated code) skipped."""
    skip = set(source.get("skip", ())) | {".git", "__pycache__"}    # node_modules is where npm's JavaScript is
    exts = tuple(source["ext"])
    out, seen = [], set()
    for root, is_python in source_roots(source):
        for path in sorted(root.rglob("*")):
            if not path.name.endswith(exts) or skip.intersection(path.relative_to(root).parts[:-1]):
                continue
            real = path.resolve()
            if real in seen or real in skip_paths or not path.is_file():
                continue
            seen.add(real)
            text = read_source(path)
            if text is None or max(map(len, text.split("\n"))) > max_line_chars:
                continue
            rel = _python_rel(path, root) if is_python else str(real).lstrip("/")
            out.append({"rel": rel, "path": str(real), "digest": hashlib.sha1(text.encode()).hexdigest(),
                        "held": is_heldout(rel), "language": source["language"], "text": text})
    return out


def quality_eval_files(path: Path | None = None) -> tuple[set[Path], set[str]]:
    """Paths and content sha1s of bench/quality's eval files (the manifest's sha1 and the file's own)."""
    path = Path(path or QUALITY_MANIFEST)
    if not path.is_file():
        return set(), set()
    paths, digests = set(), set()
    for e in json.loads(path.read_text())["files"]:
        root = Path(sysconfig.get_paths()["stdlib"]) if e["root"] == "stdlib" else Path("/")
        p = root / e["path"]
        if e.get("sha1"):
            digests.add(e["sha1"])
        try:
            data = p.read_bytes()
        except OSError:
            continue
        paths.add(p.resolve())
        digests.add(hashlib.sha1(data).hexdigest())
        digests.add(hashlib.sha1(data.decode("utf-8", "replace").encode()).hexdigest())
    return paths, digests


def split_sources(manifest: dict, heldout_mb: float) -> tuple[list[dict], list[dict], dict]:
    """(train, heldout, report) from every manifest source on this machine.

    Train never holds a held-out file, an eval file of bench/quality, nor any file whose content equals one of
    those (vendored copies); the held-out split drops files whose content also occurs at a train path (so neither
    v1 nor v2 may have trained on it). Each source's train files are taken in sha1(relpath) order up to its
    ``max_mb``; the held-out split up to ``heldout_mb`` per language."""
    eval_paths, eval_digests = quality_eval_files()
    if manifest.get("held_out_percent", HELDOUT_PERCENT) != HELDOUT_PERCENT:
        raise ValueError(f"the manifest's held_out_percent must be {HELDOUT_PERCENT} (is_heldout's, as v1)")
    scanned = {s["name"]: scan_source(s, manifest.get("max_line_chars", 400)) for s in manifest["sources"]}
    every = [f for fs in scanned.values() for f in fs]
    held_digests = {f["digest"] for f in every if f["held"]}
    train_digests = {f["digest"] for f in every if not f["held"]}
    train, heldout, report = [], [], {"sources": {}, "excluded_eval_files": 0, "excluded_heldout_twins": 0}
    seen: set[str] = set()
    held_bytes: dict[str, int] = {}
    for s in manifest["sources"]:
        files = sorted(scanned[s["name"]], key=lambda f: _order(f["rel"]))
        n = size = 0
        for f in files:
            is_eval = Path(f["path"]) in eval_paths or f["digest"] in eval_digests
            if f["held"] or is_eval:
                if is_eval:
                    report["excluded_eval_files"] += 1
                lang = f["language"]
                if (not is_eval and f["digest"] not in train_digests and f["digest"] not in seen
                        and held_bytes.get(lang, 0) < heldout_mb * 1e6):
                    heldout.append(f)
                    held_bytes[lang] = held_bytes.get(lang, 0) + len(f["text"])
                seen.add(f["digest"])
                continue
            if f["digest"] in held_digests:
                report["excluded_heldout_twins"] += 1
                continue
            if f["digest"] in seen or size >= s["max_mb"] * 1e6:
                continue
            seen.add(f["digest"])
            train.append(f)
            n, size = n + 1, size + len(f["text"])
        report["sources"][s["name"]] = {"language": s["language"], "files_found": len(files), "train_files": n,
                                        "train_mb": round(size / 1e6, 2),
                                        "heldout_mb": round(held_bytes.get(s["language"], 0) / 1e6, 2)}
    return train, heldout, report


def write_archive(files: list[dict], path: str | Path, preset: int = 9) -> None:
    """JSON lines ``{"path", "language", "text"}``, xz-compressed."""
    import lzma
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with lzma.open(tmp, "wt", encoding="utf-8", preset=preset) as fh:
        for f in files:
            fh.write(json.dumps({"path": f["rel"], "language": f["language"], "text": f["text"]}) + "\n")
    tmp.replace(path)


def read_archive(path: str | Path, max_bytes: int | None = None) -> Iterator[tuple[str, str, str]]:
    """``(relpath, language, text)`` of an archive written by :func:`write_archive`, in its order."""
    import lzma
    total = 0
    with lzma.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            d = json.loads(line)
            yield d["path"], d["language"], d["text"]
            total += len(d["text"])
            if max_bytes is not None and total >= max_bytes:
                return


def build_archive(out: str | Path, manifest_path: str | Path = MANIFEST, heldout_mb: float = 1.0) -> dict:
    """``out/train.jsonl.xz``, ``out/heldout.jsonl.xz`` and ``out/corpus_meta.json`` (what was taken, per source)."""
    out = Path(out)
    manifest = load_manifest(manifest_path)
    train, heldout, report = split_sources(manifest, heldout_mb)
    random.Random(0).shuffle(train)                 # languages interleaved: a --corpus-mb cap samples all of them
    write_archive(train, out / "train.jsonl.xz")
    write_archive(heldout, out / "heldout.jsonl.xz")
    report.update(manifest=str(manifest_path), python=platform.python_version(),
                  train_files=len(train), heldout_files=len(heldout),
                  train_mb=round(sum(len(f["text"]) for f in train) / 1e6, 2),
                  archive_bytes={p.name: p.stat().st_size for p in (out / "train.jsonl.xz", out / "heldout.jsonl.xz")},
                  archive_sha1={p.name: hashlib.sha1(p.read_bytes()).hexdigest()
                                for p in (out / "train.jsonl.xz", out / "heldout.jsonl.xz")})
    (out / "corpus_meta.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


def subset_archive(src: str | Path, dst: str | Path, mb: float) -> dict:
    """``dst``: about ``mb`` MB of ``src``'s text, every language keeping its share of it (each language's first
    files in the archive's own order, which :func:`build_archive` shuffled), for a device call that can carry only
    a small archive (the EAGLE-3 drafter's). Returns MB per language and the archive's size."""
    sizes: dict[str, int] = {}
    for _, lang, text in read_archive(src):
        sizes[lang] = sizes.get(lang, 0) + len(text)
    frac = min(1.0, mb * 1e6 / max(1, sum(sizes.values())))
    taken: dict[str, int] = {}
    files = []
    for rel, lang, text in read_archive(src):
        if taken.get(lang, 0) < frac * sizes[lang]:
            files.append({"rel": rel, "language": lang, "text": text})
            taken[lang] = taken.get(lang, 0) + len(text)
    write_archive(files, dst)
    return {"source": str(src), "files": len(files), "mb": round(sum(taken.values()) / 1e6, 2),
            "mb_by_language": {k: round(v / 1e6, 2) for k, v in sorted(taken.items())},
            "archive_bytes": Path(dst).stat().st_size}


def main(argv: list[str] | None = None) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m completer.training.corpus", description=(
        "The training corpus: count this machine's Python split (stdlib and site-packages), build the multi-language "
        "archive from the manifest, or cut a smaller archive from one."))
    sub = ap.add_subparsers(dest="cmd")
    count = sub.add_parser("count", help="files and MB of text of a split of this machine's Python (the default)")
    count.add_argument("split", nargs="?", default="heldout", choices=("train", "heldout", "all"))
    build = sub.add_parser("build", help="OUT/train.jsonl.xz, OUT/heldout.jsonl.xz, OUT/corpus_meta.json")
    build.add_argument("out")
    build.add_argument("--heldout-mb", type=float, default=1.0, help="MB of text held out (default 1)")
    subset = sub.add_parser("subset", help="about --mb MB of SRC's text into DST, each language keeping its share")
    subset.add_argument("src")
    subset.add_argument("dst")
    subset.add_argument("--mb", type=float, required=True)
    args = ap.parse_args(["count", *argv] if argv and argv[0] in ("train", "heldout", "all") else
                         (argv if argv else ["count"]))
    if args.cmd == "build":
        print(json.dumps(build_archive(args.out, heldout_mb=args.heldout_mb), indent=1))
    elif args.cmd == "subset":
        print(json.dumps(subset_archive(args.src, args.dst, args.mb), indent=1))
    else:
        n = size = 0
        for _, text in iter_texts(args.split):
            n, size = n + 1, size + len(text)
        print(f"{args.split}: {n} files, {size / 1e6:.1f} MB of text from {', '.join(map(str, roots()))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
