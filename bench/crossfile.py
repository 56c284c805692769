"""The cross-file eval set of ``bench/quality.py --crossfile``: positions where the rest of the line uses a name that
another file of the project defines (CrossCodeEval's construction, Ding et al. 2023), in held-out projects.

Projects (``bench/crossfile_manifest.json``): whole packages that the house corpus never had, chosen by package as
``bench/quality_manifest.json`` chooses files: Debian packages that install source outside the corpus's roots
(``completer/training/corpus_manifest.json``: Go under /usr/share/gocode, Rust crates under /usr/share/cargo/registry,
Python under /usr/lib/python3/dist-packages, C from the ring crate's C sources), and npm packages installed into
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
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "crossfile_manifest.json"
KINDS = ("at_name", "in_name")
PER_KIND = 3                        # positions of each kind per target file
MIN_NAME = 4                        # shorter names (``id``, ``New``) are too easy to guess
IMPORT_LINE = {
    "python": re.compile(r"^\s*(from\s+\S+\s+)?import\b"),
    "javascript": re.compile(r"^\s*(import\b|.*\brequire\s*\()"),
    "typescript": re.compile(r"^\s*(import\b|export\s+.*\bfrom\b)"),
    "go": re.compile(r"^\s*(import\b|\"[^\"]+\"\s*$)"),
    "rust": re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(use|mod)\b"),
    "c": re.compile(r"^\s*#\s*include\b"),
}
COMMENT = re.compile(r"^\s*(#(?!\s*(include|define|if|else|endif))|//|/\*|\*|\"\"\"|''')")
_IDENT = re.compile(r"[A-Za-z_]\w*")

# the projects: (language, name, source package, install command, root, file glob suffixes, skipped parts)
PROJECTS = [
    ("python", "toolz", "Debian python3-toolz 0.12.0", "apt-get install -y python3-toolz",
     "/usr/lib/python3/dist-packages/toolz", (".py",), ("tests", "__pycache__")),
    ("python", "cachetools", "Debian python3-cachetools 5.2.0", "apt-get install -y python3-cachetools",
     "/usr/lib/python3/dist-packages/cachetools", (".py",), ("__pycache__",)),
    ("go", "uuid", "Debian golang-github-google-uuid-dev 1.3.0", "apt-get install -y golang-github-google-uuid-dev",
     "/usr/share/gocode/src/github.com/google/uuid", (".go",), ()),
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
    ("c", "ring-c", "Debian librust-ring-dev 0.16.20 (its C sources)", "apt-get install -y librust-ring-dev",
     "/usr/share/cargo/registry/ring-0.16.20", (".c", ".h"), ("tests", "third_party", "pregenerated", "perlasm")),
    ("javascript", "koa", "npm koa 2.15.3",
     "npm install --prefix /opt/completer-crossfile --no-save --ignore-scripts koa@2.15.3 jsonwebtoken@9.0.2 "
     "ajv@8.17.1", "/opt/completer-crossfile/node_modules/koa/lib", (".js",), ()),
    ("javascript", "jsonwebtoken", "npm jsonwebtoken 9.0.2", "(as koa)",
     "/opt/completer-crossfile/node_modules/jsonwebtoken", (".js",), ("node_modules", "test")),
    ("typescript", "ajv", "npm ajv 8.17.1 (its lib/ TypeScript sources)", "(as koa)",
     "/opt/completer-crossfile/node_modules/ajv/lib", (".ts",), ()),
]
TARGETS_PER_PROJECT = {"python": 3, "go": 2, "rust": 3, "c": 5, "javascript": 3, "typescript": 5}
TEST_FILE = re.compile(r"(_test\.go|\.test\.[jt]s|\.d\.ts|constant_time_test\.c)$")


@dataclass
class Project:
    language: str
    name: str
    source: str
    root: str
    files: dict[str, str]                  # relative path -> text (those present)
    targets: list[str]
    notes: list[str] = field(default_factory=list)


@dataclass
class XPosition:
    file: str                # project/relative path
    language: str
    kind: str
    line: int
    offset: int
    document: str
    expected: str
    name: str                # the cross-file name the rest of the line uses
    defined_in: str          # the project file that defines it
    project: str
    root: str                # the project's workspace folder
    path: str                # the target file's absolute path
    base: bool = True


def _definitions(text: str, language: str) -> set[str]:
    from completer.context.syntax import outline
    try:
        ol = outline(text, language, 0, all_definitions=True)
    except Exception:
        return set()
    return {d.name for d in (ol.definitions if ol else [])}


def _scan(root: str, exts: tuple, skip: tuple) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in skip)
        for n in sorted(filenames):
            if n.endswith(exts) and not TEST_FILE.search(n):
                out.append(os.path.relpath(os.path.join(dirpath, n), root))
    return out


def cross_names(files: dict[str, str], language: str) -> dict[str, dict[str, str]]:
    """Per file: name -> the other file defining it (names the file itself defines are left out)."""
    defs = {f: _definitions(t, language if not f.endswith(".h") or language != "c" else "c") for f, t in files.items()}
    out = {}
    for f in files:
        mine = defs[f]
        names: dict[str, str] = {}
        for g, ds in sorted(defs.items()):
            if g == f:
                continue
            for n in ds:
                if n not in mine and len(n) >= MIN_NAME and not n.startswith("__") and n not in names:
                    names[n] = g
        out[f] = names
    return out


_PROSE = {"comment", "line_comment", "block_comment", "string_content", "string_fragment", "template_string",
          "raw_string_literal", "interpreted_string_literal", "string_literal", "char_literal", "system_lib_string"}


def _in_prose(text: str, language: str, target: str) -> "callable":
    """A test: is character offset i inside a comment, a string or a Python docstring (tree-sitter)?"""
    from completer.context.languages import grammar
    from completer.context.syntax import _parser
    lang = "tsx" if target.endswith(".tsx") else language
    if grammar(lang) is None:
        return lambda i: False
    buf = text.encode("utf-8")
    root = _parser(lang).parse(buf).root_node
    ascii_ = text.isascii()

    def test(i: int) -> bool:
        b = i if ascii_ else len(text[:i].encode("utf-8"))
        n = root.descendant_for_byte_range(b, b + 1)
        for _ in range(6):
            if n is None:
                return False
            if n.type in _PROSE or (n.type == "string" and (language != "python" or n.parent is not None
                                                            and n.parent.type == "expression_statement")):
                return True
            n = n.parent
        return False
    return test


_DECLARED = re.compile(r"\s*(=[^=>]|:[^:]|,\s*\w+\s*:=)")


def positions_for(project: Project, target: str, names: dict[str, str], seed: int,
                  per_kind: int = PER_KIND) -> list[XPosition]:
    text = project.files[target]
    prose = _in_prose(text, project.language, target)
    lines = text.split("\n")
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    imp = IMPORT_LINE[project.language]
    seen: set[str] = set()           # identifiers used so far outside import lines
    cands: dict[str, list[tuple[int, int, str]]] = {k: [] for k in KINDS}
    for i, line in enumerate(lines):
        if imp.match(line):
            continue
        ok = len(line.strip()) >= 6 and len(line) <= 200 and not COMMENT.match(line)
        for m in _IDENT.finditer(line):
            w = m.group(0)
            if (ok and w in names and w not in seen and m.start() > len(line) - len(line.lstrip())
                    and not _DECLARED.match(line, m.end()) and not prose(starts[i] + m.start())):
                cands["at_name"].append((i, m.start(), w))
                if len(w) >= 5:
                    cands["in_name"].append((i, m.start() + 2, w))
            seen.add(w)
        if not ok:
            continue
    rng = random.Random(f"{seed}:{project.name}/{target}")
    out = []
    for kind in KINDS:
        c = cands[kind]
        for i, col, w in rng.sample(c, min(per_kind, len(c))):
            body = lines[i].rstrip()
            cut = starts[i] + col
            document = text[:cut] + text[starts[i] + len(lines[i]):]
            out.append(XPosition(f"{project.name}/{target}", project.language, kind, i, cut, document, body[col:],
                                 w, names[w], project.name, project.root, os.path.join(project.root, target)))
    return out


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


def make_manifest(path: Path = MANIFEST) -> dict:
    """Scan the installed packages: each project's files (sha1) and its targets, the files with the most
    candidate positions (at least 4), ``TARGETS_PER_PROJECT`` per language spread over its projects."""
    projects = []
    for language, name, source, install, root, exts, skip in PROJECTS:
        if not os.path.isdir(root):
            print(f"skipped {name}: {root} missing (install: {install})")
            continue
        rels = _scan(root, exts, skip)
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.crossfile")
    ap.add_argument("--make-manifest", action="store_true")
    ap.add_argument("--manifest", type=Path, default=MANIFEST)
    ap.add_argument("--json", action="store_true", help="print the positions as JSON lines (no documents)")
    ap.add_argument("--per-kind", type=int, default=PER_KIND)
    args = ap.parse_args(argv)
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
