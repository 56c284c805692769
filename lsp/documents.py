"""Open documents: text + version, edits from the client, and LSP positions <-> ``str`` offsets.

Positions count in the encoding negotiated in ``initialize`` (``utf-16`` by default, ``utf-8`` or ``utf-32`` when
the client offers them). Line ends are ``\\n``, ``\\r\\n`` and ``\\r`` as LSP says.

Rules (LSP 3.17 "Position"):
- a ``character`` past the end of its line means the end of that line (clamped, as the spec says);
- a ``line`` past the last line is an error, except ``(line_count, 0)``, the end of the document, which clients
  send as the end of a whole-document range;
- a ``character`` that falls inside a UTF-16 surrogate pair or inside a UTF-8 byte sequence is an error.

Document sync is a handful of string operations and mutates the store; completion works on an immutable
:class:`Snapshot`. Every change of one ``didChange`` is checked before any is applied, so a rejected change leaves
the document exactly as it was (nothing the user typed is half-applied).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from completer.context.syntax import Trees

ENCODINGS = ("utf-16", "utf-8", "utf-32")
_EOL = re.compile(r"\r\n|\r|\n")


class DocumentError(ValueError):
    """Bad document operation (unknown document, stale version, invalid position); the message names the problem."""


class UnknownDocument(DocumentError):
    pass


class PositionError(DocumentError):
    pass


def _units(ch: str, encoding: str) -> int:
    cp = ord(ch)
    if encoding == "utf-16":
        return 2 if cp > 0xFFFF else 1
    if encoding == "utf-8":
        return 1 if cp < 0x80 else 2 if cp < 0x800 else 3 if cp < 0x10000 else 4
    return 1


def line_starts(text: str) -> list[int]:
    """Offsets where each line starts (always at least one line). Computed on every edit: with ``\n`` line ends only
    (the usual case) from the lengths of the lines, several times faster than the regular expression."""
    if "\r" in text:
        return [0] + [m.end() for m in _EOL.finditer(text)]
    starts = list(itertools.accumulate(map(len, text.split("\n")), lambda start, n: start + n + 1, initial=0))
    starts.pop()
    return starts


def column_to_index(line: str, character: int, encoding: str) -> int:
    """``character`` (code units of ``encoding``) within ``line`` (no line end) -> index into ``line``.

    Past the end of the line clamps to its end; a position inside a multi-unit character is a PositionError.
    """
    if character < 0:
        raise PositionError(f"character must be >= 0, got {character}")
    if encoding == "utf-32" or line.isascii():
        return min(character, len(line))
    units = 0
    for i, ch in enumerate(line):
        if units == character:
            return i
        units += _units(ch, encoding)
        if units > character:
            what = "a UTF-16 surrogate pair" if encoding == "utf-16" else "a UTF-8 byte sequence"
            raise PositionError(f"character {character} falls inside {what} (U+{ord(ch):04X} at index {i})")
    return len(line)


def index_to_column(line: str, index: int, encoding: str) -> int:
    """Index into ``line`` -> code units of ``encoding``."""
    if encoding == "utf-32" or line.isascii():
        return index
    return sum(_units(ch, encoding) for ch in line[:index])


@dataclass(frozen=True)
class Snapshot:
    """One version of one document, immutable: what a completion request works on."""

    uri: str
    text: str
    version: int
    language_id: str = ""
    encoding: str = "utf-16"
    _starts: list[int] = field(default_factory=list, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.encoding not in ENCODINGS:
            raise ValueError(f"position encoding must be one of {ENCODINGS}, got {self.encoding!r}")
        if not self._starts:
            self._starts.extend(line_starts(self.text))

    @property
    def line_count(self) -> int:
        return len(self._starts)

    def _line_bounds(self, line: int) -> tuple[int, int]:
        start = self._starts[line]
        end = self._starts[line + 1] if line + 1 < len(self._starts) else len(self.text)
        eol = self.text[start:end]
        end -= len(eol) - len(eol.rstrip("\r\n"))
        return start, end

    def offset_at(self, line: int, character: int) -> int:
        """LSP position -> offset into ``text`` (see the module docstring for clamping and errors)."""
        if line < 0:
            raise PositionError(f"line must be >= 0, got {line}")
        if line >= self.line_count:
            if line == self.line_count and character == 0:
                return len(self.text)
            raise PositionError(
                f"line {line} is past the end of {self.uri} ({self.line_count} lines, last is {self.line_count - 1})"
            )
        start, end = self._line_bounds(line)
        return start + column_to_index(self.text[start:end], character, self.encoding)

    def position_at(self, offset: int) -> tuple[int, int]:
        """Offset into ``text`` -> (line, character) in this snapshot's encoding."""
        if not 0 <= offset <= len(self.text):
            raise PositionError(f"offset {offset} is outside the document (length {len(self.text)})")
        lo, hi = 0, len(self._starts) - 1
        while lo < hi:  # last line start <= offset
            mid = (lo + hi + 1) // 2
            if self._starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        start, end = self._line_bounds(lo)
        return lo, index_to_column(self.text[start:end], min(offset, end) - start, self.encoding)


