"""The outline itself: incremental re-parsing matches a fresh parse; definitions know their class."""

from __future__ import annotations

import random

from completer.context.languages import canonical_language
from completer.context.syntax import outline, parse

from tests.helpers.context_samples import LANGS, far_scope


def test_incremental_parse_equals_fresh_parse():
    rng = random.Random(7)
    for lang in LANGS:
        language_id, uri, src, _ = far_scope(lang, filler_lines=20)
        language = canonical_language(language_id, uri)
        text = src.replace("|", "")
        key = f"test://{lang}"
        for _ in range(25):
            i = rng.randrange(len(text) + 1)
            j = min(len(text), i + rng.choice([0, 0, 1, 3, 12]))
            text = text[:i] + rng.choice(["", "x", "(", "}\n", "def q():\n    ", "\n", "é", "🙂"]) + text[j:]
            buf = text.encode("utf-8")
            assert str(parse(language, buf, key).root_node) == str(parse(language, buf).root_node), lang


def test_definitions_carry_their_container():
    text = "class Store:\n    def total(self, items):\n        return 0\n\ndef helper():\n    pass\n"
    ol = outline(text, "python", 0, all_definitions=True)
    got = {(d.name, d.parent, d.text.strip()) for d in ol.definitions}
    assert got == {("Store", "", "class Store:"), ("total", "Store", "def total(self, items):"),
                   ("helper", "", "def helper():")}


def test_names_near_cursor_skip_the_word_being_typed():
    text = "import os\nvalue = compute(os.path)\nres = comp"
    ol = outline(text, "python", len(text))
    assert "comp" not in ol.near_names
    assert ol.near_names[:1] == ["res"] and {"compute", "path", "os"} <= set(ol.near_names)


def test_class_signature_shows_how_it_is_constructed():
    py = "class Point(Base):\n    '''doc'''\n    def __init__(self, x, y=0):\n        self.x = x\n\np = Point(1)\n"
    ol = outline(py, "python", len(py) - 1)
    sig = next(d.text for d in ol.definitions if d.name == "Point")
    assert sig == "class Point(Base):\ndef __init__(self, x, y=0):"
    js = "class Point {\n  constructor(x, y) {\n    this.x = x;\n  }\n}\nconst p = new Point(1, 2);\n"
    ol = outline(js, "javascript", len(js) - 1)
    sig = next(d.text for d in ol.definitions if d.name == "Point")
    assert sig == "class Point {\nconstructor(x, y) {"
