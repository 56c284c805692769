"""Generate typing traces from real source files the models never trained on.

    python -m bench.make_traces [--out bench/traces] [--seed 0] [--python 2] [--js 1] [--c 1] [--chars 45]
                                [--rhythm fast|medium|slow] [--file PATH ...] [--typo-p 0.02]

``--file`` types a span of the given files instead (one trace each, the language from the suffix).

Sources: the held-out split of the house models' corpus (``completer.training.corpus.iter_texts("heldout")``) and
code in other languages found on this machine (JavaScript under /usr/lib/node_modules, C headers under
/usr/include). From each file a span of whole lines (about ``--chars`` characters of code) is cut out; the trace's
initial text is the file without that span and the events type it back at human pace:

- inter-key intervals (``--rhythm``): each trace's typist has a mean inter-key interval drawn from a distribution
  across typists; single intervals are log-normal around that mean (sigma 0.45, our choice). ``medium`` (the
  default, and the checked-in traces) is the per-participant distribution of Dhakal et al. 2018 ("Observations on
  Typing from 136 Million Keystrokes", CHI '18, doi 10.1145/3173574.3174220): mean IKI 238.66 ms, SD 111.60 ms
  across participants (Table 1, as we recall it; the full text was not at hand to re-check), clipped to
  120..500 ms. ``fast`` is the fast end of that study (a typist at ~120 words per minute: mean IKI ~80 ms, SD 12,
  clipped to 60..100 ms); ``slow`` is a hunt-and-peck or thinking typist (mean 450 ms, SD 80, clipped to
  350..650 ms). The line-end pauses below are the same for all (they are reading and thinking, not typing);
- longer pauses: x1.8 after punctuation, plus a log-normal pause (median 900 ms) at each line end;
- typos: with probability 2% per letter a wrong letter is typed, noticed 0-2 keys later (a 350 ms pause) and
  corrected with backspace (our choices);
- Enter inserts the newline plus the next line's indentation in one edit (an editor's auto-indent);
- an ``accept`` event 300 ms after a keystroke that is followed by a longer gap, carrying the text the user is
  about to type (the replay accepts the ghost text actually shown if it is a prefix of that text).

Seeded: the same seed and sources give byte-identical traces.
"""

from __future__ import annotations

import argparse
import math
import random
from pathlib import Path

from lsp import trace as tr

IKI_MEAN_MS, IKI_SD_MS = 238.66, 111.60       # Dhakal et al. 2018, per-participant mean IKI
# --rhythm: (mean, SD, lowest, highest) of a typist's mean inter-key interval, ms
RHYTHMS = {"fast": (80.0, 12.0, 60.0, 100.0), "medium": (IKI_MEAN_MS, IKI_SD_MS, 120.0, 500.0),
           "slow": (450.0, 80.0, 350.0, 650.0)}
IKI_SIGMA = 0.45
PUNCT = set(".,;:()[]{}=<>+-*/\"'")
PUNCT_FACTOR = 1.8
LINE_END_PAUSE_MEDIAN_MS, LINE_END_SIGMA = 900.0, 0.5
TYPO_P, NOTICE_PAUSE_MS = 0.02, 350.0
REACTION_MS = 300.0
INTENDED_CHARS = 200
LANG = {".py": "python", ".js": "javascript", ".mjs": "javascript", ".h": "c", ".c": "c"}


class Typist:
    def __init__(self, rng: random.Random, rhythm: str = "medium"):
        if rhythm not in RHYTHMS:
            raise ValueError(f"rhythm: expected one of {', '.join(RHYTHMS)}, got {rhythm!r}")
        mean, sd, lo, hi = RHYTHMS[rhythm]
        self.rng = rng
        self.mean = min(hi, max(lo, rng.gauss(mean, sd)))

    def iki(self, prev: str) -> float:
        mu = math.log(self.mean) - IKI_SIGMA ** 2 / 2          # log-normal with mean self.mean
        t = self.rng.lognormvariate(mu, IKI_SIGMA)
        if prev in PUNCT:
            t *= PUNCT_FACTOR
        if prev == "\n":
            t += self.rng.lognormvariate(math.log(LINE_END_PAUSE_MEDIAN_MS), LINE_END_SIGMA)
        return t


