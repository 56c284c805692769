"""Cross-file positions and prompts, shared by the cross-file eval set and cross-file training.

**The construction** (CrossCodeEval's, Ding et al. 2023): in a project of one language, a position is a line that
uses an identifier which (a) another file of the project defines (a tree-sitter definition), (b) the file does not
define and (c) does not occur in the file before that line except in import lines, not in a comment or string, not
a name being declared. Kinds: ``at_name`` (the cursor just before the name), ``in_name`` (two of its characters
typed). The document is the file with the rest of the cursor's line removed. ``bench/crossfile.py`` builds the
held-out eval set with it; ``samples`` here builds training prompts from other projects with it.

**The context** (``project_snippets``): what the server's context sources give at a position when the project is
the workspace (``completer.context.workspace``: definitions of imported names; ``completer.context.similar``:
Jaccard-similar windows of recently used files, which are taken to be the files the document imports, then the
project's others nearest by folder, ``RECENT_FILES`` of them).

**Training samples** (``samples``; ``python -m completer.training.crossfile``): the server's own prompt at a
position (``completer.pipeline.plan``: windows, budget, token healing, the model's template), made with the
project's snippets, followed by what the file has there (healed characters + the rest of the line, or a random
middle as ``completer.training.fim`` cuts it) and the end token. So a model trained on them sees, in training, the
prompts that the server will give it, cross-file block included (house models trained on single-file chunks
ignore the block: ``bench/results/crossfile``).

    python -m completer.training.crossfile CORPUS/train.jsonl.xz OUT.npz --model house:smollm2/fim

and ``python -m completer.training.fim_lora ... --samples OUT.npz`` mixes them into training (each window holds
whole samples: ``completer.training.fim.pack_samples``).
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import random
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

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


def scan_files(root: str, exts: tuple, skip: tuple) -> list[str]:
    """The project's source files (relative paths) with those endings, outside ``skip`` folders and test files."""
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


# --- the context a project gives --------------------------------------------------------------------------------
CONTEXT_SOURCES = ("imports", "similar")
RECENT_FILES = 8                 # "recently used" files of a position's project (similar windows)


def project_snippets(root: str, path: str, document: str, offset: int, language: str, sources, workspaces: dict):
    """The snippets the server's context sources would give at ``offset`` of ``document`` (the text of ``path``,
    a file of the project under ``root``; the disk's copy of that file is never read): ``sources`` from
    ``CONTEXT_SOURCES``. ``workspaces``: a cache of ``Workspace`` by root, kept by the caller across positions."""
    from completer.context import SourceFile
    from completer.context.similar import query_window, similar_snippets
    from completer.context.workspace import (Workspace, import_snippets, imported_files, rank_by_use, relative_name,
                                             uri_of)

    unknown = set(sources) - set(CONTEXT_SOURCES)
    if unknown:
        raise ValueError(f"context: unknown sources {sorted(unknown)}; known: {CONTEXT_SOURCES}")
    ws = workspaces.get(root)
    if ws is None:
        ws = workspaces[root] = Workspace([root])
    ws.texts = {path: document}
    doc = SourceFile(uri_of(path), language, document)
    out = []
    if "imports" in sources:
        out += rank_by_use(import_snippets(doc, ws), document, document.count("\n", 0, offset))
    if "similar" in sources:
        imported = imported_files(doc, ws).files
        here = os.path.dirname(path)
        rest = sorted((e.path for e in ws.files() if e.path != path and e.path not in imported
                       and (e.language == language or e.path.endswith(".h") and language == "c")),
                      key=lambda p: (os.path.relpath(p, here).count(".."), p))
        recent = [p for p in imported + rest if p != path][:RECENT_FILES]
        files = [(relative_name(p, ws), t) for p in recent if (t := ws.read(p)) is not None]
        out += similar_snippets(query_window(document, offset), files)
    return out


def with_definition(snippets, name: str, rank: int = -1) -> list:
    """``snippets`` with the import snippet that defines ``name`` alone (``rank_by_use`` splits imported files'
    definitions into one snippet a name) moved to ``rank``: taken into the block before (-1) or among (0) the
    imported names not used yet. The same list where no such snippet is there."""
    from dataclasses import replace
    return [replace(s, rank=rank) if s.kind == "import" and s.names == (name,) else s for s in snippets]


# --- training samples ------------------------------------------------------------------------------------------
SHARES = (0.1, 0.25)             # the snippet shares of the budget a sample is made with (the server's, and more)


