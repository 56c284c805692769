"""``textDocument/inlineCompletion`` (LSP 3.18): ghost text at the cursor, through the request lifecycle."""

from __future__ import annotations

from lsprotocol import types

from .lifecycle import Completion


def to_inline_list(completion: Completion, line: int, character: int) -> types.InlineCompletionList:
    """One item inserting the completion at the cursor (an empty range there), or no items."""
    if not completion.text:
        return types.InlineCompletionList(items=[])
    at = types.Position(line=line, character=character)
    return types.InlineCompletionList(
        items=[types.InlineCompletionItem(insert_text=completion.text, range=types.Range(start=at, end=at))]
    )


def register(server) -> None:
    @server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    async def inline_completion(ls, params: types.InlineCompletionParams) -> types.InlineCompletionList:
        completion = await ls.complete_at(params.text_document.uri, params.position, "inlineCompletion")
        return to_inline_list(completion, params.position.line, params.position.character)
