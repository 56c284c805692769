"""Language-aware prompts and stops: the file's name in its own comment syntax marks the language; block stops
for brace languages end at the next definition and at another language's comment syntax."""

from __future__ import annotations

import pytest

from completer.context import SourceFile, build_prompt

COUNT = lambda s: len(s) // 3 + 1   # noqa: E731


@pytest.mark.parametrize("language_id,uri,text,marker", [
    ("go", "file:///p/main.go", "package main\n\nfunc main() {\n\tx := 1\n\t", "// main.go:\n"),
    ("javascript", "file:///p/app.js", "let total = 0;\ntotal += ", "// app.js:\n"),
    ("rust", "file:///p/lib.rs", "fn main() {\n    let x = ", "// lib.rs:\n"),
    ("python", "file:///p/stack.py", "x = 1\ny = ", "# stack.py:\n"),
])
def test_the_file_name_marks_the_language_even_without_context_items(language_id, uri, text, marker):
    plan = build_prompt(SourceFile(uri, language_id, text), len(text), count_tokens=COUNT)
    assert plan.context.endswith(marker) and plan.prompt.count(marker) == 1


def test_no_marker_for_plain_text_or_when_it_does_not_fit():
    plan = build_prompt(SourceFile("file:///notes.txt", "plaintext", "some words "), 11, count_tokens=COUNT)
    assert plan.context == ""
    text = "x = 1\n" * 400
    plan = build_prompt(SourceFile("file:///p/a.py", "python", text), len(text), count_tokens=COUNT,
                        budget_tokens=16)
    assert plan.prompt_tokens <= 16 + 8


def test_brace_block_stops_at_next_definition_and_foreign_comments():
    text = "package main\n\nfunc F() {\n"
    plan = build_prompt(SourceFile("file:///m.go", "go", text), len(text) - 1, count_tokens=COUNT)
    assert plan.mode == "block"
    assert "\nfunc " in plan.stop and '\n\t"""' in plan.stop and "\n\t# " in plan.stop
    py = "def f():\n"
    plan = build_prompt(SourceFile("file:///m.py", "python", py), len(py) - 1, count_tokens=COUNT)
    assert not any('"""' in s or "# " in s for s in plan.stop)        # Python keeps its docstrings and comments
