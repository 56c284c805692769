import json

import pytest

from lsp import trace as tr


def _trace() -> tr.Trace:
    h = tr.Header("file:///a.py", "python", "x = 1\n😀 = 2\n", {"seed": 3})
    ev = [tr.Event(0, "file:///a.py", edit=tr.insert_edit(h.text, 5, "0")),
          tr.Event(120.5, "file:///a.py", accept={"intended": "0\n"}),
          tr.Event(300, "file:///a.py", reject={}),
          tr.Event(400, "file:///b.js", open={"languageId": "javascript", "text": "let a;\n"}),
          tr.Event(500, "file:///b.js", edit={"text": "let b;\n"}, cursor={"line": 1, "character": 0})]
    return tr.Trace(h, ev)


def test_round_trip():
    t = _trace()
    t2 = tr.loads(tr.dumps(t))
    assert t2.header == t.header and t2.events == t.events
    assert tr.dumps(t2) == tr.dumps(t)
    assert t2.keystrokes == 2


def test_utf16_positions_after_astral_characters():
    text = "😀ab\nc"
    assert tr.position_of(text, 2) == {"line": 0, "character": 3}     # the emoji is 2 UTF-16 units
    assert tr.offset_of(text, {"line": 0, "character": 3}) == 2
    assert tr.offset_of(text, {"line": 0, "character": 99}) == 3      # past the end of the line = line end
    with pytest.raises(tr.TraceError, match="surrogate"):
        tr.offset_of(text, {"line": 0, "character": 1})
    new, cur = tr.apply_edit(text, tr.insert_edit(text, 2, "Z"))
    assert new == "😀aZb\nc" and cur == 3
    assert tr.apply_edit(new, tr.delete_edit(new, 3))[0] == text


@pytest.mark.parametrize("line, message", [
    ('{"t_ms": 0, "uri": "u"}', "exactly one of"),
    ('{"t_ms": -1, "uri": "u", "edit": {"text": ""}}', "t_ms"),
    ('{"t_ms": 0, "uri": "u", "edit": {"range": {"start": {"line": 0}}, "text": ""}}', "edit.range.start"),
    ('{"t_ms": 0, "uri": "u", "accept": {}}', "intended"),
    ('{"t_ms": 0, "uri": "u", "edit": {"text": ""}, "bogus": 1}', "unknown field"),
    ("not json", "not JSON"),
])
def test_bad_events_name_the_line(line, message):
    head = json.dumps({"trace": 1, "uri": "u", "languageId": "python", "text": ""})
    with pytest.raises(tr.TraceError, match=message) as e:
        tr.loads(head + "\n" + line + "\n", "t.jsonl")
    assert "t.jsonl:2" in str(e.value)


def test_header_and_time_order_checked():
    with pytest.raises(tr.TraceError, match="header"):
        tr.loads('{"t_ms": 0}\n')
    head = json.dumps({"trace": 1, "uri": "u", "languageId": "python", "text": ""})
    ev = lambda t: json.dumps({"t_ms": t, "uri": "u", "edit": {"text": "a"}})  # noqa: E731
    with pytest.raises(tr.TraceError, match="backwards"):
        tr.loads("\n".join([head, ev(10), ev(5)]))
