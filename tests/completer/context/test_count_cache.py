"""Token counts remembered across prompts (builder._safe_counter): the same counts, and so the same prompts, as
counting every text with the tokenizer afresh."""

from __future__ import annotations

import json
import random
import sysconfig
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from completer.context import SourceFile, build_prompt
from completer.context import builder
from completer.context.syntax import Trees

ROOT = Path(__file__).resolve().parents[3]


class _Engine:
    """What build_prompt sees of an engine: ``count_tokens`` bound to an object with a ``tokenizer``."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.calls = 0

    def count_tokens(self, text: str) -> int:
        self.calls += 1
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)


def _fresh(tokenizer):
    return lambda s: len(tokenizer.encode(s, add_special_tokens=False).ids)


def _texts() -> list[tuple[str, str]]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = [stdlib / "shlex.py", stdlib / "textwrap.py", ROOT / "completer" / "context" / "builder.py",
             *sorted((ROOT / "editors").rglob("*.js"))[:2], *sorted((ROOT / "tests" / "data").rglob("*.c"))[:2]]
    out = [(p.name, p.read_text(encoding="utf-8")) for p in files if p.is_file()]
    from lsp.trace import load                # the typing traces' files: C, JavaScript, Python
    for p in sorted((ROOT / "bench" / "traces").glob("*.jsonl")):
        header = load(p).header
        out.append((Path(header.uri).name, header.text))
    odd = ("x = 1  \n\ty = 2\t\n\r\nz = 'é'\u00a0\n  \n\n<|fim_prefix|>\nend\u2028next\n\x0b\x0c;\n\u3000\u65e5\u672c\n"
           "a\n\n\n   b )\n\t}\n# \U0001F600 done\n<|endoftext|> \n'''s'll\n\"\"\"\n")
    out.append(("odd.txt", odd * 3))
    return out


def test_the_house_tokenizer_is_counted_line_by_line(house_tokenizer):
    assert builder._splits_at_line_ends(house_tokenizer)


@pytest.mark.parametrize("change", [
    lambda s: s["pre_tokenizer"].update(add_prefix_space=True),
    lambda s: s.update(normalizer={"type": "NFC"}),
    lambda s: s["added_tokens"][0].update(rstrip=True),
    lambda s: s.update(pre_tokenizer={"type": "Whitespace"}),
    lambda s: s["pre_tokenizer"].update(use_regex=False),
    lambda s: s.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [       # SmolLM2's: digits split first
        {"type": "Digits", "individual_digits": True}, s["pre_tokenizer"]]}),
    lambda s: s["added_tokens"].append({**s["added_tokens"][0], "id": 9000, "content": "<| |>"}),
])
def test_other_tokenizers_are_counted_whole(house_tokenizer, change):
    spec = json.loads(house_tokenizer.to_str())
    change(spec)
    assert not builder._splits_at_line_ends(Tokenizer.from_str(json.dumps(spec)))


def test_line_by_line_counts_equal_the_tokenizers(house_tokenizer):
    count = builder._safe_counter(_Engine(house_tokenizer).count_tokens)
    fresh = _fresh(house_tokenizer)
    rng = random.Random(13)
    checked = 0
    for name, text in _texts():
        for _ in range(300):
            a = rng.randrange(len(text))
            b = min(len(text), a + rng.choice((1, 7, 80, 400, 3000)))
            s = text[a:b]
            assert count(s) == fresh(s), (name, a, b, s[:60])
            checked += 1
        assert count(text) == fresh(text), name
    assert checked >= 1500


def test_a_tokenizer_that_is_not_split_gets_whole_texts_remembered(house_tokenizer):
    spec = json.loads(house_tokenizer.to_str())
    spec["normalizer"] = {"type": "NFC"}
    engine = _Engine(Tokenizer.from_str(json.dumps(spec)))
    count = builder._safe_counter(engine.count_tokens)
    text = "def f(x):\n    return x + 1\n"
    assert count(text) == _fresh(engine.tokenizer)(text)
    calls = engine.calls
    assert builder._safe_counter(engine.count_tokens)(text) == count(text)
    assert engine.calls == calls            # remembered across counters of the same tokenizer


def test_prompts_are_the_same_as_with_fresh_counts(house_tokenizer):
    """Plans at many cursors, typed one character after another as an editor sends them, with remembered counts
    and with every text counted afresh: identical."""
    engine = _Engine(house_tokenizer)
    fresh = _fresh(house_tokenizer)
    rng = random.Random(7)
    for name, text in _texts()[:5]:
        uri = f"file:///{name}"
        lang = {"py": "python", "js": "javascript", "c": "c"}.get(name.rsplit(".", 1)[-1], "python")
        trees_a, trees_b = Trees(), Trees()
        for budget in (384, 1024):
            start = rng.randrange(len(text) // 4, len(text) // 2)
            for k in range(0, 60, 3):                 # typing: the text grows at the cursor
                off = start + k
                doc = SourceFile(uri, lang, text[:off] + text[start:])   # text after the cursor unchanged
                a = build_prompt(doc, off, count_tokens=engine.count_tokens, budget_tokens=budget, trees=trees_a)
                b = build_prompt(doc, off, count_tokens=fresh, budget_tokens=budget, trees=trees_b)
                assert a == b, (name, budget, off)
