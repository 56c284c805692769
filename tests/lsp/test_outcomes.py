"""Outcomes of shown completions: the plain functions (classify, retained_chars, partial_kind) and the per-language
counts an editor's reports and the document's later contents give."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from lsp.outcomes import (ACCEPTED, GONE, PENDING, REJECTED, TYPING, Outcomes, Shown, classify, partial_kind,
                          retained_chars)

BEFORE, AFTER, GHOST = "def f(x):\n    return ", "\n\nprint(1)\n", "compute(x, 2)"


def shown() -> Shown:
    return Shown("file:///a.py", "python", BEFORE, AFTER, GHOST)


def test_classify_tells_accept_typing_reject_and_gone():
    s = shown()
    assert classify(s, BEFORE + AFTER) == (PENDING, 0)
    assert classify(s, BEFORE + "compute" + AFTER) == (ACCEPTED, 7)        # one edit put in a word
    s.last_inserted = "compute"
    assert classify(s, BEFORE + "compute(" + AFTER) == (TYPING, 8)         # then a character typed
    assert classify(s, BEFORE + "comb" + AFTER) == (REJECTED, 3)
    assert classify(s, "x = 1\n" + AFTER) == (GONE, 0)


def test_partial_kinds_and_retention():
    assert partial_kind("foo bar\nbaz", 3) == "word"
    assert partial_kind("foo bar\nbaz", 7) == "line"
    assert partial_kind("foo bar", 7) == "full"
    doc = "header\n" * 10 + "y = compute(x, 2)\n" + "tail\n" * 10
    assert retained_chars("compute(x, 2)", doc, 70) == 13
    assert 0 < retained_chars("compute(x, 2)", doc.replace("compute(x, 2)", "compute(x, 3)"), 70) < 13
    assert retained_chars("compute(x, 2)", "nothing here", 0) <= 4


def counts(o: Outcomes) -> dict:
    return o.snapshot()["python"]


def snap(text: str) -> SimpleNamespace:
    return SimpleNamespace(uri="file:///a.py", text=text)


def test_a_reported_accept_counts_and_is_checked_for_retention_later():
    async def run():
        texts = {"file:///a.py": BEFORE + AFTER}
        o = Outcomes(texts.get, retention_s=(0.05, 0.1))
        o.shown("file:///a.py", "python", BEFORE, AFTER, GHOST)
        texts["file:///a.py"] = BEFORE + GHOST + AFTER
        o.changed(snap(texts["file:///a.py"]))
        o.reported("file:///a.py", GHOST, "full")
        await asyncio.sleep(0.07)
        texts["file:///a.py"] = BEFORE + "other()" + AFTER          # rewritten before the second check
        await asyncio.sleep(0.1)
        return counts(o)
    c = asyncio.run(run())
    assert c["shown"] == 1 and c["shown_chars"] == len(GHOST)
    assert c["accepted_full"] == 1 and c["accepted_chars"] == len(GHOST) and c["reported"] == 1
    assert c["retained_30s_chars"] == len(GHOST) and c["checked_30s_chars"] == len(GHOST)
    assert c["retained_300s_chars"] < len(GHOST) and c["checked_300s_chars"] == len(GHOST)


def test_inferred_partial_accept_typing_through_and_rejection():
    o = Outcomes(lambda uri: None)
    o.shown("file:///a.py", "python", BEFORE, AFTER, GHOST)
    o.changed(snap(BEFORE + "compute" + AFTER))               # an accept-word: 7 characters in one edit
    o.changed(snap(BEFORE + "compute[" + AFTER))              # then typed over
    c = counts(o)
    assert (c["accepted_partial"], c["accepted_chars"], c["rejected"]) == (1, 7, 0)
    o.shown("file:///a.py", "python", BEFORE, AFTER, GHOST)
    o.changed(snap(BEFORE + "c" + AFTER))
    o.changed(snap(BEFORE + "co" + AFTER))                    # typed by hand, a character at a time
    o.shown("file:///a.py", "python", BEFORE + "co", AFTER, GHOST[2:])   # the next completion continues it
    c = counts(o)
    assert c["typed_through"] == 1 and c["typed_chars"] == 2
    o.changed(snap(BEFORE + "coX" + AFTER))                   # typed over the new one
    assert counts(o)["rejected"] == 1
    with pytest.raises(ValueError):
        o.reported("file:///a.py", "x", "paragraph")


def test_the_rest_after_a_partial_answer_is_the_same_completion_grown():
    """A partial answer and then the whole ghost text at the same place: one completion shown (not a rejected one
    and a second), with the whole text's characters, and accepting the whole is a full accept."""
    o = Outcomes(lambda uri: None)
    o.shown("file:///a.py", "python", BEFORE, AFTER, GHOST[:4])
    o.shown("file:///a.py", "python", BEFORE, AFTER, GHOST)
    c = counts(o)
    assert (c["shown"], c["shown_chars"], c["rejected"]) == (1, len(GHOST), 0)
    o.changed(snap(BEFORE + GHOST + AFTER))
    c = counts(o)
    assert (c["accepted_full"], c["accepted_chars"], c["rejected"]) == (1, len(GHOST), 0)
