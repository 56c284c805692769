"""Token healing's pure logic on the real house tokenizer: what is stripped, which tokens may re-type it."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer

from completer import healing
from completer.context import SourceFile, build_prompt


@pytest.fixture(scope="module")
def tok(house_tokenizer) -> Tokenizer:
    return house_tokenizer


@pytest.mark.parametrize("prefix,heal", [
    ("    return self.sel", "sel"),            # mid-word: the partial word
    ("    return self.", "."),                 # after a dot: the dot (so 'self.items' spellings stay possible)
    ("def peek(self):\n    ", "\n    "),       # a blank indented line: the newline + indentation token
    ("x = foo(a, b", " b"),                    # byte-level BPE: the space belongs to the word
    ("", ""),                                  # nothing typed: nothing to heal
    ("x", ""),                                 # one token: its start may not be a boundary in the prompt
    ("s = 'aaaaaaaaaa", "aa"),                 # a long run: only its last token
])
def test_heal_point(tok, prefix, heal):
    assert healing.heal_point(prefix, tok) == heal


def test_allowed_tokens_extend_or_start_the_removed_text(tok):
    texts = {tok.decode([i]) for i in healing.allowed_tokens(tok, "sel")}
    assert {"sel", "self", "select"} <= texts and "s" in texts and "se" in texts
    assert all(t.startswith("sel") or "sel".startswith(t) for t in texts)
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
