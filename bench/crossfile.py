"""The cross-file eval set of ``bench/quality.py --crossfile``: positions where the rest of the line uses a name that
another file of the project defines (CrossCodeEval's construction, Ding et al. 2023), in held-out projects.

Projects (``bench/crossfile_manifest.json``): whole packages that no training corpus of this project had in its
train split (the house corpus, the large package corpus, the cross-file training packages: ``trained_on``), chosen by
package as ``bench/quality_manifest.json`` chooses files: Debian packages that install source outside the corpus's roots
(``completer/training/corpus_manifest.json``: Go under /usr/share/gocode, Rust crates under /usr/share/cargo/registry,
Python under /usr/lib/python3/dist-packages), C from the libssh2 source package (held out of the large corpus, fetched
by ``completer.training.package_fetch`` into /opt/completer-crossfile/src), and npm packages installed into
``/opt/completer-crossfile`` (JavaScript, TypeScript). Install commands are in the manifest (``install``). Every
file of a project is listed with its sha1: a missing one is skipped, a changed one used and flagged.

Positions, per target file (``targets`` of the manifest), seeded: a line that uses an identifier which (a) another
file of the project defines (a tree-sitter definition), (b) the target file does not define, and (c) does not occur
in the target file before that line except in import lines (so the open file alone cannot show it). Kinds:

- ``at_name``: the cursor just before the name (the rest of the line starts with it);
- ``in_name``: two characters of the name typed.

The document the model sees is the target file with the rest of the cursor's line removed (as ``bench/quality``);
the project's other files are its workspace (read from disk, never the target file itself).

    python -m bench.crossfile --make-manifest     # (re)write the manifest from the installed packages
    python -m bench.crossfile [--json]            # the positions (a sample, or all as JSON lines)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
from pathlib import Path

from completer.training.crossfile import PER_KIND, Project, XPosition, cross_names, positions_for, scan_files

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "crossfile_manifest.json"

# the projects: (language, name, source package, install command, root, file glob suffixes, skipped parts)
PROJECTS = [
    ("python", "toolz", "Debian python3-toolz 0.12.0", "apt-get install -y python3-toolz",
     "/usr/lib/python3/dist-packages/toolz", (".py",), ("tests", "__pycache__")),
    ("python", "cachetools", "Debian python3-cachetools 5.2.0", "apt-get install -y python3-cachetools",
     "/usr/lib/python3/dist-packages/cachetools", (".py",), ("__pycache__",)),
    ("go", "golang-lru", "Debian golang-github-hashicorp-golang-lru-dev 0.5.4",
     "apt-get install -y golang-github-hashicorp-golang-lru-dev",
     "/usr/share/gocode/src/github.com/hashicorp/golang-lru", (".go",), ()),
    ("go", "pflag", "Debian golang-github-spf13-pflag-dev 1.0.5", "apt-get install -y golang-github-spf13-pflag-dev",
     "/usr/share/gocode/src/github.com/spf13/pflag", (".go",), ()),
    ("go", "go-version", "Debian golang-github-hashicorp-go-version-dev",
     "apt-get install -y golang-github-hashicorp-go-version-dev",
     "/usr/share/gocode/src/github.com/hashicorp/go-version", (".go",), ()),
    ("rust", "semver", "Debian librust-semver-dev 1.0.14", "apt-get install -y librust-semver-dev",
     "/usr/share/cargo/registry/semver-1.0.14/src", (".rs",), ()),
    ("rust", "anyhow", "Debian librust-anyhow-dev 1.0.69", "apt-get install -y librust-anyhow-dev",
     "/usr/share/cargo/registry/anyhow-1.0.69/src", (".rs",), ()),
    ("c", "libssh2", "Debian source package libssh2 1.10.0 (its src/ and include/)",
     "python -m completer.training.package_fetch /opt/completer-crossfile/src --packages bench/crossfile_packages.json "
     "--kinds debsrc", "/opt/completer-crossfile/src/pkgs/debsrc/libssh2", (".c", ".h"),
     ("tests", "example", "docs", "debian", "os400", "win32", "vms", "nw", "cmake")),
    ("javascript", "node-forge", "npm node-forge 1.4.4 (its lib/)",
     "npm install --prefix /opt/completer-crossfile --no-save --ignore-scripts node-forge@1.4.4 "
     "@tanstack/query-core@5.108.4 postcss@8.5.34", "/opt/completer-crossfile/node_modules/node-forge/lib", (".js",), ()),
    ("javascript", "postcss", "npm postcss 8.5.34 (its lib/)", "(as node-forge)",
     "/opt/completer-crossfile/node_modules/postcss/lib", (".js",), ()),
    ("typescript", "query-core", "npm @tanstack/query-core 5.108.4 (its src/ TypeScript sources)", "(as node-forge)",
     "/opt/completer-crossfile/node_modules/@tanstack/query-core/src", (".ts",), ("__tests__",)),
]
# each project as the training corpora name packages (``completer/training/corpus_large_manifest.json``'s keys,
# ``kind:name``): none may be in a train split (``trained_on``); the large corpus had ring, ajv, koa, jsonwebtoken
# and google/uuid in its train split, which is why they left this set
CORPUS_NAMES = {"toolz": ("pypi:toolz", "deb:python3-toolz"), "cachetools": ("pypi:cachetools", "deb:python3-cachetools"),
                "golang-lru": ("deb:golang-github-hashicorp-golang-lru-dev",),
                "pflag": ("deb:golang-github-spf13-pflag-dev",),
                "go-version": ("deb:golang-github-hashicorp-go-version-dev",),
                "semver": ("deb:librust-semver-dev", "pypi:semver"), "anyhow": ("deb:librust-anyhow-dev",),
                "libssh2": ("debsrc:libssh2", "deb:libssh2-1-dev"), "node-forge": ("npm:node-forge",),
                "postcss": ("npm:postcss",), "query-core": ("npm:@tanstack/query-core",)}
TARGETS_PER_PROJECT = {"python": 3, "go": 2, "rust": 3, "c": 5, "javascript": 3, "typescript": 5}


def load(path: Path = MANIFEST) -> tuple[list[Project], list[str]]:
    """The manifest's projects present on this machine (files read, sha1 checked), and notes."""
    data = json.loads(Path(path).read_text())
    projects, notes = [], []
    for p in data["projects"]:
        files = {}
        for rel, sha in p["files"].items():
            fp = Path(p["root"]) / rel
            try:
                raw = fp.read_bytes()
            except OSError:
                notes.append(f"missing: {p['name']}/{rel} (install: {p['install']})")
                continue
            if hashlib.sha1(raw).hexdigest() != sha:
                notes.append(f"content differs from the manifest: {p['name']}/{rel}")
            files[rel] = raw.decode("utf-8", "replace")
        targets = [t for t in p["targets"] if t in files]
        if targets:
            projects.append(Project(p["language"], p["name"], p["source"], p["root"], files, targets))
    return projects, notes