def read_projects(archive: str | Path) -> dict[tuple[str, str], dict[str, str]]:
    """``(package, language) -> {relative path: text}`` of a corpus archive whose lines carry ``package``
    (``completer.training.package_corpus``'s); C headers count as C."""
    out: dict[tuple[str, str], dict[str, str]] = {}
    with lzma.open(archive, "rt", encoding="utf-8") as fh:
        for line in fh:
            d = json.loads(line)
            pkg = d.get("package")
            if not pkg:
                raise ValueError(f"{archive}: a line without 'package' ({d.get('path')}): not a package corpus "
                                 f"(python -m completer.training.package_corpus build)")
            rel = d["path"].split("/", 1)[1] if d["path"].startswith(pkg + "/") else d["path"]
            out.setdefault((pkg, d["language"]), {})[rel] = d["text"]
    for key, files in out.items():      # the folders every file is under (``usr/share/gocode/src/...``,
        common = os.path.commonpath([os.path.dirname(r) or "." for r in files])   # ``altair-6.3.0/``) are not
        if common not in ("", "."):                                               # part of the names
            out[key] = {os.path.relpath(r, common): t for r, t in files.items()}
    return out


@dataclass
class Sample:
    prompt: list[int]            # the server's prompt, as the engine encodes it
    target: list[int]            # the healed characters and what the file has there, then the end token
    kind: str                    # at_name | in_name | span | lines
    context: bool                # the prompt was made with the project's snippets
    project: str


def _random_position(project: Project, target: str, rng: random.Random) -> XPosition | None:
    """A cut as FIM training cuts (``completer.training.fim.split_fim``) within a window of the file: the document
    is the file without the middle, which is the expected text."""
    from completer.training.fim import split_fim
    text = project.files[target]
    if len(text) < 200:
        return None
    lo = rng.randrange(0, max(1, len(text) - 3000))
    lo = text.rfind("\n", 0, lo) + 1
    window = text[lo:lo + 3000]
    p, m, s = split_fim(window, rng)
    if not m.strip() or len(m) > 400:
        return None
    cut = lo + len(p)
    document = text[:cut] + text[cut + len(m):]
    kind = "lines" if (not p or p.endswith("\n")) and m.endswith("\n") else "span"
    return XPosition(f"{project.name}/{target}", project.language, kind, text.count("\n", 0, cut), cut, document, m,
                     "", "", project.name, project.root, os.path.join(project.root, target))


