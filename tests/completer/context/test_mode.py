"""Single-line vs block decisions, with the block indentation and stop strings (table)."""

from __future__ import annotations

import pytest

from completer.context import SourceFile, build_prompt

from tests.helpers.context_samples import at_cursor

CASES = [
    # (language_id, text with |, mode, indent)
    ("python", "x = foo(|", "line", ""),
    ("python", "def f(x):\n    return x +|\n", "line", "    "),
    ("python", "def f(x):|\n", "block", "    "),
    ("python", "class A:\n    def f(self):|\n", "block", "        "),
    ("python", "def f(x):\n    |\n", "block", "    "),                 # empty body
    ("python", "def f(x):\n    y = 1\n    |\n", "line", "    "),       # blank line between statements
    ("python", "if ok:|  \n", "block", "    "),
    ("python", "d = {|}\n", "line", ""),                               # ":" not "{" opens Python blocks
    ("javascript", "function f(x) {|}\n", "block", "  "),
    ("javascript", "function f(x) {\n  |\n}\n", "block", "  "),
    ("javascript", "const g = (a) => {|\n", "block", "  "),
    ("javascript", "foo(a, |)\n", "line", ""),
    ("typescript", "class A {\n  m(): void {\n    |\n  }\n}\n", "block", "    "),
    ("go", "package m\n\nfunc F() {\n\t|\n}\n", "block", "\t"),
    ("go", "package m\n\nfunc F() {\n\tx := 1\n\ty := x|\n}\n", "line", "\t"),
    ("rust", "fn main() {|}\n", "block", "    "),
    ("c", "int main(void) {\n    |\n}\n", "block", "    "),
    ("cpp", "struct S {|};\n", "block", "    "),
    ("plaintext", "hello wor|", "line", ""),
    ("python", "x = a[1:|]\n", "line", ""),                              # a slice, not a block
    ("python", "d = {'a':|}\n", "line", ""),
    ("python", "    else:|\n", "block", "        "),
    ("python", "@app.route('/')\nasync def index(request):|\n", "block", "    "),
]


@pytest.mark.parametrize("language_id,src,mode,indent", CASES)
def test_mode_table(language_id, src, mode, indent, count_tokens):
    text, off = at_cursor(src)
    plan = build_prompt(SourceFile("file:///m", language_id, text), off, count_tokens=count_tokens)
    assert (plan.mode, plan.indent) == (mode, indent)
    if mode == "line":
        assert "\n" in plan.stop and plan.max_tokens <= 48
    else:
        assert "\n" not in plan.stop and plan.max_tokens == 64


def test_block_stop_strings(count_tokens):
    text, off = at_cursor("class A:\n    def f(self):|\n")
    plan = build_prompt(SourceFile("file:///a.py", "python", text), off, count_tokens=count_tokens)
    assert "\n    def " in plan.stop and "\n\n\n" in plan.stop
    text, off = at_cursor("void f() {\n    if (x) {|}\n}\n")
    plan = build_prompt(SourceFile("file:///a.c", "c", text), off, count_tokens=count_tokens)
    assert "\n    }" in plan.stop


def test_block_closed_flag_follows_the_suffix(count_tokens):
    closed, off = at_cursor("function f() {|\n}\n")
    open_, off2 = at_cursor("function f() {|\n")
    assert build_prompt(SourceFile("file:///a.js", "javascript", closed), off, count_tokens=count_tokens).block_closed
    assert not build_prompt(SourceFile("file:///a.js", "javascript", open_), off2,
                            count_tokens=count_tokens).block_closed
