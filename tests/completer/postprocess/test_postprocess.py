"""Post-processing table: no text the editor already has, block cut at dedent, indentation kept."""

from __future__ import annotations

import pytest

from completer.postprocess import postprocess
from tests.helpers.context_samples import plan_at

CASES = [
    # (language_id, text with |, raw model output, ghost text)
    ("python", "print(foo(|))\n", "a, b))", "a, b"),                     # closing brackets not repeated
    ("python", "print(foo(|))\n", "a, b())", "a, b()"),                  # ...but its own brackets kept
    ("python", "x = '|'\n", "hello'", "hello"),                           # closing quote not repeated
    ("python", "x = compute(|)  # done\n", "a)  # done", "a"),            # the rest of the line not repeated
    ("python", "x = |value\n", "value", ""),                             # nothing the line does not have
    ("python", "x = 1|\n", " + 2\ny = 3\n", " + 2"),                      # line mode: one line
    ("python", "x = 1|\n", "   \n", ""),                                  # whitespace is nothing useful
    ("python", "def f(x):|\n\ndef g():\n    pass\n",
     "\n    y = x * 2\n    return y\n\ndef g():\n    pass", "\n    y = x * 2\n    return y"),   # cut at dedent
    ("python", "class A:\n    def f(self):|\n",
     "\n        return 1\n    def g(self):\n        return 2", "\n        return 1"),
    ("python", "def f(x):|\n", "\nreturn x", "\n    return x"),           # flush-left body re-indented
    ("python", "def f(x):\n    |\n    return y\n", "y = x + 1\n    return y\n", "y = x + 1"),  # suffix lines
    ("python", "def f(x):|\n", "\n    return x\n\n\n   \n", "\n    return x"),  # trailing blank lines
    ("python", "def f(x):\n    |\n", "\n    y = x\n    return y", "y = x\n    return y"),  # no blank first line
    ("javascript", "function f(x) {|}\n", "\n  return x;\n}", "\n  return x;\n"),  # closer already there
    ("c", "void f() {\n    if (x) {|}\n}\n", "\n        g();\n    }", "\n        g();\n    "),
    ("javascript", "function f(x) {|\n", "\n  return x;\n}\nfoo();", "\n  return x;\n}"),  # closer needed
    ("go", "package m\n\nfunc F() {\n\t|\n}\n", "return\n}\n", "return"),
    ("rust", "fn f() -> u32 {|}\n", "\n    1 + 2\n}\n\nfn g() {}", "\n    1 + 2\n"),
    ("rust", "fn f() -> u32 {|}\n", " 1 + 2 }", " 1 + 2"),                   # one line: stays on it
    ("python", "x = (|)\n", "<|endoftext|>", ""),
    # the blank line's typed indentation is not repeated (BPE splits "    return" as "   " + " return")
    ("python", "def f(x):\n    \"\"\"Doc.\"\"\"\n    |\n", "   return x", "return x"),
    ("python", "def f(x):\n    |\n", "    y = x\n    return y", "y = x\n    return y"),
    ("python", "def f(x):|\r\n\r\ny = 1\r\n", "\r\n    return x\r\n\r\ny = 1", "\r\n    return x"),  # CRLF
    ("python", "print(foo(|))\r\n", "a, b))", "a, b"),
    ("python", "x = foo(|)\n", "1)<|endoftext|>junk", "1"),
]


@pytest.mark.parametrize("language_id,src,raw,expected", CASES)
def test_postprocess_table(language_id, src, raw, expected, count_tokens):
    plan = plan_at(language_id, src, count_tokens)
    assert postprocess(raw, plan) == expected


def test_postprocess_never_raises_on_junk(count_tokens):
    plan = plan_at("python", "def f(|):\n", count_tokens, "file:///m.py")
    for raw in ["", "\n\n", ")" * 50, "\ud800", "\t\t\n\t", "x" * 10000, None]:
        assert isinstance(postprocess(raw, plan), str)
