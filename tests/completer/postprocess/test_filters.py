"""Golden tables, one per post-processing filter: each filter alone on (text, Context) -> text.

The whole chain through ``build_prompt`` is tabled in ``tests/completer/test_postprocess.py``; here every filter is
checked on its own inputs, so a change to one shows up as that filter's row, not as a shifted end result.
"""

from __future__ import annotations

import pytest

from completer import postprocess as pp
from completer.postprocess import Context

PY_BLOCK = Context(mode="block", indent="    ", language="python")
PY_BLANK = Context(line_before="    ", mode="block", indent="    ", language="python")
JS_BRACES = Context(line_before="function f(x) {", rest="}", suffix="}\n", mode="block", indent="  ",
                    language="javascript", block_closed=True)
LINE = Context(language="python")

TABLES = {
    "cut_at_end_token": [
        ("x = 1<|endoftext|>junk", LINE, "x = 1"),
        ("a<|file_sep|>b<|endoftext|>", LINE, "a"),
        ("<EOT>tail</s>", Context(template="codellama"), ""),
        ("no end token", LINE, "no end token"),
    ],
    "normalize_newlines": [
        ("a\r\nb\r\n", LINE, "a\nb\n"),
        ("a\nb", LINE, "a\nb"),
    ],
    "one_line": [
        (" + 2\ny = 3\n", LINE, " + 2"),
        ("\n    return x", PY_BLOCK, "\n    return x"),          # block mode keeps every line
    ],
    "reindent_first_line": [
        ("   return x", Context(line_before="    ", indent="    "), "return x"),     # typed indent not repeated
        ("    y = x\n    return y", PY_BLANK, "y = x\n    return y"),
        ("\n    y = x\n    return y", PY_BLANK, "y = x\n    return y"),              # no blank first line
        ("\n        deeper", PY_BLANK, "    deeper"),
        ("x = 1", Context(line_before="y = ", indent=""), "x = 1"),                   # code before: untouched
        ("  ", PY_BLANK, "  "),
    ],
    "indent_body": [
        ("\nreturn x", Context(line_before="def f(x):", mode="block", indent="    "), "\n    return x"),
        ("\n    return x", Context(line_before="def f(x):", mode="block", indent="    "), "\n    return x"),
        ("\nreturn x", Context(line_before="def f(x):", mode="block", indent=""), "\nreturn x"),
        ("\nreturn x", Context(line_before="x = ", mode="line", indent="    "), "\nreturn x"),
    ],
    "cut_at_block_end": [
        ("\n    y = x * 2\n    return y\n\ndef g():\n    pass",
         Context(line_before="def f(x):", mode="block", indent="    ", language="python"),
         "\n    y = x * 2\n    return y\n"),
        ("y = x + 1\n    return y\n", Context(line_before="    ", suffix="\n    return y\n", mode="block",
                                             indent="    ", language="python"), "y = x + 1"),
        ("\n  return x;\n}\nfoo();", Context(line_before="function f(x) {", mode="block", indent="  ",
                                              language="javascript", block_closed=False), "\n  return x;\n}"),
        ("\n  return x;\n}", JS_BRACES, "\n  return x;"),
        ("x\ny", LINE, "x\ny"),                                  # line mode: not this filter's business
    ],
    "trim_line_overlap": [
        ("a, b))", Context(line_before="print(foo(", rest="))"), "a, b"),
        ("a, b())", Context(line_before="print(foo(", rest="))"), "a, b()"),
        ("hello'", Context(line_before="x = '", rest="'"), "hello"),
        ("a)  # done", Context(line_before="x = compute(", rest=")  # done"), "a"),
        ("value", Context(line_before="x = ", rest="value"), ""),
        ("a\nb)", Context(line_before="f(", rest=")"), "a\nb)"),       # several lines: left to the block filters
    ],
    "cut_repetition": [
        ("{ path: Argument<{path: Argument<{path: Argument<", Context(language="typescript"), "{ path: Argument<"),
        ("(0, sizeof(buf), sizeof(buf), sizeof(b", Context(language="c"), "(0, sizeof(buf)"),     # cut off mid-loop
        ("x += 1\nx += 1\nx += 1\nx +", PY_BLOCK, "x += 1\n"),
        ("[0, 0, 0, 0, 0]", LINE, "[0, 0, 0, 0, 0]"),                  # short units are ordinary code
        ("# ==========================", LINE, "# =========================="),
        ("self.a = a\nself.b = b", PY_BLOCK, "self.a = a\nself.b = b"),
        ("foo(bar), foo(bar)", LINE, "foo(bar), foo(bar)"),             # twice, not running to the limit
        ("re.compile(r'^([^\\]{\\]{\\]{\\]{\\]{\\", LINE, "re.compile(r'^([^\\]{"),   # punctuation loop
        ("x = [[[]]]", LINE, "x = [[[]]]"),
    ],
    "drop_repeated_line_start": [
        ("self.items.pop()", Context(line_before="        return self."), "items.pop()"),    # issue 12's example
        ("return x", Context(line_before="    return "), "x"),
        ("items.pop()", Context(line_before="        return self."), "items.pop()"),
        (" + 1", Context(line_before="x = y"), " + 1"),
        ("1", Context(line_before="x = 1"), "1"),                      # too short to call a repeat
        ("items.pop()", Context(line_before="        x = self.item"), "s.pop()"),  # the word re-typed
        ("path.join(a)", Context(line_before="    os.path"), ".join(a)"),
    ],
    "block_on_new_line": [
        ("        return self.items[-1]", Context(line_before="    def peek(self):", mode="block", indent="        ",
                                                  language="python"), "\n        return self.items[-1]"),  # issue 12
        (" return 1", Context(line_before="def f():", mode="block", indent="    ", language="python"),
         "\n    return 1"),
        ("   \n        return 1", Context(line_before="    def f(self):", mode="block", indent="        ",
                                          language="python"), "\n        return 1"),
        (" ", Context(line_before="    def peek(self):", mode="block", indent="        ", language="python"), ""),
        (" 1 + 2 }", Context(line_before="fn f() -> u32 {", rest="}", mode="block", indent="    ", language="rust"),
         " 1 + 2 }"),                                                  # a brace one-liner stays on its line
        ("  return x;\n}", Context(line_before="function f(x) {", mode="block", indent="  ", language="javascript"),
         "\n  return x;\n}"),
        ("\n    return 1", Context(line_before="def f():", mode="block", indent="    ", language="python"),
         "\n    return 1"),
        ("y = x\nreturn y", Context(line_before="def f(x):", mode="block", indent="    ", language="python"),
         "\n    y = x\n    return y"),                                # a flush-left body moves with it
        ("x", LINE, "x"),
    ],
    "cut_foreign_lines": [
        ('\n\t"""Docstring."""\n\treturn x', Context(line_before="func F() {", mode="block", language="go"), ""),
        ("\n  return 1;\n  # TODO(x): fix", Context(line_before="function f() {", mode="block", language="javascript"),
         "\n  return 1;"),
        ("\n  #count = 0;", Context(line_before="class A {", mode="block", language="javascript"),
         "\n  #count = 0;"),                                          # a private field is JavaScript
        ("\n#include <stdio.h>", Context(language="c"), "\n#include <stdio.h>"),   # preprocessor
        ("\n    #[inline]\n    fn f() {}", Context(language="rust"), "\n    #[inline]\n    fn f() {}"),
        ("x = 1\n    // done", Context(line_before="    ", language="python"), "x = 1"),
        ("# comment", Context(line_before="    ", language="go"), ""),
        ("a # b", Context(line_before="x := ", language="go"), "a"),                   # Go has no "#" comments
        ('"""Doc."""', Context(line_before="    ", language="python"), '"""Doc."""'),
        (" # ", Context(line_before="  const x =", language="typescript"), ""),        # a '#' comment after code
        ("x; # note", Context(line_before="  const y = ", language="javascript"), "x;"),
        ('"a # b";', Context(line_before="  const y = ", language="javascript"), '"a # b";'),   # in a string
        ("\n  def _get(code):\n    return 1", Context(line_before="function f() {", mode="block",
                                                      language="javascript"), ""),   # Python in JavaScript
        ("if t.is_dir() == 'nt':\n\ttry:", Context(line_before="\t", mode="block", language="go"), ""),
        ("\n    case 1:\n        return;", Context(line_before="switch (x) {", mode="block", language="c"),
         "\n    case 1:\n        return;"),                            # a C label is C
        ("\nfrom os import path", Context(language="rust"), ""),
        ('= """', Context(line_before="\tmsg ", language="go"), "="),                  # seen in bench/quality.py
        ("x = '''a'''", Context(line_before="let ", language="rust"), "x ="),
        ('"""abc"', Context(line_before="char *s = ", language="c"), '"""abc"'),       # C: adjacent literals
    ],
    "drop_next_line_copy": [
        ("return y", Context(line_before="    ", suffix="\n    return y\n"), ""),
        ("y = 1", Context(line_before="    ", suffix="\n    return y\n"), "y = 1"),
        ("return y", Context(line_before="    ", suffix="\n    return y\n", mode="block"), "return y"),
        ("turn y", Context(line_before="    re", suffix="\n    return y\n"), ""),           # 2 typed: the model's
        # the user typed the line's start: a declaration above another that ends the same way (c-variables trace)
        ("odePtr cur);", Context(line_before="\t\t xmlN", suffix="\n\t\t xmlNodePtr cur);\n", language="c"),
         "odePtr cur);"),
    ],
    "drop_previous_line_copy": [
        ("Z_FINISH: 4,", Context(line_before="    ", line_above="    Z_FINISH: 4,", language="javascript"), ""),
        ("Z_BLOCK: 5,", Context(line_before="    ", line_above="    Z_FINISH: 4,", language="javascript"),
         "Z_BLOCK: 5,"),
        ("}", Context(line_before="  ", line_above="  }", language="c"), "}"),            # closers do repeat
        ("});", Context(line_before="  ", line_above="  });", language="javascript"), "});"),
        ("x = 1", Context(line_before="x", line_above="xx = 1", language="python"), "x = 1"),  # code before
        ("x = 1", Context(line_before="    ", line_above="    x = 1", mode="block"), "x = 1"),
    ],
    "drop_empty_comment": [
        ("#", Context(line_before="    ", language="python"), ""),          # a blank line's bare marker
        ("  //  ", Context(line_before="\t", language="go"), ""),
        ("///", Context(line_before="    ", language="rust"), ""),
        ("# done", LINE, "# done"),                                         # a comment with words stays
        ("x = 1  # ok", LINE, "x = 1  # ok"),
        ("#include <a.h>", Context(language="c"), "#include <a.h>"),
    ],
    "strip_trailing_whitespace": [
        ("x = 1   \n\n  \n", LINE, "x = 1"),
        ("   \n\t", LINE, ""),
        ("a\n\nb  ", LINE, "a\n\nb"),
    ],
    "close_bracket_line": [
        ("\n  return x;", JS_BRACES, "\n  return x;\n"),
        (" 1 + 2", Context(rest="}", outer_indent=""), " 1 + 2"),     # one line stays on the cursor's line
        ("\n        g();", Context(rest="}", outer_indent="    "), "\n        g();\n    "),
    ],
    "restore_crlf": [
        ("\n    return x", Context(crlf=True), "\r\n    return x"),
        ("\n    return x", LINE, "\n    return x"),
    ],
}

