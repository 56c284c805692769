"""Recently edited ranges (Continue's and Tabby's "recent edits"): where the user changed code lately, in this
document and others, is often where the next completion needs names from.

``EditLog`` keeps, per document, the line ranges of its last edits (merged when they touch); ``edit_snippets``
turns the most recent ones into snippets of the documents' current text (a few lines around each range), leaving
out the ranges the prompt's own window around the cursor shows anyway. Plain data: the language server records
each ``didChange`` into it (``lsp/context_sources.py``).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

from .plan import Snippet

MAX_RANGES = 8          # per document
AROUND = 2              # lines of context shown around an edited range
MAX_LINES = 12          # per snippet
RANK = 50               # snippet ranks from here: after the imported names' definitions, before similar windows


@dataclass
class EditRange:
    first: int           # first edited line (current text's numbering)
    last: int
    seq: int             # when: a counter over every edit of the log


class EditLog:
    def __init__(self, max_documents: int = 16):
        self.max_documents = max_documents
        self._docs: "OrderedDict[str, list[EditRange]]" = OrderedDict()
        self._seq = 0

    def record(self, uri: str, first: int, last: int, lines_added: int) -> None:
        """An edit replaced lines ``first..last`` by ``last - first + 1 + lines_added`` lines."""
        self._seq += 1
        ranges = self._docs.pop(uri, [])
        new_last = max(first, last + lines_added)
        kept = []
        for r in ranges:                    # shift the ranges below the edit, merge those it touches
            if r.first > last:
                r.first += lines_added
                r.last += lines_added
            elif r.last >= first - 1:
                first, new_last = min(first, r.first), max(new_last, r.last + (lines_added if r.last > last else 0))
                continue
            kept.append(r)
        kept.append(EditRange(first, new_last, self._seq))
        self._docs[uri] = kept[-MAX_RANGES:]
        while len(self._docs) > self.max_documents:
            self._docs.popitem(last=False)

    def drop(self, uri: str) -> None:
        self._docs.pop(uri, None)

    def recent(self) -> list[tuple[str, EditRange]]:
        """(uri, range), most recent first."""
        return sorted(((u, r) for u, rs in self._docs.items() for r in rs), key=lambda x: -x[1].seq)


def edit_snippets(log: EditLog, text_of: Callable[[str], str | None], name_of: Callable[[str], str],
                  this_uri: str, shown: tuple[int, int] | None = None, top: int = 3) -> list[Snippet]:
    """Snippets of the ``top`` most recent edited ranges (their current text, ``AROUND`` lines either side),
    skipping ranges of ``this_uri`` inside ``shown`` (lines the prompt's window already has)."""
    out: list[Snippet] = []
    for uri, r in log.recent():
        if len(out) >= top:
            break
        if uri == this_uri and shown is not None and shown[0] <= r.first and r.last <= shown[1]:
            continue
        text = text_of(uri)
        if text is None:
            continue
        lines = text.split("\n")
        a, b = max(0, r.first - AROUND), min(len(lines), r.last + AROUND + 1)
        body = lines[a:b][:MAX_LINES]
        if not any(l.strip() for l in body):
            continue
        out.append(Snippet(name_of(uri), "edit", tuple(body), rank=RANK + len(out)))
    return out