@dataclass(frozen=True)
class Change:
    """One content change: ``range`` None replaces the whole text; else ((line, char), (line, char))."""

    text: str
    range: tuple[tuple[int, int], tuple[int, int]] | None = None


def apply_changes(snapshot: Snapshot, changes: Iterable[Change], version: int) -> Snapshot:
    """The snapshot after ``changes`` (applied in order, each against the result of the previous)."""
    cur = snapshot
    for n, ch in enumerate(changes):
        if ch.range is None:
            text = ch.text
        else:
            (sl, sc), (el, ec) = ch.range
            try:
                a, b = cur.offset_at(sl, sc), cur.offset_at(el, ec)
            except PositionError as e:
                raise PositionError(f"change {n}: {e}") from None
            if b < a:
                raise PositionError(f"change {n}: range end ({el}, {ec}) is before its start ({sl}, {sc})")
            text = cur.text[:a] + ch.text + cur.text[b:]
        cur = Snapshot(cur.uri, text, version, cur.language_id, cur.encoding)
    if cur is snapshot:  # no changes: still a new version
        cur = Snapshot(cur.uri, cur.text, version, cur.language_id, cur.encoding)
    return cur


class DocumentStore:
    """The open documents of one client connection, and their parse trees (``trees``: tree-sitter re-parses a
    document incrementally from its previous tree; dropped when the document closes)."""

    def __init__(self, encoding: str = "utf-16", max_chars: int | None = None):
        if encoding not in ENCODINGS:
            raise ValueError(f"position encoding must be one of {ENCODINGS}, got {encoding!r}")
        self.encoding = encoding
        self.max_chars = max_chars
        self._docs: dict[str, Snapshot] = {}
        self.trees = Trees()

    def __contains__(self, uri: str) -> bool:
        return uri in self._docs

    def __len__(self) -> int:
        return len(self._docs)

    def uris(self) -> list[str]:
        return list(self._docs)

    def _check_size(self, uri: str, text: str) -> None:
        if self.max_chars is not None and len(text) > self.max_chars:
            raise DocumentError(
                f"{uri} has {len(text)} characters, more than the limit maxDocumentChars={self.max_chars}"
            )

    def open(self, uri: str, text: str, version: int, language_id: str = "") -> Snapshot:
        self._check_size(uri, text)
        snap = Snapshot(uri, text, version, language_id, self.encoding)
        self._docs[uri] = snap
        return snap

    def get(self, uri: str) -> Snapshot:
        try:
            return self._docs[uri]
        except KeyError:
            raise UnknownDocument(f"document {uri} is not open (send textDocument/didOpen first)") from None

    def change(self, uri: str, version: int | None, changes: Sequence[Change]) -> Snapshot:
        """Apply one ``didChange``. A version not newer than the current one is rejected, the text left as it was."""
        cur = self.get(uri)
        if version is not None and version <= cur.version:
            raise DocumentError(
                f"out-of-order change for {uri}: version {version} is not newer than the current {cur.version}; "
                "the change was not applied"
            )
        new = apply_changes(cur, changes, cur.version + 1 if version is None else version)
        self._check_size(uri, new.text)
        self._docs[uri] = new
        return new

    def close(self, uri: str) -> None:
        self.trees.drop(uri)
        if self._docs.pop(uri, None) is None:
            raise UnknownDocument(f"document {uri} is not open, cannot close it")
