"""Windows of recently used files that look like the code at the cursor (Copilot's "neighboring tabs").

The query is the identifier set of the ``WINDOW_LINES`` lines up to the cursor; each recently used file of the same
language family is cut into windows of ``WINDOW_LINES`` lines every ``STEP_LINES`` lines, each window reduced to its
identifier set (``index``: computed once per file text and cached); the best window of each file by Jaccard
similarity, the ``top`` best files above ``MIN_SCORE``, become snippets. Identifier sets leave out each language's
keywords (every file shares them).
"""

from __future__ import annotations

import functools
import re
import time
from typing import Sequence

from .plan import Snippet

WINDOW_LINES = 20       # Copilot's are 60 lines for a ~6,000-character budget; a 1,024-token prompt holds ~20
STEP_LINES = 5
MIN_SCORE = 0.1
TOP = 4
RANK = 150              # snippet ranks from here: after the imported names' definitions (workspace.TIER_RANK tiers
                        # 0 and 1), before the imported files' other definitions (tier 2)
_IDENT = re.compile(r"[A-Za-z_]\w+")
KEYWORDS = frozenset("""
and as assert async await break case catch class const continue def default defer del do elif else enum except
export extends false False final finally fn for from func function go if impl import in interface is lambda let
loop match mod mut new nil None nonlocal not null or package pass pub raise range return self Self static struct
super switch this throw true True try type typeof use var void while with yield int char unsigned long short
double float bool string size_t uint8_t uint32_t uint64_t int32_t int64_t usize u8 u32 u64 i32 i64 str
""".split())


def identifiers(text: str) -> frozenset[str]:
    return frozenset(w for w in _IDENT.findall(text) if w not in KEYWORDS)


def jaccard(a: frozenset, b: frozenset) -> float:
    if not a or not b:
        return 0.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


@functools.lru_cache(maxsize=64)
def index(text: str) -> tuple[tuple[int, frozenset], ...]:
    """(first line, identifier set) of each window of ``text``."""
    lines = text.split("\n")
    out = []
    for start in range(0, max(1, len(lines) - WINDOW_LINES // 2), STEP_LINES):
        out.append((start, identifiers("\n".join(lines[start:start + WINDOW_LINES]))))
    return tuple(out)


def query_window(text: str, offset: int) -> str:
    """The ``WINDOW_LINES`` lines up to the cursor (the cursor's line as far as the cursor)."""
    start = offset
    for _ in range(WINDOW_LINES):
        nl = text.rfind("\n", 0, start)
        if nl < 0:
            start = 0
            break
        start = nl
    return text[start:offset]


def similar_snippets(query: str, files: Sequence[tuple[str, str]], top: int = TOP, max_lines: int = WINDOW_LINES,
                     deadline: float | None = None) -> list[Snippet]:
    """The best window of each of ``files`` ((name, text), most recently used first) for the ``query`` text, the
    ``top`` best above ``MIN_SCORE``, best first; stops at ``deadline`` with what it has."""
    q = identifiers(query)
    scored = []
    for order, (name, text) in enumerate(files):
        if deadline is not None and time.monotonic() > deadline:
            break
        best = max(((jaccard(q, ids), -start, start) for start, ids in index(text)), default=None)
        if best is not None and best[0] >= MIN_SCORE:
            scored.append((best[0], -order, name, best[2], text))
    scored.sort(reverse=True)
    out = []
    for rank, (score, _, name, start, text) in enumerate(scored[:top]):
        lines = text.split("\n")[start:start + max_lines]
        while lines and not lines[-1].strip():
            lines.pop()
        out.append(Snippet(name, "similar", tuple(lines), rank=RANK + rank, score=round(score, 4)))
    return out
