"""A reference model of LSP document sync, written independently of ``lsp.documents``: the text is kept as a list
of UTF-16 code units and positions are resolved on it directly (LSP 3.17: a character past the end of a line
clamps to the line end; a line past the last line is an error except (line_count, 0); a position inside a
surrogate pair is an error; a ``didChange`` is all-or-nothing; a version not newer than the current one is
refused)."""

from __future__ import annotations


def units(text: str) -> list[int]:
    b = text.encode("utf-16-le", "surrogatepass")
    return [b[i] | b[i + 1] << 8 for i in range(0, len(b), 2)]


def text_of(u: list[int]) -> str:
    return b"".join(x.to_bytes(2, "little") for x in u).decode("utf-16-le", "surrogatepass")


CR, LF = 0x0D, 0x0A


def line_spans(u: list[int]) -> list[tuple[int, int]]:
    """(start, end without line terminator) of every line."""
    spans, start, i = [], 0, 0
    while i < len(u):
        if u[i] in (CR, LF):
            end = i
            i += 2 if u[i] == CR and i + 1 < len(u) and u[i + 1] == LF else 1
            spans.append((start, end))
            start = i
        else:
            i += 1
    spans.append((start, len(u)))
    return spans


class Invalid(Exception):
    pass


def offset(u: list[int], line: int, character: int) -> int:
    spans = line_spans(u)
    if line < 0 or character < 0:
        raise Invalid("negative")
    if line >= len(spans):
        if line == len(spans) and character == 0:
            return len(u)
        raise Invalid("line past the end")
    start, end = spans[line]
    pos = min(start + character, end)
    if start < pos < end and 0xDC00 <= u[pos] <= 0xDFFF and 0xD800 <= u[pos - 1] <= 0xDBFF:
        raise Invalid("inside a surrogate pair")
    return pos


class Doc:
    def __init__(self, text: str, version: int):
        self.u, self.version = units(text), version

    @property
    def text(self) -> str:
        return text_of(self.u)

    def change(self, version: int, changes: list[tuple[tuple[tuple[int, int], tuple[int, int]] | None, str]],
               max_chars: int | None = None) -> bool:
        """Apply a didChange; False (and no change) if the server must refuse it."""
        if version <= self.version:
            return False
        u = list(self.u)
        for rng, text in changes:
            if rng is None:
                u = units(text)
                continue
            try:
                a, b = offset(u, *rng[0]), offset(u, *rng[1])
            except Invalid:
                return False
            if b < a:
                return False
            u = u[:a] + units(text) + u[b:]
        if max_chars is not None and len(text_of(u)) > max_chars:
            return False
        self.u, self.version = u, version
        return True
