"""``textDocument/completion``: the same completion as one item, for clients without inline completion."""

from __future__ import annotations

from lsprotocol import types

from .lifecycle import Completion


def to_completion_list(completion: Completion, line: int, character: int) -> types.CompletionList:
    if not completion.text:
        return types.CompletionList(is_incomplete=True, items=[])
    at = types.Position(line=line, character=character)
    first = completion.text.split("\n", 1)[0].strip() or completion.text.strip()
    item = types.CompletionItem(
        label=first[:80] or completion.text,
        kind=types.CompletionItemKind.Text,
        detail="completer",
        insert_text_format=types.InsertTextFormat.PlainText,
        text_edit=types.TextEdit(range=types.Range(start=at, end=at), new_text=completion.text),
        # the item is the text after the cursor: clients filter with the word before it, so keep it matching
        filter_text=completion.text,
        sort_text="0",
        preselect=True,
    )
    # incomplete: every keystroke asks again (the lifecycle answers type-through from cache)
    return types.CompletionList(is_incomplete=True, items=[item])


def register(server) -> None:
    @server.feature(types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions(trigger_characters=[".", "(", " "]))
    async def completion(ls, params: types.CompletionParams) -> types.CompletionList:
        result = await ls.complete_at(params.text_document.uri, params.position, "completion")
        return to_completion_list(result, params.position.line, params.position.character)
