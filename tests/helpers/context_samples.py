"""Prompt-building samples for the context, prompt and postprocess tests.

One sample per supported language (imports, a scope far above the cursor), the cursor marker, the token counter.
"""

from completer.models import HOUSE_DIR


def token_counter():
    """The house tokenizer's count when the model is shipped, else about 3 characters a token."""
    path = HOUSE_DIR / "target" / "tokenizer.json"
    if path.is_file():
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(str(path))
        return lambda s: len(tok.encode(s, add_special_tokens=False).ids)
    return lambda s: len(s) // 3


def at_cursor(src: str) -> tuple[str, int]:
    """Split a sample with "|" marking the cursor (its first occurrence) into (text, offset)."""
    assert "|" in src
    off = src.index("|")
    return src[:off] + src[off + 1:], off

FILLER = {
    "python": "        total += {i}\n",
    "c": "    total += {i};\n",
}


def far_scope(lang: str, filler_lines: int = 120) -> tuple[str, str, str, str]:
    """(language_id, uri, text with "|" at the cursor, expected header) where the header is far above."""
    fill = lambda tpl: "".join(tpl.format(i=i) for i in range(filler_lines))
    if lang == "python":
        return ("python", "file:///p/app.py",
                "import os\nfrom utils import helper\n\nclass Store(Base):\n    def total(self, items):\n"
                "        total = 0\n" + fill("        total += {i}\n") + "        return help|\n",
                "def total(self, items):")
    if lang == "javascript":
        return ("javascript", "file:///p/app.js",
                "import { helper } from './utils.js';\n\nclass Store {\n  total(items) {\n    let t = 0;\n"
                + fill("    t += {i};\n") + "    return help|\n  }\n}\n",
                "total(items) {")
    if lang == "typescript":
        return ("typescript", "file:///p/app.ts",
                "import { helper } from './utils';\n\nexport class Store {\n  total(items: number[]): number {\n"
                "    let t = 0;\n" + fill("    t += {i};\n") + "    return help|\n  }\n}\n",
                "total(items: number[]): number {")
    if lang == "typescriptreact":
        return ("typescriptreact", "file:///p/App.tsx",
                "import React from 'react';\n\nfunction App(props: Props): JSX.Element {\n  let t = 0;\n"
                + fill("  t += {i};\n") + "  return <div>{t|}</div>;\n}\n",
                "function App(props: Props): JSX.Element {")
    if lang == "go":
        return ("go", "file:///p/store.go",
                "package store\n\nimport \"fmt\"\n\nfunc (s *Store) Total(items []int) int {\n\tt := 0\n"
                + fill("\tt += {i}\n") + "\treturn hel|\n}\n",
                "func (s *Store) Total(items []int) int {")
    if lang == "rust":
        return ("rust", "file:///p/store.rs",
                "use std::collections::HashMap;\n\nimpl Store {\n    fn total(&self, items: &[u32]) -> u32 {\n"
                "        let mut t = 0;\n" + fill("        t += {i};\n") + "        hel|\n    }\n}\n",
                "fn total(&self, items: &[u32]) -> u32 {")
    if lang == "c":
        return ("c", "file:///p/store.c",
                "#include <stdio.h>\n\nint store_total(const int *items, int n) {\n    int total = 0;\n"
                + fill("    total += {i};\n") + "    return hel|\n}\n",
                "int store_total(const int *items, int n)")
    if lang == "cpp":
        return ("cpp", "file:///p/store.cpp",
                "#include <vector>\n\nnamespace shop {\nclass Store {\n public:\n  int total(const std::vector<int>& v) {\n"
                "    int t = 0;\n" + fill("    t += {i};\n") + "    return hel|\n  }\n};\n}\n",
                "int total(const std::vector<int>& v)")
    raise KeyError(lang)


LANGS = ["python", "javascript", "typescript", "typescriptreact", "go", "rust", "c", "cpp"]
