"""``textDocument/inlineCompletion`` (LSP 3.18): ghost text at the cursor, through the request lifecycle.

A partial answer (``partialAnswerMs``, only to clients with the capability ``experimental.partialGhost``) is the
same list with ``"partial": true`` beside ``items``: what the model had written by then; the client shows it and
asks again at once for the same position, which is answered when the rest is there."""

from __future__ import annotations

from lsprotocol import types

from .lifecycle import Completion


def to_inline_list(completion: Completion, line: int, character: int,
                   selected: types.SelectedCompletionInfo | None = None) -> types.InlineCompletionList:
    """One item inserting the completion at the cursor (an empty range there), or no items. With a suggestion
    selected in the editor's list, the item replaces the suggestion's range with the suggestion and the completion
    after it, which is the form editors show (ghost text extending the selected item)."""
    if not completion.text:
        return types.InlineCompletionList(items=[])
    if selected is not None:
        return types.InlineCompletionList(items=[types.InlineCompletionItem(
            insert_text=selected.text + completion.text, range=selected.range)])
    at = types.Position(line=line, character=character)
    return types.InlineCompletionList(
        items=[types.InlineCompletionItem(insert_text=completion.text, range=types.Range(start=at, end=at))]
    )


def to_inline_result(completion: Completion, line: int, character: int,
                     selected: types.SelectedCompletionInfo | None, converter) -> types.InlineCompletionList | dict:
    """The LSP result: the list, or for a partial answer its JSON with ``"partial": true`` (an extension field, so
    the list goes out as a dict; ``converter`` is the connection's cattrs converter)."""
    lst = to_inline_list(completion, line, character, selected)
    if not completion.partial or not lst.items:
        return lst
    return {**converter.unstructure(lst), "partial": True}


def register(server) -> None:
    @server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    async def inline_completion(ls, params: types.InlineCompletionParams) -> types.InlineCompletionList:
        # A character past the end of the line means the line's end (LSP): the item's range says where that is.
        snap, offset = ls.locate(params.text_document.uri, params.position)
        line, character = snap.position_at(offset)
        selected = params.context.selected_completion_info if params.context is not None else None
        completion = await ls.complete_at(params.text_document.uri, params.position, "inlineCompletion", selected,
                                          partial_ok=ls.partial_ghost)
        return to_inline_result(completion, line, character, selected, ls.protocol._converter)
