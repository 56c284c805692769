"""Token healing at the cursor: the prompt ends on a token boundary, the model's first tokens re-type the rest.

A cursor inside a word leaves the prompt ending inside a token: after ``return self.sel`` the prompt's last token is
``sel``, which in the training text was almost always part of a longer token (``select``, ``self``), so the model,
seeing a token boundary after ``sel``, writes what follows a finished ``sel`` (``e(self.r, ...``). Token healing
(guidance's "token healing"; the prompt-boundary problem of arXiv 2402.01035) backs the prompt up by its last
token and constrains generation so that the first tokens reproduce the removed characters: the model can then
choose ``select`` as one token, as it saw it in training. The removed characters are not part of the answer: the
engine drops them from its output, so the ghost text is the continuation after what the user typed.

The constraint is per character, not per token: at each healing step a token is allowed when its text starts with
the characters still to re-type (``select`` for ``sel``; not when all it adds is whitespace) or is a non-empty prefix
of them (``\\n   `` for ``\\n    ``: byte-level BPE writes ``\\n    return`` as ``\\n   `` + `` return``, so "starts
with" alone would forbid the model's own spelling). Healing ends once the re-typed text covers the removed
characters. What is removed is the partial word at the cursor, backed up to a token boundary where the rest of the
prompt keeps its tokens (``heal_point``).

Pure logic, shared by both backends: ``heal_point`` (what to strip from a prompt's prefix), ``allowed_tokens``
(the token ids allowed while ``remaining`` characters are to be re-typed, from the tokenizer's vocabulary, cached),
``advance`` (the characters left after a token) and ``strip_healed`` (the output without the re-typed characters).
"""

from __future__ import annotations

import bisect
import gc
import dataclasses
import threading
import weakref

from completer.prompt import fim_prompt

TAIL_CHARS = 256        # the prefix's last token is found by tokenizing this many characters before the cursor
MAX_HEAL_CHARS = 32     # a longer last token (a run of spaces, a long literal) is not healed
# Whether a healing token may cover the removed text and add whitespace alone ("\n" + 47 spaces for the removed
# "\n" + 11 spaces of a typed indentation; "   " for a typed " "). Off: byte-level BPE puts a run's last space on the
# next word, so such a token is one the model saw only before more whitespace, and greedy decoding picks it on blank
# lines: the answer was whitespace, shown as nothing. What the user typed is re-typed, the model writes what follows.
WHITESPACE_AFTER_HEAL = False
# Whether any token that is a prefix of the text still to re-type is allowed ("r", "ch", "child" for "children"), or
# only the tokenizer's own first token of that text followed by something (NEXT_PROBES: "\n   " for "\n    " before
# a word, "Default" for "DefaultSocket"). Off: when the model does not expect the word, the small house models
# spelled it in fragments under the constraint ("D" "e" "f" "ault" "So" "ck" "et"), text they never saw, and what
# followed was noise ("child" "r" "ent": "childrent").
ANY_PREFIX_TOKEN = False
NEXT_PROBES = ("", "a", "A", "_", "0", " ", " a", "(", ".", ",", ";", ":", "\n")


def _last_token(tail: str, ids: list[int], tokenizer) -> str:
    """The text of the last token of ``tail`` (encoded as ``ids``), "" when it cannot be healed on."""
    last = tokenizer.decode([ids[-1]], skip_special_tokens=False)
    if not last or len(last) > MAX_HEAL_CHARS or "\ufffd" in last or not tail.endswith(last):
        return ""
    # a token's text must be what it adds to the text before it; SentencePiece's "\u2581sel" decodes to "sel" alone
    # but adds " sel", and healing on such token texts would re-type the wrong characters
    if tokenizer.decode(ids[:-1], skip_special_tokens=False) + last != tokenizer.decode(ids, skip_special_tokens=False):
        return ""
    return last


def _last_piece(tail: str, tokenizer) -> int:
    """Length of the tokenizer's last pre-tokenizer piece of ``tail`` (byte-level BPE: `` pathna``, ``\n    ``,
    ``sel``): BPE merges never cross pieces, so the tokens of that piece are the ones that depend on what the user
    types next. 0 when the tokenizer has no pre-tokenizer to ask."""
    pre = getattr(tokenizer, "pre_tokenizer", None)
    if pre is None:
        return 0
    try:
        pieces = pre.pre_tokenize_str(tail)
    except Exception:  # noqa: BLE001 -- a pre-tokenizer that cannot say: heal the last token only
        return 0
    if not pieces or pieces[-1][1][1] != len(tail):
        return 0
    return len(tail) - pieces[-1][1][0]


