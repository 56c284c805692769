"""The public typing-trace format (see bench/traces/FORMAT.md): read, write, validate, and apply LSP edits.

A trace is JSONL: a header line, then one event a line. Positions are LSP positions in UTF-16 code units.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

FORMAT_VERSION = 1


class TraceError(ValueError):
    """A malformed trace; the message names the line."""


@dataclass
class Header:
    uri: str
    language_id: str
    text: str
    meta: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"trace": FORMAT_VERSION, "uri": self.uri, "languageId": self.language_id, "text": self.text,
                "meta": self.meta}


@dataclass
class Event:
    t_ms: float
    uri: str
    edit: dict | None = None        # TextDocumentContentChangeEvent: {"range": {...}, "text": "..."} or {"text"}
    accept: dict | None = None      # {"intended": "text the user is about to type"}
    reject: dict | None = None      # {} : the user dismissed the ghost text (Escape)
    open: dict | None = None        # {"languageId", "text"}: another document opened
    cursor: dict | None = None      # optional {"line", "character"} after the edit (default: end of inserted text)

    def to_json(self) -> dict:
        t = round(self.t_ms, 1)
        d: dict[str, Any] = {"t_ms": int(t) if t == int(t) else t, "uri": self.uri}
        for k in ("edit", "accept", "reject", "open", "cursor"):
            v = getattr(self, k)
            if v is not None:
                d[k] = v
        return d


@dataclass
class Trace:
    header: Header
    events: list[Event]

    @property
    def keystrokes(self) -> int:
        return sum(1 for e in self.events if e.edit is not None)


def dumps(trace: Trace) -> str:
    lines = [json.dumps(trace.header.to_json(), ensure_ascii=False)]
    lines += [json.dumps(e.to_json(), ensure_ascii=False) for e in trace.events]
    return "\n".join(lines) + "\n"


def save(trace: Trace, path: str | Path) -> None:
    Path(path).write_text(dumps(trace), encoding="utf-8")


def _pos(where: str, p: Any) -> None:
    if not (isinstance(p, dict) and all(isinstance(p.get(k), int) and not isinstance(p.get(k), bool)
                                        and p[k] >= 0 for k in ("line", "character"))):
        raise TraceError(f"{where}: expected a position {{line, character}} of non-negative integers, got {p!r}")


def parse_event(where: str, d: Any) -> Event:
    if not isinstance(d, dict):
        raise TraceError(f"{where}: expected a JSON object")
    t, uri = d.get("t_ms"), d.get("uri")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or t < 0:
        raise TraceError(f"{where}: t_ms must be a non-negative number, got {t!r}")
    if not isinstance(uri, str) or not uri:
        raise TraceError(f"{where}: uri must be a non-empty string")
    kinds = [k for k in ("edit", "accept", "reject", "open") if k in d]
    if len(kinds) != 1:
        raise TraceError(f"{where}: an event has exactly one of edit/accept/reject/open, got {kinds or 'none'}")
    unknown = set(d) - {"t_ms", "uri", "edit", "accept", "reject", "open", "cursor"}
    if unknown:
        raise TraceError(f"{where}: unknown field(s) {sorted(unknown)}")
    ev = Event(float(t), uri, **{kinds[0]: d[kinds[0]]}, cursor=d.get("cursor"))
    if ev.edit is not None:
        e = ev.edit
        if not isinstance(e, dict) or not isinstance(e.get("text"), str):
            raise TraceError(f"{where}: edit must be an object with a string 'text'")
        if "range" in e:
            r = e["range"]
            if not isinstance(r, dict):
                raise TraceError(f"{where}: edit.range must be an object")
            _pos(f"{where}: edit.range.start", r.get("start"))
            _pos(f"{where}: edit.range.end", r.get("end"))
    if ev.accept is not None and not (isinstance(ev.accept, dict) and isinstance(ev.accept.get("intended"), str)):
        raise TraceError(f"{where}: accept must be an object with a string 'intended'")
    if ev.reject is not None and not isinstance(ev.reject, dict):
        raise TraceError(f"{where}: reject must be an object")
    if ev.open is not None and not (isinstance(ev.open, dict) and isinstance(ev.open.get("text"), str)
                                    and isinstance(ev.open.get("languageId"), str)):
        raise TraceError(f"{where}: open must be an object with string 'languageId' and 'text'")
    if ev.cursor is not None:
        _pos(f"{where}: cursor", ev.cursor)
    return ev


def loads(text: str, name: str = "<trace>") -> Trace:
    lines = [(i + 1, ln) for i, ln in enumerate(text.splitlines()) if ln.strip()]
    if not lines:
        raise TraceError(f"{name}: empty trace")
    objs = []
    for no, ln in lines:
        try:
            objs.append((no, json.loads(ln)))
        except json.JSONDecodeError as e:
            raise TraceError(f"{name}:{no}: not JSON: {e}") from None
    no, h = objs[0]
    if not isinstance(h, dict) or h.get("trace") != FORMAT_VERSION:
        raise TraceError(f"{name}:{no}: the first line must be a header with \"trace\": {FORMAT_VERSION}")
    for k, key in (("uri", "uri"), ("languageId", "languageId"), ("text", "text")):
        if not isinstance(h.get(key), str):
            raise TraceError(f"{name}:{no}: header.{k} must be a string")
    header = Header(h["uri"], h["languageId"], h["text"], h.get("meta") or {})
    events = [parse_event(f"{name}:{n}", d) for n, d in objs[1:]]
    for (n, _), a, b in zip(objs[2:], events, events[1:]):
        if b.t_ms < a.t_ms:
            raise TraceError(f"{name}:{n}: t_ms goes backwards ({b.t_ms} < {a.t_ms})")
    return Trace(header, events)


def load(path: str | Path) -> Trace:
    return loads(Path(path).read_text(encoding="utf-8"), str(path))


# --- UTF-16 positions ---------------------------------------------------------------------------------------
def _u16(s: str) -> int:
    return len(s.encode("utf-16-le")) // 2


def offset_of(text: str, pos: dict) -> int:
    """String offset of an LSP position (UTF-16); a character past the line end means the line end (LSP)."""
    line, ch = pos["line"], pos["character"]
    start = 0
    for _ in range(line):
        nl = text.find("\n", start)
        if nl < 0:
            return len(text)   # line past the end: end of document
        start = nl + 1
    end = text.find("\n", start)
    end = len(text) if end < 0 else end
    units = 0
    for i in range(start, end):
        if units >= ch:
            return i
        units += 2 if ord(text[i]) > 0xFFFF else 1
        if units > ch:
            raise TraceError(f"position {pos} falls inside a surrogate pair")
    return end


def position_of(text: str, offset: int) -> dict:
    before = text[:offset]
    line = before.count("\n")
    return {"line": line, "character": _u16(before[before.rfind("\n") + 1:])}


def apply_edit(text: str, edit: dict) -> tuple[str, int]:
    """(new text, cursor offset after the edit: end of the inserted text)."""
    if "range" not in edit:
        return edit["text"], len(edit["text"])
    a = offset_of(text, edit["range"]["start"])
    b = offset_of(text, edit["range"]["end"])
    if b < a:
        raise TraceError(f"edit range ends before it starts: {edit['range']}")
    return text[:a] + edit["text"] + text[b:], a + len(edit["text"])


def insert_edit(text: str, offset: int, s: str) -> dict:
    p = position_of(text, offset)
    return {"range": {"start": p, "end": p}, "text": s}


def delete_edit(text: str, offset: int, n: int = 1) -> dict:
    """Backspace ``n`` characters before ``offset``."""
    return {"range": {"start": position_of(text, offset - n), "end": position_of(text, offset)}, "text": ""}


def final_text(trace: Trace, uri: str | None = None) -> str:
    """The document text after every edit of the trace (accepts not applied: they depend on the server)."""
    uri = uri or trace.header.uri
    docs = {trace.header.uri: trace.header.text}
    for e in trace.events:
        if e.open is not None:
            docs[e.uri] = e.open["text"]
        elif e.edit is not None:
            docs[e.uri] = apply_edit(docs[e.uri], e.edit)[0]
    return docs[uri]


def load_all(paths: Iterable[str | Path]) -> list[tuple[str, Trace]]:
    out = []
    for p in paths:
        p = Path(p)
        files = sorted(p.glob("*.jsonl")) if p.is_dir() else [p]
        out += [(f.stem, load(f)) for f in files]
    return out
