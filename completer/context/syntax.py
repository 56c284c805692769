"""Tree-sitter outline of a document around the cursor: enclosing scopes, imports, definitions, names used nearby.

Queries live in ``queries/<language>.scm`` (capture names documented in ``python.scm``). One query file is compiled
twice: the structural captures run over the parsed window, the ``@identifier`` captures only over the lines near
the cursor (a file's identifiers are many; only those near the cursor matter).

Huge documents are parsed only in a window of lines around the cursor (``MAX_PARSE_CHARS``), plus the head of the
file for its imports. Unclosed brackets while typing give ERROR trees; the enclosing scopes then fall back to an
indentation scan of the lines above the cursor, which needs no tree.
"""

from __future__ import annotations

import functools
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from completer.text import indentation as _indent_of, width as _width

from .languages import INDENTED, grammar, query, query_source

MAX_PARSE_CHARS = 160_000       # documents longer than this are parsed in a window around the cursor
WINDOW_BEFORE = 100_000         # characters of the window before the cursor
WINDOW_AFTER = 20_000
HEAD_CHARS = 30_000             # head of a huge file parsed for imports
MAX_HEADER_LINES = 4


@dataclass(frozen=True)
class Item:
    kind: str        # "scope" | "definition" | "import"
    name: str        # defined name ("" for imports and anonymous scopes)
    line: int        # first line of the node in the document (0-based)
    text: str        # header / signature (up to the body) or the import statement, original indentation kept
    parent: str = "" # name of the scope a definition sits in (e.g. its class)


@dataclass
class Outline:
    language: str
    scopes: list[Item] = field(default_factory=list)        # enclosing the cursor, outermost first
    imports: list[Item] = field(default_factory=list)
    definitions: list[Item] = field(default_factory=list)
    near_names: list[str] = field(default_factory=list)     # used near the cursor, nearest first
    empty_body: bool = False                                # the cursor is in a block with no statements


@functools.lru_cache(maxsize=None)
def _queries(language: str):
    q = query(language)
    if q is None:
        return None
    import tree_sitter
    src = query_source(language)
    structure, names = q, tree_sitter.Query(grammar(language), src)
    data = src.encode("utf-8")
    for i in range(q.pattern_count):   # split the patterns: identifier uses vs structure
        text = data[q.start_byte_for_pattern(i):q.end_byte_for_pattern(i)]
        (structure if b"@identifier" in text else names).disable_pattern(i)
    return structure, names


def _parser(language: str):
    import tree_sitter
    return tree_sitter.Parser(grammar(language))


def _common_prefix(a: bytes, b: bytes) -> int:
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:                      # binary search with C-speed slice compares
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _point(buf: bytes, i: int) -> tuple[int, int]:
    return buf.count(b"\n", 0, i), i - (buf.rfind(b"\n", 0, i) + 1)


class Trees:
    """The last parse tree of each open document, so that one keystroke re-parses only what changed.

    Owned by whoever owns the documents (the language server's per-connection ``DocumentStore``), which drops a
    document's tree when it is closed; not a module global, so connections do not share or leak each other's trees.
    """

    def __init__(self, max_documents: int = 8):
        self.max_documents = max_documents
        self._trees: "OrderedDict[tuple[str, str], tuple[bytes, object]]" = OrderedDict()
        self._lock = threading.Lock()            # prompts are planned off the event loop too (bench, tests)

    def __len__(self) -> int:
        return len(self._trees)

    def drop(self, key: str) -> None:
        """Forget the trees of document ``key`` (closed)."""
        with self._lock:
            for k in [k for k in self._trees if k[0] == key]:
                del self._trees[k]

    def parse(self, language: str, buf: bytes, key: str):
        parser = _parser(language)
        with self._lock:
            old = self._trees.pop((key, language), None)
            if old is not None and old[0] == buf:
                tree = old[1]
            elif old is not None:
                old_buf, tree = old
                start = _common_prefix(old_buf, buf)
                tail = _common_prefix(old_buf[start:][::-1], buf[start:][::-1])
                old_end, new_end = len(old_buf) - tail, len(buf) - tail
                tree.edit(start_byte=start, old_end_byte=old_end, new_end_byte=new_end,
                          start_point=_point(old_buf, start), old_end_point=_point(old_buf, old_end),
                          new_end_point=_point(buf, new_end))
                tree = parser.parse(buf, tree)
            else:
                tree = parser.parse(buf)
            self._trees[(key, language)] = (buf, tree)
            while len(self._trees) > self.max_documents:
                self._trees.popitem(last=False)
            return tree


