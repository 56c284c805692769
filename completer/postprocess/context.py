"""What every post-processing filter may look at: the cursor's surroundings as the prompt saw them."""

from __future__ import annotations

from dataclasses import dataclass

from completer.context import PromptPlan
from completer.context.languages import INDENTED


@dataclass(frozen=True)
class Context:
    """The screen around the cursor and the plan's decisions, derived once from a ``PromptPlan`` so that filters
    are pure functions of ``(text, Context)`` and a table test can build one directly."""
    line_before: str = ""         # the cursor's line up to the cursor
    rest: str = ""                # the cursor's line after the cursor
    line_above: str = ""          # the line before the cursor's line (as far as the prompt has it)
    suffix: str = ""              # document text after the cursor (as far as the prompt has it)
    mode: str = "line"            # "line" | "block"
    indent: str = ""              # indentation of the block the completion goes into
    outer_indent: str = ""        # block mode: indentation of the block's header line
    language: str = "text"
    block_closed: bool = True     # brace languages: the suffix already closes the block
    template: str = "house"
    crlf: bool = False            # the document's lines end in CRLF

    @classmethod
    def from_plan(cls, plan: PromptPlan) -> "Context":
        start = plan.prefix.rfind("\n")
        return cls(line_before=plan.prefix[start + 1:],
                   line_above=plan.prefix[plan.prefix.rfind("\n", 0, max(start, 0)) + 1:max(start, 0)],
                   rest=plan.suffix.split("\n", 1)[0].rstrip("\r"), suffix=plan.suffix, mode=plan.mode,
                   indent=plan.indent, outer_indent=plan.outer_indent, language=plan.language,
                   block_closed=plan.block_closed, template=plan.template,
                   crlf="\r\n" in plan.prefix[-4000:] or "\r\n" in plan.suffix[:4000])

    @property
    def on_blank_line(self) -> bool:
        """Only indentation before the cursor: the completion starts the line's code."""
        return not self.line_before.strip()

    @property
    def brace_language(self) -> bool:
        return self.language not in INDENTED and self.language != "text"
