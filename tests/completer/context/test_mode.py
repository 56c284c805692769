"""Single-line vs block decisions, with the block indentation and stop strings (table)."""

from __future__ import annotations

import pytest

from tests.helpers.context_samples import plan_at

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
    # a body of comments so far: the next line goes at the comment's indentation, not one step deeper
    ("javascript", "class A {\n  get config () {\n    // the command's config\n    |\n  }\n}\n", "block", "    "),
    ("c", "int main(void) {\n    /* start */\n    |\n}\n", "block", "    "),
]


@pytest.mark.parametrize("language_id,src,mode,indent", CASES)
def test_mode_table(language_id, src, mode, indent, count_tokens):
    plan = plan_at(language_id, src, count_tokens)
    assert (plan.mode, plan.indent) == (mode, indent)
    if mode == "line":
        assert "\n" in plan.stop and plan.max_tokens <= 48
    else:
        assert "\n" not in plan.stop and plan.max_tokens == 64


def test_block_stop_strings(count_tokens):
    plan = plan_at("python", "class A:\n    def f(self):|\n", count_tokens, "file:///a.py")
    assert "\n    def " in plan.stop and "\n\n\n" in plan.stop
    plan = plan_at("c", "void f() {\n    if (x) {|}\n}\n", count_tokens, "file:///a.c")
    assert "\n    }" in plan.stop


def test_block_closed_flag_follows_the_suffix(count_tokens):
    assert plan_at("javascript", "function f() {|\n}\n", count_tokens, "file:///a.js").block_closed
    assert not plan_at("javascript", "function f() {|\n", count_tokens, "file:///a.js").block_closed