def parse(language: str, buf: bytes, key: str = "", trees: Trees | None = None):
    """Parse ``buf``; with ``trees`` and a ``key`` (the document URI) reuse that document's previous tree
    incrementally."""
    if trees is None or not key:
        return _parser(language).parse(buf)
    return trees.parse(language, buf, key)


def _body_start(node) -> int | None:
    """Byte offset where the node's body starts (searching a couple of levels down), or None."""
    frontier = [node]
    for _ in range(3):
        nxt = []
        for n in frontier:
            body = n.child_by_field_name("body")
            if body is not None and body.start_byte > node.start_byte:
                return body.start_byte
            nxt.extend(n.named_children)
        frontier = nxt
    return None


def _header(buf: bytes, node, line_text: str) -> str:
    start = node.start_byte
    end = _body_start(node)
    if end is None:
        end = buf.find(b"\n", start)
        end = node.end_byte if end < 0 or end > node.end_byte else end
    if buf[end:end + 1] == b"{":
        end += 1                                   # keep the opening brace: "fn f() {" reads as a header
    text = buf[start:end].decode("utf-8", "replace").rstrip()
    lines = text.split("\n")[:MAX_HEADER_LINES]
    return _indent_of(line_text) + "\n".join(l.rstrip() for l in lines)


def _fallback_scopes(lines: list[str], cursor_line: int, cursor_indent: int, opener: str) -> list[Item]:
    """Enclosing headers by indentation: each less-indented line above the cursor that opens a block."""
    found: list[Item] = []
    limit = cursor_indent
    for i in range(cursor_line - 1, max(-1, cursor_line - 2000), -1):
        line = lines[i]
        if not line.strip():
            continue
        w = _width(_indent_of(line))
        if w < limit:
            limit = w
            if line.rstrip().endswith(opener) or re.match(r"\s*(def|class|fn|func|function|impl|struct|namespace|"
                                                         r"pub|async|export|interface|enum|trait)\b", line):
                found.append(Item("scope", "", i, line.rstrip()))
            if w == 0:
                break
    if opener == "{" and found and _width(_indent_of(lines[found[-1].line])) == 0:
        closers = 0      # unindented namespaces / extern "C" blocks around the outermost header
        for i in range(found[-1].line - 1, max(-1, found[-1].line - 5000), -1):
            line = lines[i]
            if not line.strip() or line[:1] in " \t":
                continue
            if line.startswith("}"):
                closers += 1
            elif line.rstrip().endswith("{"):
                if closers:
                    closers -= 1
                else:
                    found.append(Item("scope", "", i, line.rstrip()))
    return found[::-1]


def _in_empty_block(root, cursor_byte: int) -> bool:
    from .mode import BLOCK_TYPES
    node = root.descendant_for_byte_range(cursor_byte, cursor_byte)
    for _ in range(4):
        if node is None:
            return False
        if node.type in BLOCK_TYPES and node.start_byte < cursor_byte <= node.end_byte:
            return all(c.type == "comment" for c in node.named_children)
        node = node.parent
    return False


_CONSTRUCTORS = {"class_definition": ("function_definition", "__init__"),
                 "class_declaration": ("method_definition", "constructor")}


def _signature(buf: bytes, node, line_text: str) -> str:
    """A definition's header; for a class, followed by its constructor's header (how it is called)."""
    head = _header(buf, node, line_text)
    ctor = _CONSTRUCTORS.get(node.type)
    body = node.child_by_field_name("body")
    if ctor is None or body is None:
        return head
    for child in body.named_children[:64]:
        target = child.child_by_field_name("definition") if child.type == "decorated_definition" else child
        if target is not None and target.type == ctor[0]:
            name = target.child_by_field_name("name")
            if name is not None and name.text == ctor[1].encode():
                return head + "\n" + _header(buf, target, "").strip()
    return head


_CONTAINERS = ("class", "impl", "trait", "struct", "interface", "namespace", "module", "enum")


def _container(node) -> str:
    """Name of the class-like node around a definition ("" at top level)."""
    p = node.parent
    for _ in range(6):
        if p is None:
            return ""
        if any(k in p.type for k in _CONTAINERS) and p.type not in ("class_body", "enum_body"):
            n = p.child_by_field_name("name") or p.child_by_field_name("type")
            if n is not None:
                return n.text.decode("utf-8", "replace")
        p = p.parent
    return ""


