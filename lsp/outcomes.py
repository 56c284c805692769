"""What became of the ghost text the server showed: accepted (fully, or partly: a word or a line), typed through,
rejected (typed over), and whether accepted text is still in the document 30 s and 5 min later (retained).

Two ways to learn it:

- the editor says so: the ``completer/didAccept`` notification ``{"textDocument": {"uri"}, "text": accepted text,
  "kind": "full" | "word" | "line"}`` (the VS Code extension and the Neovim plugin send it; lsp/README.md documents
  it for other clients);
- otherwise from the document's later contents (``classify``): one edit that inserts two or more characters of the
  ghost text at its place is an accept (typing is one character an edit); typing it character by character is
  "typed through"; anything else there is a rejection.

Per language, ``completer/stats`` (``outcomes``) and Prometheus (``completer_outcome_*``) count completions shown,
accepted (full / partial), typed through and rejected, and characters shown, accepted and retained after 30 s and
after 5 min. Nothing leaves the machine: counts only, no text is kept past the retention checks.
"""

from __future__ import annotations

import asyncio
import difflib
import logging
import re
import time
from dataclasses import dataclass, field
from typing import Callable

log = logging.getLogger(__name__)

RETENTION_S = (30.0, 300.0)          # when accepted text is checked for
RETENTION_WINDOW = 2000              # characters around the accepted text's place searched when it moved or changed
KINDS = ("full", "word", "line")
_WORD = re.compile(r"\w")

# what classify() says about a shown completion, given the document now
PENDING, ACCEPTED, TYPING, REJECTED, GONE = "pending", "accepted", "typing", "rejected", "gone"


@dataclass
class Shown:
    """One completion shown: the document's text before and after the cursor when it was, and the ghost text."""
    uri: str
    language: str
    before: str
    after: str
    text: str
    at: float = field(default_factory=time.monotonic)
    accepted: int = 0                # characters of it accepted so far (editor report or one multi-character edit)
    typed: int = 0                   # characters of it the user typed one by one
    last_inserted: str = ""          # what stood at the cursor's place at the last edit


def common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def inserted(shown: Shown, text: str) -> str | None:
    """What the document now has at the completion's place (between the text before and after the cursor it was
    shown for), or None when the document changed around it."""
    if len(text) < len(shown.before) + len(shown.after) or not text.startswith(shown.before):
        return None
    if shown.after and not text.endswith(shown.after):
        return None
    return text[len(shown.before):len(text) - len(shown.after)]


def classify(shown: Shown, text: str) -> tuple[str, int]:
    """(state, characters of the ghost text in the document) after an edit: ``accepted`` when one edit put two or more
    of its characters in at once (all of it: ``n == len(shown.text)``), ``typing`` while the user types it, ``pending``
    when nothing was typed there yet, ``rejected`` when what was typed differs from it, ``gone`` when the document
    changed around it."""
    ins = inserted(shown, text)
    if ins is None:
        return GONE, 0
    if not ins:
        return PENDING, 0
    n = common_prefix(ins, shown.text)
    if n < len(ins) and n < len(shown.text):
        return REJECTED, n
    n = min(n, len(shown.text))
    grew = n - len(shown.last_inserted)
    return (ACCEPTED if grew >= 2 else TYPING), n


def partial_kind(text: str, n: int) -> str:
    """``full`` when ``n`` covers ``text``; ``line`` when it ends at one of its line ends; else ``word``."""
    if n >= len(text.rstrip()):
        return "full"
    return "line" if text[n:n + 1] == "\n" or text[:n].endswith("\n") else "word"


def retained_chars(accepted: str, text: str, near: int) -> int:
    """Characters of ``accepted`` still in ``text`` around offset ``near``: all of them when it is there verbatim
    (the nearest occurrence within ``RETENTION_WINDOW``), else the characters a diff matches."""
    if not accepted:
        return 0
    lo, hi = max(0, near - RETENTION_WINDOW), min(len(text), near + len(accepted) + RETENTION_WINDOW)
    window = text[lo:hi]
    if accepted in window:
        return len(accepted)
    sm = difflib.SequenceMatcher(None, accepted, window, autojunk=False)
    return sum(b.size for b in sm.get_matching_blocks())


