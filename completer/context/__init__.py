"""Prompt context for code completion: what goes into the model prompt at a cursor, and how.

``build_prompt(doc, offset, ...)`` returns a ``PromptPlan``: the FIM prompt (``completer.prompt`` templates), the
completion mode (``line`` / ``block``, see ``mode.py``), stop strings, the block indentation and a token budget for
the answer; ``completer.postprocess.postprocess(completion, plan)`` turns the model's text into ghost text.

Token budget (``budget_tokens`` for the whole prompt, counted with the caller's ``count_tokens``), by priority:

1. the text around the cursor: the near suffix (lines after the cursor, up to ``SUFFIX_SHARE`` of the budget; the
   rest of the cursor's line always) and the near prefix (lines before the cursor, at least ``NEAR_SHARE`` of
   the budget, before any context is considered);
2. the headers of the enclosing scopes (class / function / method / impl signatures above the cursor, however far
   away), innermost first when not all fit;
3. the file's imports;
4. signatures of definitions whose names are used near the cursor (nearest use first), from this file and from
   ``others`` (other open documents).
5. ``snippets``: context from beyond the open file, made off the keystroke path by the caller (definitions of
   imported names from the workspace's files, ``workspace.py``; similar windows of recently used files,
   ``similar.py``; recently edited ranges, ``edits.py``), up to ``SNIPPET_SHARE`` of the budget (taken from the
   near prefix's reservation down to ``NEAR_MIN_SHARE``), written first in the block (they change only when a file
   is saved or the cursor moves to another region, so the engine's prefix KV cache reuses them).
Priorities are strict between these classes (once an item of one class does not fit, no item of a lower class is
taken) and greedy within a class. Whatever the context does not use goes back to the prefix, which then reaches further up. Context items that the
prefix window already shows are left out.

The context is written as comment lines in the document's language (``# from utils.py:`` then ``# def helper(a, b):``; this file's own items under ``# main.py:``)
at the start of the prefix, in a fixed order (other files by name, then this file: imports, definitions, enclosing
scopes outermost first), so it is the same from one keystroke to the next. The file's own title line (``// main.go:``)
is there even without items, where the budget allows: the name and the comment syntax mark the language.

Cache-friendly windows: the prefix window starts at a line whose number is a multiple of ``ANCHOR_STEP`` and only
moves when the prefix outgrows its budget; the suffix window depends only on text after the cursor; with the
``house`` SPM template (suffix, then context + prefix) consecutive keystrokes share every prompt token except the
last few characters of the prefix.

Languages with a tree-sitter grammar (``languages.py``): Python, JavaScript, TypeScript/TSX, Go, Rust, C, C++; any
other language id gets the same windows without syntax context (``language == "text"``).
"""

from __future__ import annotations

from .builder import ANCHOR_STEP, NEAR_SHARE, SNIPPET_SHARE, SUFFIX_SHARE, build_prompt
from .plan import PromptPlan, Snippet, SourceFile

__all__ = ["SourceFile", "PromptPlan", "Snippet", "build_prompt", "ANCHOR_STEP", "NEAR_SHARE", "SUFFIX_SHARE",
           "SNIPPET_SHARE"]
