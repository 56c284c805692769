"""Imports and other-document signatures come in within budget and leave in priority order when it is tight."""

from __future__ import annotations

from completer.context import SourceFile, build_prompt

from tests.helpers.context_samples import at_cursor

UTILS = SourceFile("file:///p/utils.py", "python",
                   "def normalize(values, scale=1.0):\n    return [v * scale for v in values]\n\n"
                   "class Unused:\n    pass\n")
MAIN = ("import os\nimport sys\nfrom utils import normalize\n\n\nclass Report(object):\n"
        "    def render(self, rows):\n        out = []\n"
        + "".join(f"        out.append(rows[{i}])\n" for i in range(200))
        + "        data = normalize(rows)\n        |\n")


def _plan(budget, count_tokens, others=(UTILS,)):
    text, off = at_cursor(MAIN)
    return build_prompt(SourceFile("file:///p/main.py", "python", text), off, others=others,
                        count_tokens=count_tokens, budget_tokens=budget)


def test_all_context_kinds_within_a_roomy_budget(count_tokens):
    plan = _plan(1024, count_tokens)
    assert "# from utils.py:\n# def normalize(values, scale=1.0):" in plan.context
    assert "# def normalize(values, scale=1.0):" in plan.context
    assert "Unused" not in plan.context                     # not used near the cursor
    assert "# import os" in plan.context and "# from utils import normalize" in plan.context
    assert "# class Report(object):" in plan.context and "#     def render(self, rows):" in plan.context
    assert plan.prompt_tokens <= 1024
    # the fixed order: other files, then this file's imports, then its enclosing scopes
    c = plan.context
    assert c.index("normalize(values") < c.index("import os") < c.index("class Report")


def test_context_dropped_in_priority_order(count_tokens):
    seen = []
    for budget in range(64, 1025, 16):
        plan = _plan(budget, count_tokens)
        shown = plan.context + plan.prefix
        has_scope = "def render(self, rows):" in shown
        has_import = "import os" in shown
        has_sig = "def normalize(values" in shown
        assert plan.prompt_tokens <= budget
        # a lower priority never survives where a higher one was dropped
        assert not has_sig or has_import, budget
        assert not has_import or has_scope, budget
        seen.append((has_scope, has_import, has_sig))
    assert not seen[0][2]                                   # tight: no signatures
    assert len(set(seen)) >= 3
    assert seen[-1] == (True, True, True)
    assert (True, False, False) in seen and (True, True, False) in seen


def test_near_text_wins_over_context(count_tokens):
    plan = _plan(96, count_tokens)
    assert plan.prefix.endswith("data = normalize(rows)\n        ")
    assert plan.suffix == "\n"


def test_other_document_signature_needs_a_use(count_tokens):
    no_use = MAIN.replace("normalize(rows)", "list(rows)").replace("from utils import normalize\n", "")
    text, off = at_cursor(no_use)
    plan = build_prompt(SourceFile("file:///p/main.py", "python", text), off, others=[UTILS],
                        count_tokens=count_tokens)
    assert "normalize" not in plan.context


def test_broken_other_documents_are_ignored(count_tokens):
    junk = [SourceFile("file:///p/bad.py", "python", "def (((:\n\x00\ud800"),
            SourceFile("file:///p/notes.txt", "plaintext", "normalize everything"), UTILS]
    plan = _plan(1024, count_tokens, others=junk)
    assert "def normalize(values" in plan.context


def test_other_documents_of_another_language_family_are_skipped(count_tokens):
    go = SourceFile("file:///p/norm.go", "go", "package p\n\nfunc normalize(v []float64) []float64 {\n\treturn v\n}\n")
    plan = _plan(1024, count_tokens, others=[go])
    assert "norm.go" not in plan.context
    header = SourceFile("file:///p/lib.h", "c", "int scale(int x);\n")
    text = "#include \"lib.h\"\nint main(void) {\n    return scale(2) + |\n}\n"
    from tests.helpers.context_samples import at_cursor as split
    t, off = split(text)
    plan = build_prompt(SourceFile("file:///p/main.cpp", "cpp", t), off, others=[header], count_tokens=count_tokens)
    assert "// from lib.h:\n// int scale(int x);" in plan.context


def test_same_file_name_in_another_folder_is_another_file(count_tokens):
    twin = SourceFile("file:///other/main.py", "python", "def normalize(values):\n    return values\n")
    plan = _plan(1024, count_tokens, others=[twin])
    assert "# from main.py:" in plan.context and "\n# main.py:" in plan.context  # the twin, and this file
    assert "# def normalize(values):" in plan.context
