"""Token healing at the cursor: the prompt ends on a token boundary, the model's first tokens re-type the rest.

A cursor inside a word leaves the prompt ending inside a token: after ``return self.sel`` the prompt's last token is
``sel``, which in the training text was almost always part of a longer token (``select``, ``self``), so the model,
seeing a token boundary after ``sel``, writes what follows a finished ``sel`` (``e(self.r, ...``). Token healing
(guidance's "token healing"; the prompt-boundary problem of arXiv 2402.01035) backs the prompt up by its last
token and constrains generation so that the first tokens reproduce the removed characters: the model can then
choose ``select`` as one token, as it saw it in training. The removed characters are not part of the answer: the
engine drops them from its output, so the ghost text is the continuation after what the user typed.

The constraint is per character, not per token: at each healing step a token is allowed when its text starts with
the characters still to re-type (``select`` for ``sel``) or is a non-empty prefix of them (``\\n   `` for
``\\n    ``: byte-level BPE writes ``\\n    return`` as ``\\n   `` + `` return``, so "starts with" alone would forbid
the model's own spelling). Healing ends once the re-typed text covers the removed characters.

Pure logic, shared by both backends: ``heal_point`` (what to strip from a prompt's prefix), ``allowed_tokens``
(the token ids allowed while ``remaining`` characters are to be re-typed, from the tokenizer's vocabulary, cached),
``advance`` (the characters left after a token) and ``strip_healed`` (the output without the re-typed characters).
"""

from __future__ import annotations

import bisect
import dataclasses
import threading
import weakref

from completer.prompt import fim_prompt

TAIL_CHARS = 256        # the prefix's last token is found by tokenizing this many characters before the cursor
MAX_HEAL_CHARS = 32     # a longer last token (a run of spaces, a long literal) is not healed


def heal_point(prefix: str, tokenizer) -> str:
    """The characters to remove from the end of ``prefix`` (its last token as ``tokenizer`` splits it), or "" when
    there is nothing to heal (empty prefix, a token that is not plain text, an over-long token)."""
    if not prefix or tokenizer is None:
        return ""
    tail = prefix[-TAIL_CHARS:]
    ids = tokenizer.encode(tail, add_special_tokens=False).ids
    if len(ids) < 2:                 # the tail is one token: its start may not be a token boundary in the prompt
        return ""
    last = tokenizer.decode([ids[-1]], skip_special_tokens=False)
    if not last or len(last) > MAX_HEAL_CHARS or "\ufffd" in last or not tail.endswith(last):
        return ""
    # a token's text must be what it adds to the text before it; SentencePiece's "\u2581sel" decodes to "sel" alone
    # but adds " sel", and healing on such token texts would re-type the wrong characters
    if tokenizer.decode(ids[:-1], skip_special_tokens=False) + last != tokenizer.decode(ids, skip_special_tokens=False):
        return ""
    return last


def heal_plan(plan, tokenizer):
    """``plan`` with its prompt backed up by the prefix's last token and ``heal`` set to the removed characters;
    ``plan`` itself when there is nothing to heal or no tokenizer."""
    heal = heal_point(plan.prefix, tokenizer)
    if not heal:
        return plan
    prompt = fim_prompt(plan.prefix[: len(plan.prefix) - len(heal)], plan.suffix, plan.template, plan.context)
    return dataclasses.replace(plan, prompt=prompt, heal=heal)


class _Vocab:
    """Token texts of one tokenizer, sorted for prefix search, plus text -> ids for the exact-prefix lookups."""

    def __init__(self, tokenizer):
        n = tokenizer.get_vocab_size(with_added_tokens=True)
        special = {tid for tid, tok in _added_tokens(tokenizer).items() if tok}
        texts = tokenizer.decode_batch([[i] for i in range(n)], skip_special_tokens=False)
        pairs = [(t, i) for i, t in enumerate(texts) if t and "\ufffd" not in t and i not in special]
        pairs.sort()
        self.texts = [t for t, _ in pairs]
        self.ids = [i for _, i in pairs]
        self.by_text: dict[str, list[int]] = {}
        for t, i in pairs:
            self.by_text.setdefault(t, []).append(i)
        self.cache: dict[str, tuple[int, ...]] = {}

    def allowed(self, remaining: str) -> tuple[int, ...]:
        got = self.cache.get(remaining)
        if got is None:
            if len(self.cache) > 4096:
                self.cache.clear()
            got = self.cache[remaining] = self._allowed(remaining)
        return got

    def _allowed(self, remaining: str) -> tuple[int, ...]:
        lo = bisect.bisect_left(self.texts, remaining)
        hi = lo
        while hi < len(self.texts) and self.texts[hi].startswith(remaining):
            hi += 1
        out = set(self.ids[lo:hi])                                   # tokens that cover the rest and go on
        for k in range(1, len(remaining)):
            out.update(self.by_text.get(remaining[:k], ()))          # tokens that re-type part of it
        return tuple(sorted(out))


def _added_tokens(tokenizer) -> dict[int, bool]:
    """id -> is special, for the tokenizer's added tokens (special tokens are never allowed while healing)."""
    try:
        return {i: bool(getattr(t, "special", True)) for i, t in tokenizer.get_added_tokens_decoder().items()}
    except AttributeError:
        return {}


_VOCABS: "weakref.WeakKeyDictionary[object, _Vocab]" = weakref.WeakKeyDictionary()
_VOCABS_LOCK = threading.Lock()


def _vocab(tokenizer) -> _Vocab:
    with _VOCABS_LOCK:
        v = _VOCABS.get(tokenizer)
        if v is None:
            v = _VOCABS[tokenizer] = _Vocab(tokenizer)
        return v


def prepare(tokenizer) -> None:
    """Decode the tokenizer's vocabulary now (an engine calls this at start): the first healed keystroke would
    otherwise pay for it (a few ms for the house vocabulary of 8k tokens, a few hundred for 150k)."""
    _vocab(tokenizer)


def allowed_tokens(tokenizer, remaining: str, n_vocab: int | None = None) -> tuple[int, ...]:
    """Token ids (below ``n_vocab``) allowed while ``remaining`` characters are still to be re-typed: those whose
    text starts with ``remaining`` or is a non-empty prefix of it. Cached per tokenizer and string; the first call
    for a tokenizer decodes its vocabulary once."""
    if not remaining:
        return ()
    ids = _vocab(tokenizer).allowed(remaining)
    return ids if n_vocab is None else tuple(i for i in ids if i < n_vocab)


def advance(remaining: str, token_text: str) -> str:
    """The characters still to re-type after a token with text ``token_text`` was generated."""
    if remaining.startswith(token_text):
        return remaining[len(token_text):]
    return ""


def strip_healed(text: str, heal: str) -> str | None:
    """``text`` (the generated text, healing tokens included) without the re-typed ``heal`` characters; None while
    the text does not yet cover them; "" when it does not start with them (its continuation would be of a
    different prefix)."""
    if not heal:
        return text
    if len(text) < len(heal):
        return None
    return text[len(heal):] if text.startswith(heal) else ""     # an engine that ignored the constraint
