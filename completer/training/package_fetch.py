"""Fetch the packages of the large corpus (``corpus_packages.json``) by name, each into its own folder.

    python -m completer.training.package_fetch ROOT [--kinds deb,debsrc,pypi,npm] [--jobs 4]

Every package lands, unpacked, in ``ROOT/pkgs/<kind>/<name>/`` with ``ROOT/pkgs/<kind>/<name>.json`` beside it
(version, where it came from); a package already there is skipped, so an interrupted fetch resumes. Only the
ordinary clients, by package name:

- ``deb``: ``apt-get download NAME`` and ``dpkg-deb -x`` (nothing is installed); ``deps_of`` seeds add the
  ``golang-*``/``librust-*`` packages that ``apt-get -s install`` resolves for them from the local package lists.
- ``debsrc``: ``apt-get source NAME`` through a private apt configuration under ROOT/apt with bookworm's deb-src
  (the machine's own apt configuration and caches are not touched).
- ``pypi``: the newest sdist (``.tar.gz``) of NAME on the index pip is configured with (the same simple-API page
  pip reads; ``pip download`` would also *build* the sdist's metadata, which for Rust or C packages needs
  toolchains and crates that cannot be fetched here).
- ``npm``: ``npm pack NAME``.
"""

from __future__ import annotations

import argparse
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

PACKAGES = Path(__file__).with_name("corpus_packages.json")
KINDS = ("deb", "debsrc", "pypi", "npm")
PYPI_SIMPLE = "https://pypi.org/simple"


def load_packages(path: str | Path = PACKAGES) -> dict:
    return json.loads(Path(path).read_text())


def _run(cmd: list[str], cwd: Path | None = None, timeout: float = 900, env: dict | None = None) -> str:
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])}...: exit {r.returncode}: {(r.stderr or r.stdout)[-400:]}")
    return r.stdout


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]", "_", name.replace("/", "__"))


# --- Debian binary packages ----------------------------------------------------------------------------------------
def deb_names(spec: dict) -> list[str]:
    """The named packages plus the golang-*/librust-* packages apt resolves for the ``deps_of`` seeds (local lists)."""
    names = list(dict.fromkeys(spec["names"]))
    if spec.get("deps_of"):
        out = subprocess.run(["apt-get", "-s", "install", "--no-install-recommends", *spec["deps_of"]],
                             capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Inst "):
                name = line.split()[1]
                if name.startswith(tuple(spec.get("deps_prefixes", ()))) and name not in names:
                    names.append(name)
    return names


def fetch_deb(name: str, dest: Path, tmp: Path) -> dict:
    work = tmp / f"deb-{_safe_name(name)}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    _run(["apt-get", "download", name], cwd=work)
    debs = list(work.glob("*.deb"))
    if not debs:
        raise RuntimeError(f"apt-get download {name}: no .deb")
    _run(["dpkg-deb", "-x", str(debs[0]), str(dest)])
    version = _run(["dpkg-deb", "-f", str(debs[0]), "Version"]).strip()
    shutil.rmtree(work, ignore_errors=True)
    return {"version": version, "via": f"apt-get download {name}"}


# --- Debian source packages ----------------------------------------------------------------------------------------
def _apt_src_opts(root: Path) -> list[str]:
    apt = root / "apt"
    return ["-o", f"Dir::Etc::SourceList={apt / 'sources.list'}", "-o", f"Dir::Etc::SourceParts={apt / 'parts'}",
            "-o", f"Dir::State::Lists={apt / 'lists'}", "-o", f"Dir::Cache={apt / 'cache'}",
            "-o", "APT::Sandbox::User=root"]


def prepare_debsrc(root: Path) -> None:
    apt = root / "apt"
    if (apt / "updated").exists():
        return
    for d in ("parts", "lists/partial", "cache/archives/partial"):
        (apt / d).mkdir(parents=True, exist_ok=True)
    (apt / "sources.list").write_text(
        "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main\n")
    _run(["apt-get", *_apt_src_opts(root), "update"], timeout=1800)
    (apt / "updated").write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))


def fetch_debsrc(name: str, dest: Path, tmp: Path, root: Path) -> dict:
    work = tmp / f"src-{_safe_name(name)}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    _run(["apt-get", *_apt_src_opts(root), "source", "--only-source", name], cwd=work, timeout=1800)
    dirs = [d for d in work.iterdir() if d.is_dir()]
    dscs = list(work.glob("*.dsc"))
    if len(dirs) != 1 or not dscs:
        raise RuntimeError(f"apt-get source {name}: expected one unpacked folder, got {[d.name for d in dirs]}")
    version = dscs[0].stem.split("_", 1)[1]
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(dirs[0]), str(dest))
    shutil.rmtree(work, ignore_errors=True)
    return {"version": version, "via": f"apt-get source {name}"}


# --- PyPI sdists ---------------------------------------------------------------------------------------------------
class _Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self._href = None

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._href = dict(attrs).get("href")

    def handle_data(self, data):
        if self._href:
            self.links.append((data.strip(), self._href))
            self._href = None


def _version_key(v: str) -> tuple:
    try:
        from packaging.version import Version
        ver = Version(v)
        return (0 if ver.is_prerelease or ver.is_devrelease else 1, ver)
    except Exception:  # noqa: BLE001 -- unparsable versions sort first
        return (-1, v)


