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
from dataclasses import dataclass, field

from .languages import INDENTED, grammar, query

MAX_PARSE_CHARS = 400_000       # documents longer than this are parsed in a window around the cursor
WINDOW_BEFORE = 300_000         # characters of the window before the cursor
WINDOW_AFTER = 60_000
HEAD_CHARS = 30_000             # head of a huge file parsed for imports
MAX_HEADER_LINES = 4


@dataclass(frozen=True)
class Item:
    kind: str        # "scope" | "definition" | "import"
    name: str        # defined name ("" for imports and anonymous scopes)
    line: int        # first line of the node in the document (0-based)
    end_line: int    # last line of the node
    text: str        # header / signature (up to the body) or the import statement, original indentation kept
    parent: str = "" # name of the scope a definition sits in (e.g. its class)


@dataclass
class Outline:
    language: str
    scopes: list[Item] = field(default_factory=list)        # enclosing the cursor, outermost first
    imports: list[Item] = field(default_factory=list)
    definitions: list[Item] = field(default_factory=list)
    near_names: list[str] = field(default_factory=list)     # used near the cursor, nearest first
    has_error: bool = False
    empty_body: bool = False                                # the cursor is in a block with no statements


def sanitize(text: str) -> str:
    """Replace lone surrogates by U+FFFD (same length, so offsets stay valid) so the text encodes as UTF-8."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return re.sub("[\ud800-\udfff]", "\ufffd", text)


@functools.lru_cache(maxsize=None)
def _queries(language: str):
    q = query(language)
    if q is None:
        return None
    import tree_sitter
    from .languages import QUERY_DIR
    src = (QUERY_DIR / f"{'typescript' if language == 'tsx' else language}.scm").read_text(encoding="utf-8")
    structure, names = q, tree_sitter.Query(grammar(language), src)
    structure.disable_capture("identifier")
    for cap in ("scope", "definition", "import", "name"):
        names.disable_capture(cap)
    return structure, names


def _parser(language: str):
    import tree_sitter
    return tree_sitter.Parser(grammar(language))


def _indent_of(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def _width(indent: str) -> int:
    return len(indent.expandtabs(4))


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
                found.append(Item("scope", "", i, cursor_line, line.rstrip()))
            if w == 0:
                break
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


def outline(text: str, language: str, offset: int, *, near_before: int = 30, near_after: int = 8) -> Outline | None:
    """The outline of ``text`` (already sanitized) at character ``offset``; None for languages without a grammar."""
    qs = _queries(language)
    if qs is None:
        return None
    structure, names = qs
    ws, we = 0, len(text)
    if len(text) > MAX_PARSE_CHARS:
        ws = text.rfind("\n", 0, max(0, offset - WINDOW_BEFORE)) + 1
        e = text.find("\n", min(len(text), offset + WINDOW_AFTER))
        we = len(text) if e < 0 else e
    window = text[ws:we]
    base_line = text.count("\n", 0, ws)
    buf = window.encode("utf-8")
    tree = _parser(language).parse(buf)
    root = tree.root_node
    lines = window.split("\n")
    rel = offset - ws
    row = window.count("\n", 0, rel)
    line_start = window.rfind("\n", 0, rel) + 1
    col = len(window[line_start:rel].encode("utf-8"))
    cursor_byte = len(window[:rel].encode("utf-8")) if not window.isascii() else rel
    cur_line = lines[row] if row < len(lines) else ""
    before_cursor = window[line_start:rel]
    cursor_indent = _width(before_cursor if not before_cursor.strip() else _indent_of(cur_line))
    out = Outline(language, has_error=root.has_error, empty_body=_in_empty_block(root, cursor_byte))

    from tree_sitter import QueryCursor
    scopes, defs = [], []
    for _, caps in QueryCursor(structure).matches(root):
        for kind in ("import", "scope", "definition"):
            for node in caps.get(kind, ()):
                r0, r1 = node.start_point[0], node.end_point[0]
                name_nodes = caps.get("name", ())
                name = name_nodes[0].text.decode("utf-8", "replace") if name_nodes else ""
                if kind == "import":
                    body = buf[node.start_byte:node.end_byte].decode("utf-8", "replace").rstrip()
                    out.imports.append(Item("import", "", base_line + r0, base_line + r1, body))
                    continue
                head = _header(buf, node, lines[r0] if r0 < len(lines) else "")
                item = Item(kind, name, base_line + r0, base_line + r1, head)
                if kind == "scope":
                    inside = node.start_byte < cursor_byte <= node.end_byte
                    if (not inside and language in INDENTED and node.start_byte < cursor_byte
                            and not buf[node.end_byte:cursor_byte].strip()):
                        inside = cursor_indent > _width(_indent_of(lines[r0]))
                    if inside and r0 < row:
                        scopes.append((node.start_byte, -node.end_byte, item))
                    elif inside and r0 == row and node.start_byte < cursor_byte:
                        pass  # the cursor is in the header itself: it is all in the prefix already
                else:
                    defs.append((node.start_byte, node.end_byte, item))
    scopes.sort(key=lambda s: (s[0], s[1]))
    seen_scope_lines = set()
    for _, _, item in scopes:
        if item.line not in seen_scope_lines:
            seen_scope_lines.add(item.line)
            out.scopes.append(item)
    if root.has_error or not out.scopes:
        fb = _fallback_scopes(lines, row, cursor_indent, ":" if language in INDENTED else "{")
        fb = [Item("scope", "", base_line + it.line, base_line + it.end_line, it.text) for it in fb]
        if len(fb) > len(out.scopes):
            out.scopes = fb
    # definitions: dedupe (a node may match twice) and attach the innermost enclosing named scope
    defs.sort(key=lambda d: (d[0], -d[1]))
    stack: list[tuple[int, str]] = []
    seen = set()
    for start, end, item in defs:
        while stack and stack[-1][0] < end:
            stack.pop()
        key = (item.line, item.name)
        if key not in seen and item.name:
            seen.add(key)
            parent = stack[-1][1] if stack else ""
            out.definitions.append(Item(item.kind, item.name, item.line, item.end_line, item.text, parent))
        stack.append((end, item.name))
    if ws > 0:  # a huge file: its imports are at the top, outside the parsed window
        head_end = text.rfind("\n", 0, min(ws, HEAD_CHARS)) + 1
        if head_end > 0:
            head = text[:head_end].encode("utf-8")
            htree = _parser(language).parse(head)
            hitems = []
            for _, caps in QueryCursor(structure).matches(htree.root_node):
                for node in caps.get("import", ()):
                    hitems.append(Item("import", "", node.start_point[0], node.end_point[0],
                                       head[node.start_byte:node.end_byte].decode("utf-8", "replace").rstrip()))
            out.imports = hitems + out.imports
    out.imports.sort(key=lambda it: it.line)
    # names used near the cursor, nearest first; the word the cursor touches is being typed: leave it out
    lo, hi = max(0, row - near_before), min(len(lines), row + near_after + 1)
    nc = QueryCursor(names)
    nc.set_point_range((lo, 0), (hi, 0))
    used: dict[str, int] = {}
    for node in nc.captures(root).get("identifier", ()):
        if node.start_byte <= cursor_byte <= node.end_byte:
            continue
        r = node.start_point[0]
        if not lo <= r < hi:
            continue
        dist = abs(r - row) * 2 + (1 if r > row else 0)
        name = node.text.decode("utf-8", "replace")
        if name not in used or dist < used[name]:
            used[name] = dist
    del col
    out.near_names = sorted(used, key=lambda n: (used[n], n))
    return out