def sample(projects: list[Project], seed: int = 0, per_kind: int = PER_KIND) -> list[XPosition]:
    out = []
    for p in projects:
        names = cross_names(p.files, p.language)
        for t in p.targets:
            out += positions_for(p, t, names[t], seed, per_kind)
    return out


TRAINING = HERE.parent / "completer" / "training"


def trained_on(large_manifest: Path = TRAINING / "corpus_large_manifest.json",
               training_packages: Path = TRAINING / "crossfile_packages.json") -> list[str]:
    """The set's projects that a training corpus of this project had in its train split: the large package corpus
    (``corpus_large_manifest.json``) or the cross-file training packages (``crossfile_packages.json``)."""
    large = json.loads(Path(large_manifest).read_text())["packages"]
    extra = json.loads(Path(training_packages).read_text())
    listed = {f"deb:{n}" for n in extra.get("deb", {}).get("names", [])} | {
        f"{k}:{n}" for k in ("debsrc", "pypi", "npm") for n in extra.get(k, [])}
    return [name for name, keys in CORPUS_NAMES.items()
            if any(large.get(k, {}).get("split") == "train" or k in listed for k in keys)]


def not_held_out(*corpora: Path) -> str:
    """Why the set is not held out (projects a training corpus had, or that ``CORPUS_NAMES`` does not name, so they
    cannot be checked), or "" when it is; ``corpora``: ``trained_on``'s files, the repository's by default."""
    missing = sorted({p[1] for p in PROJECTS} - set(CORPUS_NAMES))
    trained = trained_on(*corpora)
    if missing or trained:
        return f"trained on: {', '.join(trained) or '-'}; no corpus names for: {', '.join(missing) or '-'}"
    return ""


def make_manifest(path: Path = MANIFEST) -> dict:
    """Scan the installed packages: each project's files (sha1) and its targets, the files with the most
    candidate positions (at least 4), ``TARGETS_PER_PROJECT`` per language spread over its projects."""
    problem = not_held_out()
    if problem:
        raise SystemExit(f"not held out: {problem} (bench/crossfile.CORPUS_NAMES)")
    projects = []
    for language, name, source, install, root, exts, skip in PROJECTS:
        if not os.path.isdir(root):
            print(f"skipped {name}: {root} missing (install: {install})")
            continue
        rels = scan_files(root, exts, skip)
        texts = {r: Path(root, r).read_text("utf-8", "replace") for r in rels}
        texts = {r: t for r, t in texts.items() if 0 < len(t) <= 200_000}
        names = cross_names(texts, language)
        proj = Project(language, name, source, root, texts, [])
        counts = {r: len(positions_for(proj, r, names[r], 0, per_kind=10_000)) for r in texts}
        n_proj = sum(1 for x in PROJECTS if x[0] == language and os.path.isdir(x[4]))
        want = max(1, round(TARGETS_PER_PROJECT[language] / max(1, n_proj)))
        targets = [r for r, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if n >= 4][:want]
        projects.append({"language": language, "name": name, "source": source, "install": install, "root": root,
                         "targets": targets, "candidates": {r: counts[r] for r in targets},
                         "files": {r: hashlib.sha1(Path(root, r).read_bytes()).hexdigest() for r in sorted(texts)}})
    data = {"doc": __doc__.split("\n\n")[0] + " Written by `python -m bench.crossfile --make-manifest`; "
            "see bench/crossfile.py for the construction.", "projects": projects}
    Path(path).write_text(json.dumps(data, indent=1) + "\n")
    return data