def newest_sdist(name: str) -> tuple[str, str, str]:
    """(filename, url, version) of the newest final-release .tar.gz of ``name`` on PyPI's simple API."""
    norm = re.sub(r"[-_.]+", "-", name).lower()
    req = urllib.request.Request(f"{PYPI_SIMPLE}/{norm}/", headers={"User-Agent": "pip/24"})
    with urllib.request.urlopen(req, timeout=60) as r:
        page = r.read().decode("utf-8", "replace")
    p = _Links()
    p.feed(page)
    best = None
    for fname, href in p.links:
        if not fname.endswith(".tar.gz"):
            continue
        stem = fname[:-len(".tar.gz")]
        m = re.match("(?i)" + "[-_.]".join(map(re.escape, norm.split("-"))) + r"-(.+)$", stem)
        if not m:
            continue
        key = _version_key(m.group(1))
        if best is None or key > best[0]:
            best = (key, fname, urllib.request.urljoin(f"{PYPI_SIMPLE}/{norm}/", href), m.group(1))
    if best is None:
        raise RuntimeError(f"no sdist of {name} on {PYPI_SIMPLE}")
    return best[1], best[2], best[3]


def _extract_tar(path: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path) as t:
        t.extractall(dest, filter="data")


def fetch_pypi(name: str, dest: Path, tmp: Path) -> dict:
    fname, url, version = newest_sdist(name)
    path = tmp / fname
    req = urllib.request.Request(url.split("#")[0], headers={"User-Agent": "pip/24"})
    with urllib.request.urlopen(req, timeout=600) as r, open(path, "wb") as fh:
        shutil.copyfileobj(r, fh)
    _extract_tar(path, dest)
    path.unlink()
    return {"version": version, "via": f"PyPI sdist {fname}"}


# --- npm -----------------------------------------------------------------------------------------------------------
def fetch_npm(name: str, dest: Path, tmp: Path) -> dict:
    work = tmp / f"npm-{_safe_name(name)}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    out = _run(["npm", "pack", name, "--json", "--pack-destination", str(work)], cwd=work,
               env={**os.environ, "npm_config_cache": str(tmp / "npm-cache")})
    info = json.loads(out)[0]
    _extract_tar(work / info["filename"], dest)
    shutil.rmtree(work, ignore_errors=True)
    return {"version": info.get("version"), "via": f"npm pack {name}"}


# --- driver --------------------------------------------------------------------------------------------------------
def fetch_all(root: str | Path, kinds=KINDS, jobs: int = 4, packages: dict | None = None) -> dict:
    root = Path(root).resolve()
    packages = packages or load_packages()
    tmp = root / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    todo: list[tuple[str, str]] = []
    for kind in kinds:
        names = deb_names(packages["deb"]) if kind == "deb" else packages[kind]
        todo += [(kind, n) for n in names]
    if "debsrc" in kinds:
        prepare_debsrc(root)
    report = {"ok": 0, "skipped": 0, "failed": {}}
    t0 = time.time()

    def one(kind: str, name: str) -> str:
        base = root / "pkgs" / kind
        dest, meta = base / _safe_name(name), base / f"{_safe_name(name)}.json"
        if meta.exists():
            return "skipped"
        shutil.rmtree(dest, ignore_errors=True)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if kind == "deb":
            info = fetch_deb(name, dest, tmp)
        elif kind == "debsrc":
            info = fetch_debsrc(name, dest, tmp, root)
        elif kind == "pypi":
            info = fetch_pypi(name, dest, tmp)
        else:
            info = fetch_npm(name, dest, tmp)
        meta.write_text(json.dumps({"kind": kind, "name": name, **info}) + "\n")
        return "ok"

    with ThreadPoolExecutor(jobs) as pool:
        futures = {pool.submit(one, k, n): (k, n) for k, n in todo}
        for i, fut in enumerate(as_completed(futures), 1):
            k, n = futures[fut]
            try:
                report[fut.result()] += 1
            except Exception as e:  # noqa: BLE001 -- one package failing must not stop the others
                report["failed"][f"{k}:{n}"] = str(e)[-300:]
            el = time.time() - t0
            eta = el / i * (len(todo) - i)
            print(f"[{i}/{len(todo)}] {k}:{n} ({el:.0f}s, ETA {eta // 60:.0f}:{eta % 60:02.0f})", flush=True)
    (root / "fetch_report.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m completer.training.package_fetch", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", help="folder for the packages (ROOT/pkgs/<kind>/<name>/)")
    ap.add_argument("--kinds", default=",".join(KINDS), help="which kinds to fetch, comma-separated")
    ap.add_argument("--jobs", type=int, default=4, help="downloads at a time")
    ap.add_argument("--packages", default=str(PACKAGES), help="the package list")
    args = ap.parse_args(argv)
    kinds = tuple(k for k in args.kinds.split(",") if k)
    bad = set(kinds) - set(KINDS)
    if bad:
        ap.error(f"unknown kinds {sorted(bad)}; known: {', '.join(KINDS)}")
    report = fetch_all(args.root, kinds, args.jobs, load_packages(args.packages))
    print(json.dumps({"ok": report["ok"], "skipped": report["skipped"], "failed": len(report["failed"])}))
    for k, v in report["failed"].items():
        print(f"failed {k}: {v}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
