"""Each supported language: the prompt carries the enclosing scope header even when it is far above the cursor."""

from __future__ import annotations

import pytest

from completer.context import SourceFile, build_prompt
from completer.context.languages import canonical_language

from tests.helpers.context_samples import LANGS, at_cursor, far_scope


@pytest.mark.parametrize("lang", LANGS)
def test_far_enclosing_scope_header_is_in_prompt(lang, count_tokens):
    language_id, uri, src, header = far_scope(lang)
    text, off = at_cursor(src)
    plan = build_prompt(SourceFile(uri, language_id, text), off, count_tokens=count_tokens, budget_tokens=256)
    assert plan.language != "text"
    assert header not in plan.prefix, "sample must put the header outside the prefix window"
    assert header in plan.context
    assert header in plan.prompt.split(plan.prefix)[0]          # context sits before the prefix
    assert plan.prompt_tokens <= 256


@pytest.mark.parametrize("language_id,uri,expected", [
    ("python", "", "python"), ("typescriptreact", "", "tsx"), ("javascriptreact", "", "javascript"),
    ("", "file:///a/b/main.rs", "rust"), ("plaintext", "file:///x.hpp", "cpp"), ("golang", "", "go"),
    ("haskell", "file:///x.hs", "text"), ("", "untitled:Untitled-1", "text"),
])
def test_language_ids_and_extensions(language_id, uri, expected):
    assert canonical_language(language_id, uri) == expected


def test_unknown_language_falls_back_to_plain_windows(count_tokens):
    text, off = at_cursor("main = do\n  putStrLn |\n")
    plan = build_prompt(SourceFile("file:///m.hs", "haskell", text), off, count_tokens=count_tokens)
    assert plan.language == "text" and plan.context == ""
    assert plan.prefix == text[:off] and plan.suffix == text[off:]


@pytest.mark.parametrize("lang", LANGS)
def test_scope_header_found_while_braces_are_unclosed(lang, count_tokens):
    """Mid-typing, nothing after the cursor: the tree has errors, the indentation fallback still finds the header."""
    language_id, uri, src, header = far_scope(lang)
    text, off = at_cursor(src[: src.index("|") + 1])
    plan = build_prompt(SourceFile(uri, language_id, text), off, count_tokens=count_tokens, budget_tokens=256)
    assert header in plan.context


def test_unindented_namespace_found_while_braces_are_unclosed(count_tokens):
    src = ("#include <vector>\n\nnamespace shop {\n\nstruct Done {\n  int x;\n};\n\nclass Store {\n public:\n"
           "  int total(const std::vector<int>& v) {\n" + "    t += 1;\n" * 150 + "    return |")
    text, off = at_cursor(src)
    plan = build_prompt(SourceFile("file:///s.cpp", "cpp", text), off, count_tokens=count_tokens, budget_tokens=256)
    assert "// namespace shop {\n// class Store {\n//   int total(const std::vector<int>& v) {" in plan.context
    assert "struct Done" not in plan.context
