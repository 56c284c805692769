"""Weird input never raises: empty documents, offsets out of range, lone surrogates, huge files and lines."""

from __future__ import annotations

import pytest

from completer.context import SourceFile, build_prompt
from completer.postprocess import postprocess

from tests.helpers.context_samples import LANGS, far_scope


@pytest.mark.parametrize("text,offset,prefix,suffix", [
    ("", 0, "", ""),
    ("", 7, "", ""),
    ("abc", -3, "", "abc"),
    ("abc", 99, "abc", ""),
    ("abc", "2", "ab", "c"),
    ("abc", None, "abc", ""),
    ("\n\n\n", 1, "\n", "\n\n"),
])
def test_offsets_are_clamped(text, offset, prefix, suffix, count_tokens):
    plan = build_prompt(SourceFile("file:///e.py", "python", text), offset, count_tokens=count_tokens)
    assert (plan.prefix, plan.suffix) == (prefix, suffix)
    assert isinstance(postprocess("x = 1", plan), str)


@pytest.mark.parametrize("lang", LANGS)
def test_lone_surrogates_and_nul(lang, count_tokens):
    language_id, uri, src, _ = far_scope(lang, filler_lines=3)
    text = src.replace("|", "\ud83d\x00")
    plan = build_prompt(SourceFile(uri, language_id, text), src.index("|") + 1, count_tokens=count_tokens)
    plan.prompt.encode("utf-8")                      # the surrogate was replaced, the prompt is valid text
    assert "\ufffd" in plan.prefix


def test_huge_file_keeps_scope_and_imports(count_tokens):
    body = "".join(f"class C{i}:\n    def m{i}(self, x):\n        return helper(x) + {i}\n\n" for i in range(30000))
    text = "import os\nfrom lib import helper\n\n" + body
    assert len(text) > 2_000_000
    cursor = text.index("return helper(x) + 15000") + len("return ")
    plan = build_prompt(SourceFile("file:///big.py", "python", text), cursor, count_tokens=count_tokens,
                        budget_tokens=512)
    assert "#     def m15000(self, x):" in plan.context or "def m15000(self, x):" in plan.prefix
    assert "# import os" in plan.context                  # imports come from the file's head, far outside the window
    assert plan.prompt_tokens <= 512


def test_huge_single_line(count_tokens):
    text = "x = [" + "1, " * 500_000 + "]\n"
    plan = build_prompt(SourceFile("file:///l.py", "python", text), len(text) // 2, count_tokens=count_tokens,
                        budget_tokens=256)
    assert plan.prompt_tokens <= 256 and plan.prefix and plan.suffix
    assert text[: len(text) // 2].endswith(plan.prefix)


def test_non_string_text_and_others(count_tokens):
    plan = build_prompt(SourceFile("file:///x.py", "python", None), 0, count_tokens=count_tokens,  # type: ignore
                        others=[SourceFile("file:///y.py", "python", None)])                         # type: ignore
    assert plan.prefix == "" and plan.suffix == ""


def test_failing_token_counter_falls_back_to_an_estimate():
    def bad(s):
        if "\x00" in s:
            raise RuntimeError("tokenizer exploded")
        return len(s) // 4

    plan = build_prompt(SourceFile("file:///a.py", "python", "x = 1\x00\ny = "), 11, count_tokens=bad)
    assert plan.prefix.endswith("y = ") and plan.prompt_tokens > 0


def test_random_documents_and_offsets_never_raise(count_tokens):
    import random

    rng = random.Random(11)
    alphabet = ["a", "x1", " ", "    ", "\t", "\n", "\r\n", ":", "{", "}", "(", ")", "[", "]", "'", '"', "`", "#",
                "//", "/*", "def ", "class ", "fn ", "func ", "import ", "#include <a.h>", "é", "🙂", "\ud800", "\x00"]
    langs = ["python", "javascript", "typescript", "typescriptreact", "go", "rust", "c", "cpp", "plaintext", ""]
    for i in range(150):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 120)))
        lang = langs[i % len(langs)]
        off = rng.randrange(-2, len(text) + 3)
        others = [SourceFile(f"file:///o{j}", rng.choice(langs), text[::-1]) for j in range(rng.randrange(3))]
        plan = build_prompt(SourceFile(f"file:///d{i}", lang, text), off, others=others, count_tokens=count_tokens,
                            budget_tokens=rng.choice([16, 64, 512]), template=rng.choice(["house", "qwen"]))
        assert plan.mode in ("line", "block")
        raw = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 40)))
        assert isinstance(postprocess(raw, plan), str)
