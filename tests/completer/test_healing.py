"""Token healing's pure logic on the real house tokenizer: what is stripped, which tokens may re-type it."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer

from completer import healing
from completer.context import SourceFile, build_prompt


@pytest.fixture(scope="module")
def tok(house_tokenizer) -> Tokenizer:
    return house_tokenizer


@pytest.mark.parametrize("prefix,heal,last_token", [
    ("    return self.sel", "sel", "sel"),       # mid-word: the partial word
    ("    return self.", ".", "."),              # after a dot: the dot (so 'self.items' spellings stay possible)
    ("def peek(self):\n    ", "\n    ", "\n    "),  # a blank indented line: the newline + indentation token
    ("x = foo(a, b", " b", " b"),                # byte-level BPE: the space belongs to the word
    ("", "", ""),                                # nothing typed: nothing to heal
    ("x", "", ""),                               # one token: its start may not be a boundary in the prompt
    # the whole partial word, not its last token: ' path' + 'n' + 'a' leaves the prompt on ' matched', where the
    # text has a boundary whatever comes next (the model may then spell ' pathnames' its own way)
    ("/* List of matched pathna", " pathna", "a"),
    ("the Free Softw", " Softw", "w"),
    # 'result' alone would leave '}\n\t', which encodes as '}' + '\n\t' (a token seen only before more
    # whitespace) where the typed text had '\n' + '\t': backed up until the rest keeps its tokens
    ("x\n}\n\tresult", "\tresult", "result"),
    ("s = 'aaaaaaaaaa", "aaaaaaaaaa", "aa"),      # a word of several tokens: all of them
    ("s = '" + "a" * 40, "aa", "aa"),            # a word over MAX_HEAL_CHARS: its last token only
])
def test_heal_point(tok, prefix, heal, last_token):
    assert healing.heal_point(prefix, tok) == heal
    assert healing.heal_point(prefix, tok, word=False) == last_token
    if heal:                                     # what is left encodes to the same tokens as before
        ids = tok.encode(prefix, add_special_tokens=False).ids
        left = tok.encode(prefix[: len(prefix) - len(heal)], add_special_tokens=False).ids
        assert ids[: len(left)] == left and tok.decode(ids[len(left):]) == heal


def test_a_healing_token_may_not_add_whitespace_alone(tok):
    """A typed indentation is re-typed, not lengthened: a token of the removed "\n" + spaces plus more spaces
    (seen only before more whitespace; greedy picked it on blank lines and the answer was blank)."""
    texts = {tok.decode([i]) for i in healing.allowed_tokens(tok, "\n        ")}
    assert "\n        " in texts and "\n       " in texts                   # itself and its prefixes
    assert not any(t.startswith("\n        ") and t != "\n        " and t[9:].isspace() for t in texts)
    assert all(len(t) <= 9 for t in texts if t.isspace())
    assert " " in {tok.decode([i]) for i in healing.allowed_tokens(tok, " ")}
    assert not any(t.isspace() and len(t) > 1 for t in (tok.decode([i]) for i in healing.allowed_tokens(tok, " ")))


def test_allowed_tokens_extend_or_start_the_removed_text(tok):
    texts = {tok.decode([i]) for i in healing.allowed_tokens(tok, "sel")}
    assert {"sel", "self", "select"} <= texts
    assert all(t.startswith("sel") or "sel".startswith(t) for t in texts)
    # a part of the removed text only as the tokenizer itself starts spelling it, not any fragment: the small
    # models spelled words they did not expect letter by letter ("child" "r" "ent" for "children": "childrent")
    assert "s" not in texts and "se" not in texts
    assert [tok.decode([i]) for i in healing.allowed_tokens(tok, "children")] == ["children"]
    part = {tok.decode([i]) for i in healing.allowed_tokens(tok, "DefaultSocket")}
    first = tok.decode(tok.encode("DefaultSocket", add_special_tokens=False).ids[:1])
    assert first in part and len(first) < len("DefaultSocket") and not {"D", "De"} & (part - {first})
    assert "e" not in texts and "<|endoftext|>" not in texts
    # byte-level BPE spells "\n    return" as "\n   " + " return": a prefix of the removed text must be allowed
    assert "\n   " in {tok.decode([i]) for i in healing.allowed_tokens(tok, "\n    ")}
    assert healing.allowed_tokens(tok, "") == ()
    assert all(i < 100 for i in healing.allowed_tokens(tok, "sel", n_vocab=100))


@pytest.mark.parametrize("remaining,token,left", [("sel", "select", ""), ("sel", "se", "l"), ("\n    ", "\n   ", " "),
                                                  ("sel", "x", "")])
def test_advance(remaining, token, left):
    assert healing.advance(remaining, token) == left


@pytest.mark.parametrize("text,heal,out", [("select()", "sel", "ect()"), ("se", "sel", None), ("abc", "", "abc"),
                                           ("xyz", "sel", "")])
def test_strip_healed(text, heal, out):
    assert healing.strip_healed(text, heal) == out


def test_heal_plan_backs_the_prompt_up_and_keeps_the_screen_text(tok):
    text = "class A:\n    def f(self):\n        return self.sel\n"
    off = text.index("sel\n") + 3
    plan = build_prompt(SourceFile("file:///a.py", "python", text), off, count_tokens=lambda s: len(s) // 3)
    healed = healing.heal_plan(plan, tok)
    assert healed.heal == "sel" and healed.prefix == plan.prefix          # postprocess still sees the screen
    assert healed.prompt == plan.prompt.replace("self.sel<|fim_middle|>", "self.<|fim_middle|>")
    assert healing.heal_plan(plan, None) is plan


def test_a_sentencepiece_tokenizer_is_not_healed():
    # "\u2581sel" decodes to "sel" alone but adds " sel" after "return": healing on that text would re-type the
    # wrong characters, so heal_point refuses (byte-level BPE, as the house, Qwen and SmolLM2 use, is healed)
    from tokenizers import decoders, models, pre_tokenizers
    merges = [("\u2581", "s"), ("\u2581s", "e"), ("\u2581se", "l"), ("\u2581", "r"), ("\u2581r", "e"),
              ("\u2581re", "t"), ("\u2581ret", "u"), ("\u2581retu", "r"), ("\u2581retur", "n")]
    vocab = {"<unk>": 0, "\u2581": 1, **{c: i + 2 for i, c in enumerate("enrstul")}}
    for a, b in merges:
        vocab[a + b] = len(vocab)
    sp = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>"))
    sp.pre_tokenizer, sp.decoder = pre_tokenizers.Metaspace(), decoders.Metaspace()
    assert sp.encode("return sel", add_special_tokens=False).tokens[-1] == "\u2581sel"
    assert healing.heal_point("return sel", sp) == ""