ROWS = [(name, *row) for name, rows in TABLES.items() for row in rows]


@pytest.mark.parametrize("name,text,ctx,expected", ROWS)
def test_filter_table(name, text, ctx, expected):
    assert getattr(pp, name)(text, ctx) == expected


def test_every_filter_has_a_table():
    assert {f.__name__ for f in pp.FILTERS} == set(TABLES)


def test_trace_names_each_step_and_skip_leaves_one_out():
    from completer.context import SourceFile, build_prompt
    text = "def f(x):\n    \n"
    plan = build_prompt(SourceFile("file:///m.py", "python", text), len("def f(x):\n    "),
                        count_tokens=lambda s: len(s) // 3)
    steps = pp.trace("   return x<|endoftext|>", plan)
    assert [n for n, _ in steps] == ["raw"] + [f.__name__ for f in pp.FILTERS]
    assert steps[-1][1] == "return x"
    assert pp.postprocess("   return x", plan, skip={"reindent_first_line"}) == "   return x"


def test_context_line_above_from_plan():
    from completer.context import PromptPlan
    plan = PromptPlan(prompt="", prefix="a = 1\n    b = 2\n    ", suffix="\n", mode="line", stop=("\n",), indent="    ",
                      language="python", max_tokens=8)
    ctx = Context.from_plan(plan)
    assert (ctx.line_before, ctx.line_above) == ("    ", "    b = 2")
    first = PromptPlan(prompt="", prefix="x = ", suffix="", mode="line", stop=(), indent="", language="python",
                       max_tokens=8)
    assert Context.from_plan(first).line_above == ""
    second = PromptPlan(prompt="", prefix="x\ny", suffix="", mode="line", stop=(), indent="", language="python",
                        max_tokens=8)
    assert Context.from_plan(second).line_above == "x"