def samples(projects: dict[tuple[str, str], dict[str, str]], engine, *, seed: int = 0, per_kind: int = 2,
            random_per_file: int = 2, files_per_project: int = 40, no_context: float = 0.2,
            budget_tokens: int = 1024, force_definition: float = 0.0, progress=None):
    """Training samples (``Sample``) from each project of ``projects`` (``read_projects``), written under a
    temporary folder so the server's context sources read them as a workspace: per file (at most
    ``files_per_project`` a project), ``per_kind`` cross-file positions of each kind and ``random_per_file`` random
    cuts; each prompt made by ``completer.pipeline.plan`` with ``engine``'s tokenizer and template, with the
    project's snippets at a share drawn from ``SHARES``, or without them for a ``no_context`` share of samples.
    ``force_definition``: the share of cross-file positions with snippets whose block is made to hold the definition
    of the name the line needs (``with_definition``), where the imports source found it: the server's ranking puts
    it in the block on ~40% of the held-out positions, and a model that never sees it there often does not learn to
    copy from the block."""
    from completer import pipeline
    from completer.context import SourceFile
    from completer.context.workspace import uri_of

    rng = random.Random(seed)
    tok = engine.tokenizer
    eos = tok.token_to_id("<|endoftext|>")
    if eos is None:
        raise ValueError("the engine's tokenizer has no <|endoftext|> token")
    keys = sorted(projects)
    rng.shuffle(keys)
    with tempfile.TemporaryDirectory(prefix="crossfile-") as tmp:
        for n, (pkg, language) in enumerate(keys):
            files = {r: t for r, t in projects[(pkg, language)].items() if not TEST_FILE.search(r)}
            if len(files) < 2 or language not in IMPORT_LINE:
                continue
            root = os.path.join(tmp, re.sub(r"[^\w.-]", "_", pkg), language)
            for rel, text in files.items():
                p = Path(root, rel)
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_text(text, encoding="utf-8")
            project = Project(language, pkg, pkg, root, files, [])
            names = cross_names(files, language)
            targets = sorted(files)
            rng.shuffle(targets)
            workspaces: dict = {}
            for target in targets[:files_per_project]:
                positions = positions_for(project, target, names[target], seed, per_kind)
                positions += [p for _ in range(random_per_file) if (p := _random_position(project, target, rng))]
                for pos in positions:
                    with_context = rng.random() >= no_context
                    force = rng.random() < force_definition      # drawn always: the same positions at any share
                    share = rng.choice(SHARES)
                    snippets = (project_snippets(root, pos.path, pos.document, pos.offset, language,
                                                 CONTEXT_SOURCES, workspaces) if with_context else [])
                    if snippets and pos.name and force:
                        snippets = with_definition(snippets, pos.name, -(pos.offset % 2))   # first, or among rank 0
                    settings = pipeline.Settings(budget_tokens=budget_tokens, snippet_share=share)
                    plan = pipeline.plan(SourceFile(uri_of(pos.path), language, pos.document), pos.offset, engine,
                                         settings, snippets=snippets)
                    target_ids = tok.encode(plan.heal + pos.expected, add_special_tokens=False).ids + [eos]
                    yield Sample(tok.encode(plan.prompt, add_special_tokens=True).ids, target_ids, pos.kind,
                                 bool(snippets), pkg)
            shutil.rmtree(root, ignore_errors=True)
            if progress:
                progress(n + 1, len(keys), pkg, language)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m completer.training.crossfile", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", help="a package corpus archive (train.jsonl.xz of completer.training.package_corpus)")
    ap.add_argument("out", help="OUT.npz: ids (uint16, every sample's prompt, target and end token, one after "
                                "another), starts (where each sample begins) and targets (each one's target length, "
                                "end token included); OUT.npz.json beside it with counts")
    ap.add_argument("--model", default="house:smollm2/fim", help="whose tokenizer and template the prompts use")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--per-kind", type=int, default=2, help="cross-file positions of each kind per file")
    ap.add_argument("--random-per-file", type=int, default=2, help="random FIM cuts per file")
    ap.add_argument("--files-per-project", type=int, default=40)
    ap.add_argument("--no-context", type=float, default=0.2, help="share of samples made without snippets")
    ap.add_argument("--force-definition", type=float, default=0.0,
                    help="share of cross-file positions with snippets whose block is made to hold the needed name's "
                         "definition (where the imports source found it)")
    ap.add_argument("--budget-tokens", type=int, default=896,
                    help="the prompts' budget: with the target a sample fits a 1,024-token training window whole")
    args = ap.parse_args(argv)
    import asyncio
    from completer.engine import EngineConfig, create_engine

    t0 = time.time()
    projects = read_projects(args.corpus)
    engine = create_engine(EngineConfig(model=args.model, device="cpu", speculation="none"))

    def progress(i, n, pkg, language):
        el = time.time() - t0
        print(f"[{i}/{n}] {pkg} {language}: {len(stream_parts)} samples, {el:.0f}s, ETA {el / i * (n - i):.0f}s",
              file=sys.stderr, flush=True)

    stream_parts: list[np.ndarray] = []
    target_lens: list[int] = []
    counts: dict[str, int] = {}
    try:
        for s in samples(projects, engine, seed=args.seed, per_kind=args.per_kind,
                         random_per_file=args.random_per_file, files_per_project=args.files_per_project,
                         no_context=args.no_context, budget_tokens=args.budget_tokens,
                         force_definition=args.force_definition, progress=progress):
            stream_parts.append(np.asarray(s.prompt + s.target, dtype=np.uint16))
            target_lens.append(len(s.target))
            key = f"{s.kind}, {'with' if s.context else 'without'} context"
            counts[key] = counts.get(key, 0) + 1
    finally:
        asyncio.run(engine.close())
    stream = np.concatenate(stream_parts) if stream_parts else np.zeros(0, dtype=np.uint16)
    starts = np.cumsum([0] + [len(p) for p in stream_parts[:-1]]).astype(np.int64)
    np.savez(args.out, ids=stream, starts=starts, targets=np.asarray(target_lens, dtype=np.int64))
    meta = {"command": "python -m completer.training.crossfile " + " ".join(argv if argv is not None else sys.argv[1:]),
            "samples": len(stream_parts), "tokens": int(len(stream)), "by_kind": counts,
            "projects": len(projects), "seconds": round(time.time() - t0, 1)}
    Path(str(args.out) + ".json").write_text(json.dumps(meta, indent=1) + "\n")
    print(json.dumps(meta, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