def _is_code(line: str) -> bool:
    s = line.strip()
    return len(s) >= 8 and not s.startswith(("#", "//", "/*", "*", '"""', "'''", "@"))


def pick_span(text: str, rng: random.Random, chars: int) -> tuple[int, int] | None:
    """(start, end) offsets of whole lines of code (from the first line's code to the last line's end)."""
    lines = text.split("\n")
    starts = [i for i in range(len(lines)) if _is_code(lines[i]) and lines[i].startswith((" ", "\t"))]
    rng.shuffle(starts)
    for i in starts[:50]:
        j, n = i, 0
        while j < len(lines) and n < chars:
            if not lines[j].strip() and j > i:
                break
            n += len(lines[j].strip()) + 1
            j += 1
        if n < chars // 2 or not all(_is_code(ln) for ln in lines[i:j]):
            continue
        off = sum(len(ln) + 1 for ln in lines[:i])
        start = off + len(lines[i]) - len(lines[i].lstrip())
        end = sum(len(ln) + 1 for ln in lines[:j]) - 1
        return start, end
    return None


def type_span(uri: str, text: str, start: int, end: int, rng: random.Random, t0: float = 500.0,
              rhythm: str = "medium", typo_p: float = TYPO_P, typist: Typist | None = None) -> list[tr.Event]:
    """Events that type ``text[start:end]`` into ``text`` without it, with typos, pauses and accept points, at the
    pace of a ``rhythm`` typist (see RHYTHMS)."""
    typist = typist or Typist(rng, rhythm)
    span = text[start:end]
    doc = text[:start] + text[end:]
    cur = start
    t = t0
    events: list[tr.Event] = []
    keys: list[tuple[float, str]] = []      # (time, kind) of keystrokes, for placing accept points afterwards
    i = 0
    prev = ""

    def key(edit: dict, kind: str) -> None:
        nonlocal doc, cur
        doc, cur = tr.apply_edit(doc, edit)
        events.append(tr.Event(t, uri, edit=edit))
        keys.append((t, kind))

    while i < len(span):
        c = span[i]
        if c == "\n":
            j = i + 1
            while j < len(span) and span[j] in " \t":
                j += 1
            s = span[i:j]
        else:
            j, s = i + 1, c
        if c.isalpha() and rng.random() < typo_p:
            wrong = rng.choice([x for x in "etaoinshrdlu" if x != c.lower()])
            key(tr.insert_edit(doc, cur, wrong), "typo")
            extra = 0
            while extra < rng.randint(0, 2) and j + extra < len(span) and span[j - 1 + extra + 1] not in "\n":
                t += typist.iki(prev)
                key(tr.insert_edit(doc, cur, span[j + extra]), "typo")
                extra += 1
            t += NOTICE_PAUSE_MS
            for _ in range(extra + 1):
                key(tr.delete_edit(doc, cur, 1), "typo")
                t += typist.iki("") * 0.8
        key(tr.insert_edit(doc, cur, s), "ok")
        prev = s[0]
        t += typist.iki(prev)
        i = j
        # an accept point when the user pauses long enough to look at the ghost text
        if i < len(span) and t - keys[-1][0] > REACTION_MS + 50:
            events.append(tr.Event(keys[-1][0] + REACTION_MS, uri, accept={"intended": span[i:i + INTENDED_CHARS]}))
    assert doc == text, "typing the span must restore the file"
    return events


def make_trace(name: str, text: str, language: str, rng: random.Random, chars: int, meta: dict,
               rhythm: str = "medium", typo_p: float = TYPO_P) -> tr.Trace | None:
    span = pick_span(text, rng, chars)
    if span is None:
        return None
    start, end = span
    uri = f"file:///bench/{name}"
    typist = Typist(rng, rhythm)
    events = type_span(uri, text, start, end, rng, rhythm=rhythm, typo_p=typo_p, typist=typist)
    # medium: the checked-in traces, byte for byte; other rhythms record the typist's mean inter-key interval
    extra = {} if rhythm == "medium" else {"rhythm": rhythm, "typist_mean_iki_ms": round(typist.mean, 1)}
    header = tr.Header(uri, language, text[:start] + text[end:],
                       {**meta, "span": [start, end], "typed_chars": end - start,
                        "generator": "bench.make_traces", **extra})
    return tr.Trace(header, events)