def _window(text: str, offset: int) -> tuple[int, int]:
    """Character range to parse: all of a normal file; for a huge one, whole lines around the cursor (or a plain
    character cut where the lines themselves are huge)."""
    if len(text) <= MAX_PARSE_CHARS:
        return 0, len(text)
    want_s = max(0, offset - WINDOW_BEFORE)
    ws = text.rfind("\n", max(0, want_s - 10_000), want_s) + 1 if want_s > 0 else 0
    if ws == 0 and want_s > 10_000:
        ws = want_s
    want_e = min(len(text), offset + WINDOW_AFTER)
    e = text.find("\n", want_e, want_e + 10_000)
    we = e if e >= 0 else want_e
    return ws, we


@dataclass(frozen=True)
class _Cursor:
    """Where the cursor is in the parsed window, in the units each step needs (tree-sitter works in bytes and rows
    of the window; items report lines of the whole document, hence ``base_line``)."""
    window: str          # the parsed characters
    buf: bytes           # the same, UTF-8
    base_line: int       # document line of the window's first line
    rel: int             # cursor offset in ``window`` (characters)
    byte: int            # cursor offset in ``buf``
    row: int             # cursor row in the window
    line_start: int      # character offset of the cursor's line in ``window``
    indent: int          # indentation width that the cursor's code sits at (what is typed on a blank line)

    def line_text(self, node) -> str:
        """The text of the node's first line before the node (its indentation, or what precedes it)."""
        s = self.buf.rfind(b"\n", 0, node.start_byte) + 1
        return self.buf[s:node.start_byte].decode("utf-8", "replace")


def _locate(window: str, base_line: int, rel: int) -> _Cursor:
    row = window.count("\n", 0, rel)
    line_start = window.rfind("\n", 0, rel) + 1
    cursor_byte = len(window[:rel].encode("utf-8")) if not window.isascii() else rel
    line_end = window.find("\n", rel)
    cur_line = window[line_start: len(window) if line_end < 0 else line_end]
    before_cursor = window[line_start:rel]
    indent = _width(before_cursor if not before_cursor.strip() else _indent_of(cur_line))
    return _Cursor(window, window.encode("utf-8"), base_line, rel, cursor_byte, row, line_start, indent)


def _near_range(buf: bytes, cursor_byte: int, lines_before: int, lines_after: int) -> tuple[int, int]:
    """Byte range from the start of the line ``lines_before`` lines above the cursor to the end of the line
    ``lines_after`` lines below it, looking at most 6000 bytes back and 2000 forward (minified lines are long)."""
    floor, ceil = max(0, cursor_byte - 6000), min(len(buf), cursor_byte + 2000)
    lo = cursor_byte
    for _ in range(lines_before + 1):
        nl = buf.rfind(b"\n", floor, lo)
        if nl < 0:
            lo = floor if floor > 0 else 0
            break
        lo = nl
    else:
        lo += 1
    if lo < len(buf) and buf[lo:lo + 1] == b"\n":
        lo += 1
    hi = cursor_byte
    for _ in range(lines_after + 1):
        nl = buf.find(b"\n", hi + 1, ceil)
        if nl < 0:
            hi = ceil
            break
        hi = nl
    return lo, hi


def _near_names(root, names_query, cur: _Cursor, lo: int, hi: int) -> list[str]:
    """Identifiers used in ``[lo, hi)``, nearest first (a line below counts a little further than the same line
    above); the word the cursor touches is being typed, so it is left out."""
    from tree_sitter import QueryCursor
    nc = QueryCursor(names_query)
    nc.set_byte_range(lo, max(lo, hi))
    used: dict[str, int] = {}
    for node in nc.captures(root).get("identifier", ()):
        if node.start_byte <= cur.byte <= node.end_byte or not lo <= node.start_byte < hi:
            continue
        r = node.start_point[0]
        dist = abs(r - cur.row) * 2 + (1 if r > cur.row else 0)
        name = node.text.decode("utf-8", "replace")
        if name not in used or dist < used[name]:
            used[name] = dist
    return sorted(used, key=lambda n: (used[n], n))


def _encloses(node, cur: _Cursor, language: str) -> bool:
    """Whether a scope node starting on a line above the cursor encloses it. In an indented language a block ends
    at its last statement, so a cursor on a blank line after it is still inside when it is indented deeper than
    the header."""
    if node.start_byte >= cur.byte or node.start_point[0] >= cur.row:
        return False
    if cur.byte <= node.end_byte:
        return True
    if language in INDENTED and not cur.buf[node.end_byte:cur.byte].strip():
        return cur.indent > _width(_indent_of(cur.line_text(node)))
    return False


