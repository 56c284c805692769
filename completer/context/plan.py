"""What the context layer takes (a document) and gives (a prompt plan): the prompt contract between
``completer.context``, ``completer.postprocess`` and ``completer.pipeline``. A module of its own so that the builder
and the package's ``__init__`` both import it, instead of the builder importing the half-initialised package."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SourceFile:
    uri: str
    language_id: str      # as LSP sends it ("python", "typescriptreact", ...)
    text: str


@dataclass(frozen=True)
class Snippet:
    """Context from beyond the open file (``completer/context/workspace.py``, ``similar.py``, ``edits.py``), made
    off the keystroke path and handed to ``build_prompt``: written as comment lines under ``from SOURCE:``."""
    source: str                 # how the block names where it comes from (a workspace-relative path)
    kind: str                   # "import" (definitions of imported names) | "similar" (a window like the cursor's)
                                # | "edit" (lines edited recently)
    lines: tuple[str, ...]      # most useful first: a budget cut drops lines from the end
    names: tuple[str, ...] = ()  # names it defines (import snippets)
    rank: int = 0               # order among snippets of its kind (lower: more useful)
    score: float = 0.0          # similar windows: the Jaccard similarity


@dataclass(frozen=True)
class PromptPlan:
    prompt: str                 # the full model prompt, FIM template applied
    prefix: str                 # document text before the cursor that the prompt contains (possibly windowed)
    suffix: str                 # document text after the cursor that the prompt contains
    mode: str                   # "line" (finish the current line) | "block" (after a block opener / empty body)
    stop: tuple[str, ...]       # stop strings for the engine
    indent: str                 # indentation of the block the completion goes into
    language: str               # canonical language name or "text"
    max_tokens: int             # suggested max new tokens for this mode
    context: str = ""           # the comment-line context block placed before the prefix
    snippets: tuple[str, ...] = ()  # the context items included, highest priority first (for debugging/tests)
    block_closed: bool = True   # brace languages: the suffix already closes the block the completion is in
    template: str = "house"
    outer_indent: str = ""      # block mode: indentation of the block's header line (where its closer goes)
    prompt_tokens: int = 0      # count_tokens(prompt)
    heal: str = ""              # token healing: the prompt's prefix ends this many characters early; the engine's
                                # first tokens re-type them (completer.healing)
