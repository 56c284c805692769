"""Prompt-building samples for the context, prompt and postprocess tests.

One sample per supported language (imports, a scope far above the cursor), the cursor marker, the token counter.
"""

from completer.context import SourceFile, build_prompt


def token_counter(tokenizer):
    """Prompt tokens as ``tokenizer`` (a ``tokenizers.Tokenizer``: the house one in the tests) counts them."""
    return lambda s: len(tokenizer.encode(s, add_special_tokens=False).ids)


def at_cursor(src: str) -> tuple[str, int]:
    """Split a sample with "|" marking the cursor (its first occurrence) into (text, offset)."""
    assert "|" in src
    off = src.index("|")
    return src[:off] + src[off + 1:], off

# language id: (uri, text above the filler, filler line, text from the filler to the end with "|" at the cursor,
# the enclosing scope's header, which is far above the cursor once the filler is in)
FAR_SCOPE = {
    "python": ("file:///p/app.py",
               "import os\nfrom utils import helper\n\nclass Store(Base):\n    def total(self, items):\n"
               "        total = 0\n", "        total += {i}\n", "        return help|\n",
               "def total(self, items):"),
    "javascript": ("file:///p/app.js",
                   "import { helper } from './utils.js';\n\nclass Store {\n  total(items) {\n    let t = 0;\n",
                   "    t += {i};\n", "    return help|\n  }\n}\n", "total(items) {"),
    "typescript": ("file:///p/app.ts",
                   "import { helper } from './utils';\n\nexport class Store {\n  total(items: number[]): number {\n"
                   "    let t = 0;\n", "    t += {i};\n", "    return help|\n  }\n}\n",
                   "total(items: number[]): number {"),
    "typescriptreact": ("file:///p/App.tsx",
                        "import React from 'react';\n\nfunction App(props: Props): JSX.Element {\n  let t = 0;\n",
                        "  t += {i};\n", "  return <div>{t|}</div>;\n}\n", "function App(props: Props): JSX.Element {"),
    "go": ("file:///p/store.go",
           "package store\n\nimport \"fmt\"\n\nfunc (s *Store) Total(items []int) int {\n\tt := 0\n",
           "\tt += {i}\n", "\treturn hel|\n}\n", "func (s *Store) Total(items []int) int {"),
    "rust": ("file:///p/store.rs",
             "use std::collections::HashMap;\n\nimpl Store {\n    fn total(&self, items: &[u32]) -> u32 {\n"
             "        let mut t = 0;\n", "        t += {i};\n", "        hel|\n    }\n}\n",
             "fn total(&self, items: &[u32]) -> u32 {"),
    "c": ("file:///p/store.c",
          "#include <stdio.h>\n\nint store_total(const int *items, int n) {\n    int total = 0;\n",
          "    total += {i};\n", "    return hel|\n}\n", "int store_total(const int *items, int n)"),
    "cpp": ("file:///p/store.cpp",
            "#include <vector>\n\nnamespace shop {\nclass Store {\n public:\n  int total(const std::vector<int>& v) {\n"
            "    int t = 0;\n", "    t += {i};\n", "    return hel|\n  }\n};\n}\n", "int total(const std::vector<int>& v)"),
}


def far_scope(lang: str, filler_lines: int = 120) -> tuple[str, str, str, str]:
    """(language_id, uri, text with "|" at the cursor, expected header) where the header is far above."""
    uri, head, filler, tail, header = FAR_SCOPE[lang]
    return lang, uri, head + "".join(filler.format(i=i) for i in range(filler_lines)) + tail, header


def plan_at(language_id: str, src: str, count_tokens, uri: str = "file:///m", **options):
    """``build_prompt`` for a sample with "|" at the cursor."""
    text, off = at_cursor(src)
    return build_prompt(SourceFile(uri, language_id, text), off, count_tokens=count_tokens, **options)


LANGS = ["python", "javascript", "typescript", "typescriptreact", "go", "rust", "c", "cpp"]