def _imports(matches, buf: bytes, base_line: int = 0) -> list[Item]:
    """Import statements captured in the tree, as written."""
    return [Item("import", "", base_line + node.start_point[0],
                 buf[node.start_byte:node.end_byte].decode("utf-8", "replace").rstrip())
            for node, _ in _captures(matches, "import")]


def _scopes(matches, cur: _Cursor, language: str) -> list[Item]:
    """The scopes that enclose the cursor, outermost first, one per header line."""
    found = [(node.start_byte, -node.end_byte, node, name) for node, name in _captures(matches, "scope")
             if _encloses(node, cur, language)]
    found.sort(key=lambda s: (s[0], s[1]))
    items, seen_lines = [], set()
    for _, _, node, name in found:
        if node.start_point[0] not in seen_lines:
            seen_lines.add(node.start_point[0])
            items.append(Item("scope", name, cur.base_line + node.start_point[0],
                              _header(cur.buf, node, cur.line_text(node))))
    return items


def _indentation_scopes(cur: _Cursor, language: str) -> list[Item]:
    """The enclosing scopes found by indentation alone (for trees with errors while the user types)."""
    lines = cur.window[max(0, cur.line_start - 200_000):cur.line_start].split("\n")
    first = cur.row - (len(lines) - 1)
    fb = _fallback_scopes(lines, len(lines) - 1, cur.indent, ":" if language in INDENTED else "{")
    return [Item("scope", "", cur.base_line + first + it.line, it.text) for it in fb]


def _definitions(matches, cur: _Cursor, wanted) -> list[Item]:
    """Definitions whose name ``wanted`` accepts, in document order, each once (a node may match twice), with the
    class / impl / namespace around it as parent."""
    found = [(node.start_byte, -node.end_byte, node, name) for node, name in _captures(matches, "definition")
             if name and wanted(name)]
    found.sort(key=lambda d: (d[0], d[1]))
    items, seen = [], set()
    for _, _, node, name in found:
        key = (node.start_point[0], name)
        if key not in seen:
            seen.add(key)
            items.append(Item("definition", name, cur.base_line + node.start_point[0],
                              _signature(cur.buf, node, cur.line_text(node)), _container(node)))
    return items


def _captures(matches, capture: str):
    """(node, name) for each node captured as ``capture``; the name is the match's ``@name`` capture or ""."""
    for _, caps in matches:
        name_nodes = caps.get("name", ())
        name = name_nodes[0].text.decode("utf-8", "replace") if name_nodes else ""
        for node in caps.get(capture, ()):
            yield node, name


def _head_imports(text: str, window_start: int, language: str, structure) -> list[Item]:
    """Imports at the top of a huge file whose parsed window starts below them."""
    head_end = text.rfind("\n", 0, min(window_start, HEAD_CHARS)) + 1
    if head_end <= 0:
        return []
    from tree_sitter import QueryCursor
    head = text[:head_end].encode("utf-8")
    return _imports(QueryCursor(structure).matches(_parser(language).parse(head).root_node), head)


def outline(text: str, language: str, offset: int, *, near_before: int = 30, near_after: int = 8,
            all_definitions: bool = False, key: str = "", trees: Trees | None = None) -> Outline | None:
    """The outline of ``text`` (already sanitized) at character ``offset``; None for languages without a grammar.

    Definitions are those whose names are used near the cursor, or all of them with ``all_definitions``.
    """
    qs = _queries(language)
    if qs is None:
        return None
    structure, names = qs
    from tree_sitter import QueryCursor
    ws, we = _window(text, offset)
    cur = _locate(text[ws:we], text.count("\n", 0, ws), offset - ws)
    root = parse(language, cur.buf, key if ws == 0 else "", trees).root_node
    out = Outline(language, empty_body=_in_empty_block(root, cur.byte))
    out.near_names = _near_names(root, names, cur, *_near_range(cur.buf, cur.byte, near_before, near_after))
    matches = list(QueryCursor(structure).matches(root))
    out.imports = _imports(matches, cur.buf, cur.base_line)
    out.scopes = _scopes(matches, cur, language)
    if root.has_error or not out.scopes:
        fallback = _indentation_scopes(cur, language)
        if len(fallback) > len(out.scopes):
            out.scopes = fallback
    near = set(out.near_names)
    out.definitions = _definitions(matches, cur, (lambda n: True) if all_definitions else near.__contains__)
    if ws > 0:
        out.imports = _head_imports(text, ws, language, structure) + out.imports
    out.imports.sort(key=lambda it: it.line)
    return out