@dataclass
class LanguageOutcomes:
    shown: int = 0
    shown_chars: int = 0
    accepted_full: int = 0
    accepted_partial: int = 0
    accepted_chars: int = 0
    typed_through: int = 0
    typed_chars: int = 0
    rejected: int = 0
    reported: int = 0                # accepts the editor reported (the rest were inferred from the document)
    retained_30s_chars: int = 0
    retained_300s_chars: int = 0
    checked_30s_chars: int = 0       # accepted characters checked so far at 30 s / 5 min (the retention's base)
    checked_300s_chars: int = 0


class Outcomes:
    """One per connection. ``text_of(uri)``: the document's current text (None when closed); ``metrics``: the
    process's ``lsp.metrics.Metrics`` or None."""

    def __init__(self, text_of: Callable[[str], str | None], metrics=None,
                 retention_s: tuple[float, ...] = RETENTION_S):
        self.text_of, self.metrics, self.retention_s = text_of, metrics, retention_s
        self.by_language: dict[str, LanguageOutcomes] = {}
        self._shown: dict[str, Shown] = {}
        self._done: dict[str, Shown] = {}            # the last finished one per document (a report may come late)
        self._last_text: dict[str, str] = {}        # closed documents: their last text, for pending retention checks
        self._timers: list[asyncio.TimerHandle] = []

    def _lang(self, language: str) -> LanguageOutcomes:
        return self.by_language.setdefault(language or "text", LanguageOutcomes())

    def _count(self, language: str, outcome: str, chars: int = 0, count: bool = True) -> None:
        if self.metrics is not None:
            self.metrics.outcome(language or "text", outcome, chars, count)

    # --- events ---------------------------------------------------------------------------------------------------
    def shown(self, uri: str, language: str, before: str, after: str, text: str) -> None:
        """A completion was answered with ``text`` at the place between ``before`` and ``after``."""
        if not text:
            return
        old = self._shown.get(uri)
        if (old is not None and old.before == before and old.after == after and text.startswith(old.text)
                and not old.accepted and not old.typed):
            # the same ghost text grown in place (the rest after a partial answer): one completion shown
            grown = len(text) - len(old.text)
            old.text = text
            self._lang(language).shown_chars += grown
            self._count(language, "shown", grown, count=False)
            return
        if old is not None:
            ins = inserted(old, before + after)
            if ins and old.text.startswith(ins) and len(ins) < len(old.text):
                self._finish(old, TYPING if not old.accepted else ACCEPTED)   # a continuation of the old one
            else:
                self._finish(old, None)
        s = Shown(uri, language, before, after, text)
        self._shown[uri] = s
        st = self._lang(language)
        st.shown += 1
        st.shown_chars += len(text)
        self._count(language, "shown", len(text))

    def changed(self, snap) -> None:
        """After an edit of ``snap.uri``: what the edit did to the completion shown there."""
        s = self._shown.get(snap.uri)
        if s is None:
            return
        state, n = classify(s, snap.text)
        if state == ACCEPTED:
            s.accepted = n
        elif state == TYPING:
            s.typed = n
        s.last_inserted = s.text[:n]
        if state in (REJECTED, GONE) or n >= len(s.text):
            self._finish(s, state)

    def reported(self, uri: str, text: str, kind: str) -> None:
        """The editor says the user accepted ``text`` (all the ghost text, or its next word or line)."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        s = self._shown.get(uri)
        done = self._done.get(uri)
        if s is None and done is not None and done.accepted and text and done.text.startswith(text.rstrip()[:1]):
            self._lang(done.language).reported += 1    # the edit came first and already counted it
            self._done.pop(uri, None)
            return
        if s is None or not text:
            return
        start = len(s.last_inserted) if s.text.startswith(s.last_inserted) else 0
        if s.text.startswith(text, start):
            s.accepted = max(s.accepted, start + len(text))
        elif s.text.startswith(text):
            s.accepted = max(s.accepted, len(text))
        else:
            s.accepted = max(s.accepted, common_prefix(text, s.text))
        s.last_inserted = s.text[:s.accepted]
        self._lang(s.language).reported += 1
        if kind == "full" or s.accepted >= len(s.text):
            self._finish(s, ACCEPTED)

    def closed(self, uri: str) -> None:
        s = self._shown.pop(uri, None)
        if s is not None:
            self._finish(s, None, pop=False)
        self._done.pop(uri, None)
        text = self.text_of(uri)
        if text is not None:
            self._last_text[uri] = text

    def cancel_all(self) -> None:
        for t in self._timers:
            t.cancel()
        self._timers.clear()

    # --- ends -------------------------------------------------------------------------------------------------------
    def _finish(self, s: Shown, state: str | None, pop: bool = True) -> None:
        if pop and self._shown.get(s.uri) is s:
            del self._shown[s.uri]
        self._done[s.uri] = s
        st = self._lang(s.language)
        if s.accepted:
            full = s.accepted >= len(s.text.rstrip())
            if full:
                st.accepted_full += 1
            else:
                st.accepted_partial += 1
            st.accepted_chars += s.accepted
            self._count(s.language, "accepted_full" if full else "accepted_partial", s.accepted)
            self._retention(s)
        elif s.typed or state == TYPING:
            st.typed_through += 1
            st.typed_chars += s.typed
            self._count(s.language, "typed_through", s.typed)
        else:
            st.rejected += 1
            self._count(s.language, "rejected", 0)

    def _retention(self, s: Shown) -> None:
        accepted, near = s.text[:s.accepted], len(s.before)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._timers = [t for t in self._timers if not t.cancelled() and t.when() > loop.time()]
        for label, after_s in zip(("30s", "300s"), self.retention_s):
            self._timers.append(loop.call_later(after_s, self.check_retained, s.uri, s.language, accepted, near,
                                                label))

    def check_retained(self, uri: str, language: str, accepted: str, near: int, label: str) -> int:
        """Count the characters of ``accepted`` still around ``near`` in the document (``label``: 30s / 300s)."""
        text = self.text_of(uri)
        if text is None:
            text = self._last_text.get(uri, "")
        kept = retained_chars(accepted, text, near)
        st = self._lang(language)
        setattr(st, f"retained_{label}_chars", getattr(st, f"retained_{label}_chars") + kept)
        setattr(st, f"checked_{label}_chars", getattr(st, f"checked_{label}_chars") + len(accepted))
        self._count(language, f"retained_{label}", kept)
        return kept

    def snapshot(self) -> dict:
        from dataclasses import asdict
        return {lang: asdict(v) for lang, v in sorted(self.by_language.items())}


# --- the notification ----------------------------------------------------------------------------------------------
DID_ACCEPT = "completer/didAccept"


def _field(obj, name: str):
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def did_accept(ls, params) -> None:
    """``completer/didAccept {textDocument: {uri}, text, kind}``: the editor's report of an accept. Bad params are
    reported to the user (a notification has no answer) and change nothing."""
    try:
        uri = _field(_field(params, "textDocument"), "uri")
        text, kind = _field(params, "text"), _field(params, "kind") or "full"
        if not isinstance(uri, str) or not isinstance(text, str):
            raise ValueError("needs textDocument.uri and text (strings)")
        ls.outcomes.reported(uri, text, kind)
    except (ValueError, TypeError, AttributeError) as e:
        ls.notify_user(f"{DID_ACCEPT}: {e}; ignored")


def register(server) -> None:
    server.feature(DID_ACCEPT)(did_accept)