def _other_files(roots: list[str], exts: tuple[str, ...], lo: int = 2000, hi: int = 24000) -> list[Path]:
    out = []
    for r in roots:
        root = Path(r)
        if root.is_dir():
            out += [p for p in sorted(root.rglob("*")) if p.suffix in exts and p.is_file()
                    and lo <= p.stat().st_size <= hi and "test" not in p.name]
    return out


def sources(n_py: int, n_js: int, n_c: int, rng: random.Random) -> list[tuple[str, str, dict]]:
    """(relative name, text, meta) of the files to type from."""
    from completer.training import corpus

    out = []
    py = [(rel, t) for rel, t in corpus.iter_texts("heldout") if 2000 <= len(t) <= 24000]
    rng.shuffle(py)
    out += [(rel, t, {"source": f"held-out split: {rel}"}) for rel, t in py[:n_py * 3]]
    for n, roots, exts in ((n_js, ["/usr/lib/node_modules"], (".js",)), (n_c, ["/usr/include"], (".h",))):
        files = _other_files(roots, exts)
        rng.shuffle(files)
        for p in files[:n * 3]:
            try:
                out.append((p.name, p.read_text(encoding="utf-8"), {"source": str(p)}))
            except (OSError, UnicodeDecodeError):
                pass
    return out


def generate(out: Path, seed: int, n_py: int, n_js: int, n_c: int, chars: int, rhythm: str = "medium",
             files: list[Path] = (), typo_p: float = TYPO_P) -> list[Path]:
    """Traces from the held-out and machine sources, or (``files``) one from each file given."""
    rng = random.Random(seed)
    if files:
        want = {lang: len(files) for lang in LANG.values()}
        picked = [(p.name, p.read_text(encoding="utf-8"), {"source": str(p)}) for p in files]
        unknown = [p for p in files if p.suffix not in LANG]
        if unknown:
            raise SystemExit(f"--file {unknown[0]}: unknown language (suffixes: {', '.join(LANG)})")
    else:
        want = {"python": n_py, "javascript": n_js, "c": n_c}
        picked = sources(n_py, n_js, n_c, rng)
    made: list[Path] = []
    out.mkdir(parents=True, exist_ok=True)
    for rel, text, meta in picked:
        lang = LANG.get(Path(rel).suffix)
        if lang is None or want.get(lang, 0) <= 0:
            continue
        t = make_trace(Path(rel).name, text, lang, random.Random(f"{seed}:{rel}"), chars, {**meta, "seed": seed},
                       rhythm=rhythm, typo_p=typo_p)
        if t is None:
            continue
        want[lang] -= 1
        path = out / f"{'' if rhythm == 'medium' else rhythm + '-'}{lang}-{Path(rel).stem}.jsonl"
        tr.save(t, path)
        made.append(path)
    return made


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "traces")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--python", type=int, default=2)
    ap.add_argument("--js", type=int, default=1)
    ap.add_argument("--c", type=int, default=1)
    ap.add_argument("--chars", type=int, default=45, help="about this many characters typed per trace")
    ap.add_argument("--rhythm", choices=list(RHYTHMS), default="medium",
                    help="typing speed: fast (~80 ms between keys), medium (the study's spread, ~240 ms), slow "
                         "(~450 ms); recorded in the trace's meta and file name (medium: neither)")
    ap.add_argument("--file", type=Path, action="append", default=[],
                    help="type a span of this file instead of the held-out and machine sources (repeatable)")
    ap.add_argument("--typo-p", type=float, default=TYPO_P, help="chance of a typo per letter (corrected later)")
    a = ap.parse_args(argv)
    for p in generate(a.out, a.seed, a.python, a.js, a.c, a.chars, a.rhythm, a.file, a.typo_p):
        t = tr.load(p)
        dur = t.events[-1].t_ms / 1000 if t.events else 0
        print(f"{p}: {t.keystrokes} keystrokes, {dur:.1f} s, {t.header.meta['typed_chars']} chars typed")


if __name__ == "__main__":
    main()