def block_coverage(positions, model: str, shares=(0.1, 0.25, 0.5), sources=("imports", "similar"),
                   budget_tokens: int = 1024) -> dict:
    """How often the prompt's context block holds the cross-file name the line needs (as a whole word), at each
    snippet share of the budget, with ``model``'s tokenizer and template; and how often the sources' snippets hold
    it before the budget cut. What the block can give at most: a model cannot copy a definition the budget left out."""
    from completer import pipeline
    from completer.context import SourceFile
    from completer.context.workspace import uri_of
    from completer.engine import EngineConfig, create_engine
    from completer.training.crossfile import project_snippets

    engine = create_engine(EngineConfig(model=model, device="cpu", speculation="none"))
    workspaces: dict = {}
    shares = tuple(shares)
    counts = {"positions": 0, "in the snippets": 0, **{f"in the block at {s:g}": 0 for s in shares}}
    by_language: dict[str, dict] = {}
    for p in positions:
        snippets = project_snippets(p.root, p.path, p.document, p.offset, p.language, sources, workspaces)
        word = re.compile(r"\b%s\b" % re.escape(p.name))
        hits = {"positions": 1, "in the snippets": bool(word.search("\n".join(l for s in snippets for l in s.lines)))}
        for share in shares:
            settings = pipeline.Settings(budget_tokens=budget_tokens, snippet_share=share)
            plan = pipeline.plan(SourceFile(uri_of(p.path), p.language, p.document), p.offset, engine, settings,
                                 snippets=snippets)
            hits[f"in the block at {share:g}"] = bool(word.search(plan.context))
        for k, v in hits.items():
            counts[k] += v
            lang = by_language.setdefault(p.language, dict.fromkeys(counts, 0))
            lang[k] += v
    return {"model": model, "sources": list(sources), "budget_tokens": budget_tokens, **counts,
            "by_language": by_language}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.crossfile")
    ap.add_argument("--make-manifest", action="store_true")
    ap.add_argument("--manifest", type=Path, default=MANIFEST)
    ap.add_argument("--json", action="store_true", help="print the positions as JSON lines (no documents)")
    ap.add_argument("--per-kind", type=int, default=PER_KIND)
    ap.add_argument("--trained-on", nargs=2, metavar=("LARGE_MANIFEST", "TRAINING_PACKAGES"),
                    help="check that no project of the set is in those training corpora (exit 1 naming those that "
                         "are); the repository's: completer/training/corpus_large_manifest.json and "
                         "crossfile_packages.json")
    ap.add_argument("--coverage", metavar="MODEL",
                    help="print how often the context block holds the name the line needs (block_coverage), with "
                         "MODEL's tokenizer and template, e.g. house:smollm2/fim")
    ap.add_argument("--shares", default="0.1,0.25,0.5", help="--coverage: snippet shares of the budget")
    args = ap.parse_args(argv)
    if args.coverage:
        projects, notes = load(args.manifest)
        if notes:
            raise SystemExit("; ".join(notes[:3]) + (" ..." if len(notes) > 3 else ""))
        shares = [float(x) for x in args.shares.split(",")]
        print(json.dumps(block_coverage(sample(projects, per_kind=args.per_kind), args.coverage, shares), indent=1))
        return 0
    if args.trained_on:
        problem = not_held_out(*map(Path, args.trained_on))
        if problem:
            print(problem)
            return 1
        print(f"none of the {len(PROJECTS)} projects is in a training corpus")
        return 0
    if args.make_manifest:
        d = make_manifest(args.manifest)
        for p in d["projects"]:
            print(p["language"], p["name"], len(p["files"]), "files; targets", p["candidates"])
        return 0
    projects, notes = load(args.manifest)
    pos = sample(projects, per_kind=args.per_kind)
    if args.json:
        for n in notes:
            print(json.dumps({"note": n}))
        for p in pos:
            d = {k: v for k, v in p.__dict__.items() if k != "document"}
            d["line_before"] = p.document[p.document.rfind("\n", 0, p.offset) + 1:p.offset]
            print(json.dumps(d))
        return 0
    for n in notes:
        print(n)
    by = {}
    for p in pos:
        by[p.language] = by.get(p.language, 0) + 1
    print(len(pos), "positions", by)
    for p in pos[:: max(1, len(pos) // 12)]:
        print(f"{p.file}:{p.line + 1} [{p.kind}] {p.document[p.document.rfind(chr(10), 0, p.offset) + 1:p.offset]!r}"
              f" -> {p.expected!r} ({p.name} from {p.defined_in})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
