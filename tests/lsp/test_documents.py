"""Document store and position encodings, checked against an independent reference (Python's codecs)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lsp.documents import Change, DocumentError, DocumentStore, PositionError, Snapshot, UnknownDocument

CODEC = {"utf-16": ("utf-16-le", 2), "utf-8": ("utf-8", 1), "utf-32": ("utf-32-le", 4)}


def ref_lines(text: str) -> list[str]:
    """Lines without their ends (\\n, \\r\\n, \\r)."""
    return re.split(r"\r\n|\r|\n", text)


def ref_offset(text: str, line: int, character: int, encoding: str) -> int:
    codec, width = CODEC[encoding]
    starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", text)]
    content = ref_lines(text)[line]
    raw = content.encode(codec, "surrogatepass")[: character * width]
    return starts[line] + len(raw.decode(codec))


def ref_position(text: str, offset: int, encoding: str) -> tuple[int, int]:
    codec, width = CODEC[encoding]
    starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", text)]
    line = max(i for i, s in enumerate(starts) if s <= offset)
    content = ref_lines(text)[line]
    idx = min(offset - starts[line], len(content))
    return line, len(content[:idx].encode(codec)) // width


TEXT = "a = 1\r\nb = 'é'  # 😀 emoji\n中文 = 2\rlast"


@pytest.mark.parametrize("encoding", ["utf-16", "utf-8", "utf-32"])
def test_offsets_match_codecs(encoding):
    snap = Snapshot("file:///t.py", TEXT, 1, encoding=encoding)
    assert snap.line_count == 4
    for off in range(len(TEXT) + 1):
        line, ch = snap.position_at(off)
        assert (line, ch) == ref_position(TEXT, off, encoding)
        if TEXT[off - 1: off + 1] != "\r\n" or off == 0:  # between \r and \n is not a position
            assert snap.offset_at(line, ch) == min(off, snap.offset_at(line, 10_000))


def test_utf16_emoji_and_cjk():
    snap = Snapshot("u", "x = '😀中'\n", 1)
    # '😀' is 2 UTF-16 units: character 6 is after it, 5 is inside it
    assert snap.offset_at(0, 7) == len("x = '😀")
    assert snap.offset_at(0, 8) == len("x = '😀中")
    with pytest.raises(PositionError, match="surrogate pair"):
        snap.offset_at(0, 6)
    utf8 = Snapshot("u", "中x", 1, encoding="utf-8")
    assert utf8.offset_at(0, 3) == 1
    with pytest.raises(PositionError, match="UTF-8 byte sequence"):
        utf8.offset_at(0, 1)


def test_clamp_and_errors():
    snap = Snapshot("u", "ab\ncd", 1)
    assert snap.offset_at(0, 99) == 2          # past the line end: the line end (LSP)
    assert snap.offset_at(2, 0) == 5           # (line_count, 0): end of document
    with pytest.raises(PositionError, match="line 2 is past the end"):
        snap.offset_at(2, 1)
    with pytest.raises(PositionError, match="line 7 is past the end"):
        snap.offset_at(7, 0)
    with pytest.raises(PositionError, match=">= 0"):
        snap.offset_at(0, -1)


def test_store_versions_unknown_and_atomic_changes():
    store = DocumentStore()
    store.open("u", "hello\nworld", 1)
    store.change("u", 2, [Change("J", ((1, 0), (1, 1))), Change("!", ((1, 5), (1, 5)))])
    assert store.get("u").text == "hello\nJorld!"
    with pytest.raises(DocumentError, match="out-of-order"):
        store.change("u", 2, [Change("x", ((0, 0), (0, 0)))])
    with pytest.raises(PositionError, match="change 1"):  # second change invalid: first not applied either
        store.change("u", 3, [Change("x", ((0, 0), (0, 0))), Change("y", ((9, 0), (9, 0)))])
    assert store.get("u").text == "hello\nJorld!" and store.get("u").version == 2
    store.change("u", 3, [Change("new text")])
    assert store.get("u").text == "new text"
    with pytest.raises(UnknownDocument, match="not open"):
        store.get("file:///nope")
    store.close("u")
    with pytest.raises(UnknownDocument):
        store.change("u", 9, [])


def test_size_limit():
    store = DocumentStore(max_chars=10)
    with pytest.raises(DocumentError, match="maxDocumentChars=10"):
        store.open("u", "x" * 11, 1)
    store.open("u", "x" * 10, 1)
    with pytest.raises(DocumentError, match="maxDocumentChars"):
        store.change("u", 2, [Change("y", ((0, 0), (0, 0)))])
    assert store.get("u").text == "x" * 10


ALPHABET = st.sampled_from(list("ab \t()") + ["\n", "\r\n", "\r", "é", "中", "😀", "𝔘"])
TEXTS = st.lists(ALPHABET, max_size=30).map("".join)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), encoding=st.sampled_from(["utf-16", "utf-8", "utf-32"]))
def test_incremental_edits_match_reference(data, encoding):
    """Random edits at valid positions: the store's text equals a reference applying them by codec offsets."""
    text = data.draw(TEXTS)
    store = DocumentStore(encoding)
    store.open("u", text, 0)
    ref = text
    for version in range(1, data.draw(st.integers(1, 6)) + 1):
        snap = store.get("u")
        # pick two positions from real offsets (not between \r and \n)
        offs = [o for o in range(len(ref) + 1) if not (0 < o < len(ref) and ref[o - 1] == "\r" and ref[o] == "\n")]
        a, b = sorted(data.draw(st.lists(st.sampled_from(offs), min_size=2, max_size=2)))
        pa, pb = ref_position(ref, a, encoding), ref_position(ref, b, encoding)
        new = data.draw(TEXTS)
        store.change("u", version, [Change(new, (pa, pb))])
        ref = ref[: ref_offset(ref, *pa, encoding)] + new + ref[ref_offset(ref, *pb, encoding):]
        assert store.get("u").text == ref
        assert snap.text != ref or snap.version == version - 1  # snapshots are immutable


@settings(max_examples=200, deadline=None)
@given(text=TEXTS, line=st.integers(0, 8), character=st.integers(0, 12))
def test_every_position_is_valid_or_a_clear_error(text, line, character):
    snap = Snapshot("u", text, 1)
    try:
        off = snap.offset_at(line, character)
    except PositionError as e:
        assert str(e)
        return
    assert 0 <= off <= len(text)
    if line < len(ref_lines(text)):
        assert off == ref_offset(text, line, min(character, len(ref_lines(text)[line].encode("utf-16-le")) // 2),
                                 "utf-16")


def test_parse_trees_belong_to_the_store_and_go_with_the_document():
    """Each connection's store keeps its own documents' trees (incremental re-parsing) and drops one on close."""
    from completer.context import SourceFile, build_prompt

    a, b = DocumentStore(), DocumentStore()
    snap = a.open("file:///x.py", "def f(x):\n    return x\n", 1, "python")
    b.open("file:///x.py", snap.text, 1, "python")
    build_prompt(SourceFile(snap.uri, "python", snap.text), len(snap.text), count_tokens=len, trees=a.trees)
    assert len(a.trees) == 1 and len(b.trees) == 0
    a.close(snap.uri)
    assert len(a.trees) == 0