def heal_point(prefix: str, tokenizer, word: bool = True) -> str:
    """The characters to remove from the end of ``prefix``, or "" when there is nothing to heal (empty prefix, a
    token that is not plain text, an over-long token).

    Without ``word``: the prefix's last token (guidance's token healing). With ``word`` (the default): the
    tokens of the last pre-tokenizer piece -- the whole partial word at the cursor, `` pathna`` spelled
    `` path`` + ``n`` + ``a``, not just its ``a``: the prompt then ends where the text the model was trained on has
    a token boundary whatever the user types next, and the model may choose `` pathnames``' own spelling -- and
    further back, a token at a time, until what is left of the prompt encodes to the same tokens as before (a
    prompt ending in ``}\n\t`` after backing up ``result`` would encode as ``}`` + ``\n\t``, a token the model only
    saw before more whitespace, where the typed text had ``\n`` + ``\t``). At most MAX_HEAL_CHARS characters;
    where the longer rule cannot be met within them, the last token alone."""
    if not prefix or tokenizer is None:
        return ""
    tail = prefix[-TAIL_CHARS:]
    ids = tokenizer.encode(tail, add_special_tokens=False).ids
    if len(ids) < 2:                 # the tail is one token: its start may not be a token boundary in the prompt
        return ""
    last = _last_token(tail, ids, tokenizer)
    if not last or not word:
        return last
    want = _last_piece(tail, tokenizer)
    full = tokenizer.decode(ids, skip_special_tokens=False)
    for k in range(1, len(ids)):
        heal = tokenizer.decode(ids[-k:], skip_special_tokens=False)
        if len(heal) > MAX_HEAL_CHARS or "\ufffd" in heal:
            break
        if (len(heal) < want or not tail.endswith(heal)
                or tokenizer.decode(ids[:-k], skip_special_tokens=False) + heal != full):
            continue
        if tokenizer.encode(tail[: len(tail) - len(heal)], add_special_tokens=False).ids == ids[:-k]:
            return heal
    return last


def heal_plan(plan, tokenizer, word: bool = True):
    """``plan`` with its prompt backed up by ``heal_point`` (``word``: the partial word, to a stable boundary) and
    ``heal`` set to the removed characters; ``plan`` itself when there is nothing to heal or no tokenizer."""
    heal = heal_point(plan.prefix, tokenizer, word)
    if not heal:
        return plan
    prompt = fim_prompt(plan.prefix[: len(plan.prefix) - len(heal)], plan.suffix, plan.template, plan.context)
    return dataclasses.replace(plan, prompt=prompt, heal=heal)


class _Vocab:
    """Token texts of one tokenizer, sorted for prefix search, plus text -> ids for the exact-prefix lookups."""

    def __init__(self, tokenizer):
        # ~5 small objects per token (SmolLM2: 49k tokens): with torch's objects in the heap, the collections those
        # allocations set off took over half the time (0.27 s vs 0.12 s without; it runs at every engine start)
        enabled = gc.isenabled()
        gc.disable()
        try:
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
        finally:
            if enabled:
                gc.enable()
        self.cache: dict[str, tuple[int, ...]] = {}
        self.tokenizer = tokenizer

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
        out = {i for t, i in zip(self.texts[lo:hi], self.ids[lo:hi])  # tokens that cover the rest and go on,
               if WHITESPACE_AFTER_HEAL or not t[len(remaining):].isspace()}  # but not with whitespace alone
        part = set()                                                 # tokens that re-type part of it: the
        for nxt in NEXT_PROBES:                                      # tokenizer's own first token of it
            ids = self.tokenizer.encode(remaining + nxt, add_special_tokens=False).ids
            first = self.tokenizer.decode(ids[:1], skip_special_tokens=False) if ids else ""
            if first and len(first) < len(remaining) and remaining.startswith(first):
                part.update(self.by_text.get(first, ()))
        if ANY_PREFIX_TOKEN or not (out or part):                    # (or any prefix, when nothing else fits)
            for k in range(1, len(remaining)):
                part.update(self.by_text.get(remaining[:k], ()))
        return tuple(sorted(out | part))


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
