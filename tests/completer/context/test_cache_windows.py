"""Consecutive keystrokes give prompts that share everything but the last few characters of the prefix."""

from __future__ import annotations

import os

from completer.context import ANCHOR_STEP, SourceFile, build_prompt

BODY = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(200))
LINE = "result = compute(values, scale) + offset  # typed one key at a time"


def _common(a: str, b: str) -> int:
    return len(os.path.commonprefix([a, b]))


def _typing(count_tokens, template, text_before, text_after, typed):
    prompts = []
    for k in range(len(typed) + 1):
        text = text_before + typed[:k] + text_after
        plan = build_prompt(SourceFile("file:///t/m.py", "python", text), len(text_before) + k,
                            count_tokens=count_tokens, budget_tokens=512, template=template)
        prompts.append(plan.prompt)
    return prompts


def test_each_keystroke_shares_all_but_the_end(count_tokens):
    mid = BODY.index("def f120")
    prompts = _typing(count_tokens, "house", BODY[:mid], "\n" + BODY[mid:], LINE)
    tail = len("<|fim_middle|>")
    shared = [_common(p1, p2) >= len(p1) - tail for p1, p2 in zip(prompts, prompts[1:])]
    # SPM: everything up to the cursor of the earlier prompt is shared, except where the prefix window moves
    # (by whole ANCHOR_STEP lines, at most once while one line is typed)
    assert shared.count(False) <= 1, shared


def test_typing_a_short_line_never_moves_the_window(count_tokens):
    """Whatever the budget, typing within a line shorter than LINE_RESERVE tokens keeps the prompt's start (at the
    budget's edge a letter that merges tokens had moved it back and forth, a whole prefill each time: issue 29)."""
    mid = BODY.index("def f120")
    typed = "compute(values, scale)"
    moved = []
    for budget in range(200, 520, 8):
        prompts = []
        for k in range(len(typed) + 1):
            text = BODY[:mid] + typed[:k] + "\n" + BODY[mid:]
            prompts.append(build_prompt(SourceFile("file:///t/m.py", "python", text), mid + k,
                                        count_tokens=count_tokens, budget_tokens=budget, template="house").prompt)
        tail = len("<|fim_middle|>")
        moved += [budget for p1, p2 in zip(prompts, prompts[1:]) if _common(p1, p2) < len(p1) - tail]
    assert moved == []


def test_window_moves_in_coarse_steps_over_many_lines(count_tokens):
    lines = [f"v{i} = v{i - 1} + {i}\n" for i in range(1, 121)]
    prompts = []
    for k in range(len(lines) + 1):              # one prompt per line typed: the window must not slide per line
        text = "v0 = 0\n" + "".join(lines[:k])
        prompts.append(build_prompt(SourceFile("file:///t/m.py", "python", text), len(text),
                                    count_tokens=count_tokens, budget_tokens=256).prompt)
    breaks = sum(1 for p1, p2 in zip(prompts, prompts[1:]) if _common(p1, p2) < len(p1) - 40)
    assert 1 <= breaks <= len(lines) // ANCHOR_STEP + 3, breaks


def test_psm_template_shares_the_context_and_prefix(count_tokens):
    mid = BODY.index("def f120")
    prompts = _typing(count_tokens, "qwen", BODY[:mid], "\n" + BODY[mid:], LINE[:20])
    for p1, p2 in zip(prompts, prompts[1:]):
        cut = p1.index("<|fim_suffix|>")
        assert _common(p1, p2) >= cut


def test_consecutive_prompts_share_house_tokens(house_tokenizer):
    """With the shipped house tokenizer: all but the last few tokens of the earlier prompt are shared."""
    ids = lambda s: house_tokenizer.encode(s, add_special_tokens=False).ids
    count = lambda s: len(ids(s))
    mid = BODY.index("def f120")
    prompts = _typing(count, "house", BODY[:mid], "\n" + BODY[mid:], LINE[:30])
    near = 0
    for p1, p2 in zip(prompts, prompts[1:]):
        a, b = ids(p1), ids(p2)
        shared = len(os.path.commonprefix([a, b]))
        near += shared >= len(a) - 4
    assert near >= len(prompts) - 2          # all but at most one window move
