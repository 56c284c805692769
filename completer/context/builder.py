"""``build_prompt``: windows, budget and context block (priorities documented in ``completer/context``)."""

from __future__ import annotations

import bisect
import functools
import logging
import re
from dataclasses import dataclass
from typing import Callable, Sequence

from completer.prompt import END_TOKENS, fim_prompt
from completer.text import clean_surrogates as sanitize

from .plan import PromptPlan, Snippet, SourceFile
from .languages import INDENTED, canonical_language, comment_prefix, display_name
from .mode import choose_mode
from .syntax import Item, Trees, outline

log = logging.getLogger(__name__)

ANCHOR_STEP = 16        # the prefix window starts at a line number that is a multiple of this
LINE_RESERVE = 32       # tokens the cursor's line counts as at least when the window's start is chosen
NEAR_SHARE = 0.5        # share of the budget reserved for the near prefix before any context
SUFFIX_SHARE = 0.25     # most of the budget the suffix may take
SUFFIX_MAX_LINES = 40
CHARS_PER_TOKEN_MAX = 12  # a window longer than budget * this many characters is over budget without counting
MAX_SIGNATURES_PER_NAME = 2
MAX_NAMES = 24
MAX_OTHERS = 16
LINE_MODE_MAX_TOKENS = 48
SNIPPET_SHARE = 0.1     # most of the budget that context from beyond the open file (``snippets``) may take: at
                        # 0.25 it shortened the near prefix and the single-file set lost (exact 4 vs 5 of 56, prefix
                        # 7.1% vs 10.7%), at 0.1 not (5 vs 5); house v2 gains nothing from more on the cross-file set
                        # (bench/results/crossfile)
NEAR_MIN_SHARE = 0.35   # ...taken from the near prefix's reservation, which keeps at least this share
SNIPPET_KINDS = ("import", "similar", "edit")   # their order in the block and in priority
# languages whose definitions can be used from one another (other open documents of another family are skipped)
FAMILY = {"c": "c", "cpp": "c", "javascript": "js", "typescript": "js", "tsx": "js"}


def _clamp(offset, n: int) -> int:
    try:
        offset = int(offset)
    except (TypeError, ValueError):
        return n
    return max(0, min(n, offset))


@functools.lru_cache(maxsize=16)
def _definitions(text: str, language: str) -> tuple[Item, ...]:
    """Top definitions of another open document (cached by content: unchanged documents cost nothing)."""
    try:
        ol = outline(text, language, 0, all_definitions=True)
    except Exception as e:  # never let a neighbour's text break this prompt
        log.warning("outline of another document failed: %s: %s", type(e).__name__, e)
        return ()
    return tuple(ol.definitions) if ol else ()


def _suffix_window(after: str, budget: int, count: Callable[[str], int]) -> str:
    """Whole lines after the cursor within ``budget`` tokens (at most SUFFIX_MAX_LINES); the rest of the cursor's
    line always (capped in characters). Depends only on the text after the cursor."""
    first_end = after.find("\n")
    if first_end < 0:
        first_end = len(after)
    first = after[:first_end]
    if len(first) > max(16, budget * 4):
        return first[: max(16, budget * 4)]
    ends = [first_end]                      # candidate ends: after 0, 1, 2, ... further lines
    limit_chars = budget * CHARS_PER_TOKEN_MAX
    while ends[-1] < len(after) and len(ends) <= SUFFIX_MAX_LINES:
        nxt = after.find("\n", ends[-1] + 1)
        nxt = len(after) if nxt < 0 else nxt
        if nxt > limit_chars:
            break
        ends.append(nxt)
    if count(first) > budget:
        return first[: max(16, budget * 2)]
    lo, hi = 0, len(ends) - 1               # the most lines that fit: binary search (fit is monotonic)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(after[: ends[mid]]) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return after[: ends[lo]]


class Lines:
    """Line starts of the text before the cursor, from a region start on (absolute line numbers kept)."""

    def __init__(self, text: str, region: int, offset: int):
        region = text.rfind("\n", 0, region) + 1 if region > 0 else 0
        self.first = text.count("\n", 0, region)
        self.starts = [region]
        pos = text.find("\n", region, offset)
        while pos >= 0:
            self.starts.append(pos + 1)
            pos = text.find("\n", pos + 1, offset)
        self.cur = self.first + len(self.starts) - 1          # the cursor's line

    def start(self, line: int) -> int:
        return self.starts[line - self.first]

    def line_of(self, index: int) -> int:
        return self.first + max(0, bisect.bisect_right(self.starts, index) - 1)


def _earliest_fit(before: str, budget: int, count, lines: Lines, step: int, lo_line: int) -> int | None:
    """The earliest line >= lo_line that is a multiple of ``step`` and whose text up to the cursor fits, the
    cursor's own line counted as at least LINE_RESERVE tokens: so typing within a line shorter than that does not
    move the start (each move changes the prompt's start, and the engine prefills the whole prompt again; at the
    budget's edge a word's last letter, which merges tokens, had moved it back and forth: issue 29)."""
    limit = budget * CHARS_PER_TOKEN_MAX
    first = -(-max(lo_line, lines.first) // step) * step
    cands = [a for a in range(first, lines.cur + 1, step) if len(before) - lines.start(a) <= limit]
    line_start = lines.start(lines.cur)
    line = max(LINE_RESERVE, count(before[line_start:]))

    def fits(a: int) -> bool:
        return count(before[lines.start(a):line_start]) + line <= budget

    if not cands or not fits(cands[-1]):
        return None
    lo, hi = 0, len(cands) - 1        # fit is monotonic in the anchor: binary search the first that fits
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(cands[mid]):
            hi = mid
        else:
            lo = mid + 1
    return cands[lo]


def _prefix_window(before: str, budget: int, count: Callable[[str], int], lines: Lines) -> int:
    """The character index where the prefix window starts: the earliest line that is a multiple of ANCHOR_STEP
    whose text up to the cursor fits in ``budget`` tokens; when even the nearest such line does not fit, the same
    with finer steps (4, then 1 line) after it; inside a giant cursor line, a multiple of 64 characters from the
    line start (then fewer characters until it fits). The start only moves when the prefix outgrows the budget, and then by whole steps."""
    lo_line = 0
    for step in (ANCHOR_STEP, 4, 1):
        line = _earliest_fit(before, budget, count, lines, step, lo_line)
        if line is not None:
            return lines.start(line)
        lo_line = lines.cur // step * step
    ls = lines.start(lines.cur)
    keep = max(16, budget * 3)
    while True:  # a giant line: keep its end, starting at a multiple of 64 characters from the line start
        start = ls + max(0, -(-(len(before) - ls - keep) // 64) * 64)
        if keep <= 16 or count(before[start:]) <= budget:
            return start
        keep //= 2


SCOPE, IMPORT, SIGNATURE = 2, 3, 4        # context classes, in priority order (1 is the near text itself)


@dataclass(frozen=True)
class Candidate:
    """One context item that may go into the prompt's comment block."""
    priority: int        # SCOPE | IMPORT | SIGNATURE: strict between classes, greedy within one
    source: str          # URI of the document it comes from
    item: Item
    line: str            # as rendered in the block (a scope header, an import, a one-line signature)


def _render(sections: list[tuple[str, list[str]]], comment: str) -> str:
    out = []
    for title, lines in sections:
        if not lines:
            continue
        out.append(f"{comment} {title}")
        out.extend(f"{comment} {line}" for line in lines)
    return "\n".join(out) + "\n" if out else ""


def _sig(item: Item) -> str:
    sig = " ".join(l.strip() for l in item.text.split("\n"))
    return f"{sig}  (in {item.parent})" if item.parent else sig


# Token counts remembered across prompts, per tokenizer: the prefix and suffix windows are counted again on every
# keystroke, mostly over the same lines (issue 13: counting was a fifth of the language server's event loop at 50
# clients). With a tokenizer whose tokens never span a line end (_splits_at_line_ends) a text is counted as the sum
# of its lines' remembered counts, so a keystroke re-counts only its own line; with any other tokenizer whole texts
# are remembered. Either way the counts are the tokenizer's own, exactly.
_TOKENIZERS: list = []                    # tokenizers seen, strongly held: a count cache's key is its index here
_COUNTS: list[dict[str, int]] = []        # per tokenizer: text (or line chunk) -> tokens
_COUNTS_MAX = 65536                       # entries per tokenizer before its cache is emptied and refilled
_LINE_END = re.compile(r"(?<=[!-~])(?=\n)")   # between a printable ASCII character and a newline


def _splits_at_line_ends(tokenizer) -> bool:
    """Whether no token of ``tokenizer`` (a ``tokenizers.Tokenizer``) can span the point between a printable ASCII
    character and a newline, so that a text's token count is the sum of its pieces' split there: byte-level BPE with
    GPT-2's pre-tokenizer regex (a pre-token holding a newline is all whitespace, and BPE never merges across
    pre-tokens), no normalizer, no prefix space, and no added token holding whitespace or stripping it."""
    try:       # the tokenizer's own attributes: its JSON (to_str) took ~0.13 s to write and parse for SmolLM2
        pre = tokenizer.pre_tokenizer
        if (tokenizer.normalizer is not None or type(tokenizer.model).__name__ != "BPE"
                or type(pre).__name__ != "ByteLevel" or pre.use_regex is not True or pre.add_prefix_space is not False):
            return False
        added = tokenizer.get_added_tokens_decoder().values()
        return all(not t.lstrip and not t.rstrip and not any(c.isspace() for c in t.content) for t in added)
    except Exception:
        return False


def _count_cache(count_tokens: Callable[[str], int]) -> tuple[dict[str, int] | None, bool]:
    """(the cache of the tokenizer behind ``count_tokens``, whether it may split at line ends); (None, False) when
    ``count_tokens`` is not an engine's method with a ``tokenizer`` (nothing is remembered across calls then)."""
    owner = getattr(count_tokens, "__self__", None)
    tokenizer = getattr(owner, "tokenizer", None) if owner is not None else None
    if tokenizer is None:
        return None, False
    for i, t in enumerate(_TOKENIZERS):
        if t[0] is tokenizer:
            return _COUNTS[i], t[1]
    if len(_TOKENIZERS) >= 8:                 # engines rebuilt with other models: start over
        _TOKENIZERS.clear()
        _COUNTS.clear()
    _TOKENIZERS.append((tokenizer, _splits_at_line_ends(tokenizer)))
    _COUNTS.append({})
    return _COUNTS[-1], _TOKENIZERS[-1][1]


def prepare_counter(count_tokens: Callable[[str], int]) -> None:
    """Set up the count cache of ``count_tokens``'s tokenizer now (``pipeline.prepare``, at the engine's start)
    rather than in the first prompt it builds."""
    _count_cache(count_tokens)


def _safe_counter(count_tokens: Callable[[str], int]) -> Callable[[str], int]:
    """``count_tokens`` that never raises (a tokenizer that chokes on odd text must not cost the completion), with
    counts remembered (``_count_cache``)."""
    cache, split = _count_cache(count_tokens)
    if cache is None:
        cache = {}                           # this prompt's own: the same texts are counted more than once

    def counted(s: str) -> int:
        n = cache.get(s)
        if n is None:
            if len(cache) >= _COUNTS_MAX:
                cache.clear()
            n = cache[s] = int(count_tokens(s))
        return n

    def count(s: str) -> int:
        if not s:
            return 0
        try:
            if split:
                return sum(map(counted, _LINE_END.split(s)))
            return counted(s)
        except Exception as e:
            log.warning("count_tokens failed (%s: %s); estimating 3 characters a token", type(e).__name__, e)
            return len(s) // 3 + 1
    return count


def _outline_or_none(text: str, language: str, offset: int, uri: str, trees: Trees | None):
    """The document's outline, or None for plain text or when the grammar fails (a grammar bug must not cost the
    user a completion)."""
    if language == "text":
        return None
    try:
        return outline(text, language, offset, key=uri, trees=trees)
    except Exception as e:
        log.warning("tree-sitter outline failed for %s: %s: %s", uri, type(e).__name__, e)
        return None


def _other_definitions(others: Sequence[SourceFile], doc: SourceFile, language: str):
    """(uri, item) for the definitions of the other open documents of this language family."""
    seen_uris = {doc.uri}
    for other in sorted(others, key=lambda o: o.uri)[:MAX_OTHERS]:
        if other.uri in seen_uris or not isinstance(other.text, str):
            continue
        seen_uris.add(other.uri)
        olang = canonical_language(other.language_id, other.uri)
        if olang == "text" or FAMILY.get(olang, olang) != FAMILY.get(language, language):
            continue                     # a Go file's signatures do not help a Python completion
        for it in _definitions(sanitize(other.text), olang):
            yield other.uri, it


def _candidates(ol, doc: SourceFile, others: Sequence[SourceFile], language: str, near_line: int) -> list[Candidate]:
    """Context items above the near prefix, in priority order: enclosing scopes innermost first, imports, then
    signatures of the names used near the cursor (nearest use first, from this file and the others)."""
    this = doc.uri
    cands = [Candidate(SCOPE, this, it, it.text.split("\n")[0].rstrip() if len(it.text) > 200 else it.text)
             for it in reversed(ol.scopes) if it.line < near_line]
    cands += [Candidate(IMPORT, this, it, it.text) for it in ol.imports if it.line < near_line]
    scope_lines = {it.line for it in ol.scopes}
    by_name: dict[str, list[tuple[str, Item]]] = {}
    for it in ol.definitions:
        if it.line < near_line and it.line not in scope_lines:
            by_name.setdefault(it.name, []).append((this, it))
    for src, it in _other_definitions(others, doc, language):
        by_name.setdefault(it.name, []).append((src, it))
    for name in ol.near_names[:MAX_NAMES]:
        for src, it in by_name.get(name, ())[:MAX_SIGNATURES_PER_NAME]:
            cands.append(Candidate(SIGNATURE, src, it, _sig(it)))
    return cands


def _choose(cands: list[Candidate], budget: int, count, comment: str) -> list[Candidate]:
    """The candidates that fit ``budget`` by per-line token estimates: greedy within a class; once an item of one
    class does not fit, no item of a lower class is taken. ``count`` remembers each line's count (``_safe_counter``):
    the same lines come back on every keystroke."""
    chosen: list[Candidate] = []
    used = 0
    failed_class = None
    for cand in cands:
        if failed_class is not None and cand.priority > failed_class:
            break
        cost = sum(count(f"{comment} {l}\n") for l in cand.line.split("\n"))
        cost += count(f"{comment} from {display_name(cand.source)}:\n")
        if used + cost <= budget:
            chosen.append(cand)
            used += cost
        else:
            failed_class = cand.priority
    return chosen


def _context_block(chosen: list[Candidate], this: str, comment: str, marker: bool = False) -> str:
    """The comment block, in a fixed order so it is the same from one keystroke to the next: other files by name,
    then this file's imports, definitions and enclosing scopes (outermost first), each in document order. With
    ``marker`` this file's title line is written even without items: the file name and the comment syntax tell
    the model the language (a Go file must not get Python)."""
    others_sec: dict[str, list[tuple[int, str]]] = {}
    own: dict[int, list[tuple[int, str]]] = {IMPORT: [], SIGNATURE: [], SCOPE: []}
    for c in chosen:
        (others_sec.setdefault(c.source, []) if c.source != this else own[c.priority]).append((c.item.line, c.line))
    sections = [(f"from {display_name(uri)}:", [l for _, l in sorted(v)]) for uri, v in sorted(others_sec.items())]
    lines = [l for prio in (IMPORT, SIGNATURE, SCOPE) for _, l in sorted(own[prio])]
    own_lines = [sub for l in lines for sub in l.split("\n")]
    block = _render(sections + [(f"{display_name(this)}:", own_lines)], comment)
    if marker and not own_lines:
        block += f"{comment} {display_name(this)}:\n"
    return block


def _shrink_to_budget(chosen: list[Candidate], budget: int, count, this: str, comment: str, marker: bool):
    """(chosen, block) with the lowest-priority items dropped until the rendered block fits (the per-line estimates
    can be low: token counts are not additive); the language marker only where it fits too."""
    context = _context_block(chosen, this, comment, marker)
    while chosen and count(context) > budget:
        chosen = chosen[:-1]
        context = _context_block(chosen, this, comment, marker)
    if count(context) > budget:
        context = _context_block(chosen, this, comment)
    return chosen, context


def _fit_prompt(before: str, suffix: str, context: str, template: str, start: int, prefix_budget: int,
                budget_tokens: int, count, lines: Lines) -> tuple[str, str]:
    """(prompt, prefix): token counts are not additive across a join, so trim the prefix window until the whole
    prompt fits ``budget_tokens`` (a few rounds at most)."""
    prefix = before[start:]
    prompt = fim_prompt(prefix, suffix, template, context)
    for _ in range(6):
        over = count(prompt) - int(budget_tokens)
        if over <= 0:
            break
        prefix_budget = max(1, prefix_budget - max(over, 4))
        start = max(start, _prefix_window(before, prefix_budget, count, lines))
        prefix = before[start:]
        prompt = fim_prompt(prefix, suffix, template, context)
    return prompt, prefix


# block mode in a brace language: a definition starting on the header's level is past the block
NEXT_DEFINITION = {"go": ("func ", "type "), "javascript": ("function ", "class ", "export "),
                   "typescript": ("function ", "class ", "export ", "interface "),
                   "tsx": ("function ", "class ", "export ", "interface "), "rust": ("fn ", "pub ", "impl ")}
# ...and another language's comment at the start of a body line is not code of this one (postprocess cuts it too;
# stopping there saves the tokens)
FOREIGN_COMMENTS = {"go": ('"""', "# "), "javascript": ('"""', "# "), "typescript": ('"""', "# "),
                    "tsx": ('"""', "# "), "rust": ('"""', "# "), "c": ('"""',), "cpp": ('"""',)}


def _stops(mode, language: str, template: str, max_tokens: int) -> tuple[tuple[str, ...], int]:
    """(stop strings, new-token budget) for the mode: line mode ends at the newline; block mode at two blank
    lines, at the next definition on the header's level, at the closing brace the editor already has, or at a
    line that starts in another language's comment syntax."""
    ends = END_TOKENS.get(template, ())
    if mode.mode == "line":
        return ("\n",) + ends, max(1, min(int(max_tokens), LINE_MODE_MAX_TOKENS))
    stop = ("\n\n\n",) + ends
    if language in INDENTED:
        stop += tuple(f"\n{mode.outer}{kw}" for kw in ("def ", "class ", "@"))
    elif language != "text":
        if mode.block_closed:
            stop += (f"\n{mode.outer}}}",)
        stop += tuple(f"\n{mode.outer}{kw}" for kw in NEXT_DEFINITION.get(language, ()))
        stop += tuple(f"\n{mode.indent}{c}" for c in FOREIGN_COMMENTS.get(language, ()))
    return stop, max(1, int(max_tokens))


def _snippet_block(snippets: Sequence[Snippet], budget: int, count, comment: str) -> str:
    """The comment block of ``snippets`` within ``budget`` tokens: snippets taken by ``rank`` (the sources rank
    their own: imported names' definitions, recent edits, similar windows, the imported files' other definitions),
    each snippet's lines from its first while they fit; then written grouped by file (``from SOURCE:``), files in
    the order they were first taken. The same snippets give the same block, so the KV of the prompt's start is
    reused across keystrokes."""
    if budget <= 0 or not snippets:
        return ""
    order = sorted((s for s in snippets if s.kind in SNIPPET_KINDS and s.lines),
                   key=lambda s: (s.rank, SNIPPET_KINDS.index(s.kind), s.source))
    groups: dict[tuple[str, str], list[str]] = {}
    used = 0
    for snip in order:
        key = (snip.kind, snip.source)        # an imported file's tiers are written together
        if key not in groups:
            head = count(f"{comment} from {snip.source}:\n")
            if used + head >= budget:
                continue
        else:
            head = 0
        taken = []
        cost = head
        for line in snip.lines:
            rendered = f"{comment} {line}\n" if line.strip() else f"{comment}\n"
            c = count(rendered)
            if used + cost + c > budget:
                break
            taken.append(rendered)
            cost += c
        if taken:
            groups.setdefault(key, []).extend(taken)
            used += cost
    block = "".join(f"{comment} from {src}:\n" + "".join(lines) for (_, src), lines in groups.items())
    while block and count(block) > budget:       # per-line estimates can be low: drop whole lines from the end
        block = block[:block.rstrip("\n").rfind("\n") + 1]
    return block


def build_prompt(doc: SourceFile, offset: int, *, others: Sequence[SourceFile] = (),
                 count_tokens: Callable[[str], int], budget_tokens: int = 1024,
                 template: str = "house", max_tokens: int = 64, trees: Trees | None = None,
                 snippets: Sequence[Snippet] = (), snippet_share: float = SNIPPET_SHARE) -> PromptPlan:
    """The prompt for the cursor at ``offset`` of ``doc`` within ``budget_tokens`` (priorities in the package
    docstring): near suffix and prefix, then context as far as the budget goes, then the prefix takes the rest.
    ``trees`` (the caller's per-document parse trees) makes re-parsing after a keystroke incremental. ``snippets``
    (context from beyond the open file, made off the keystroke path) take up to ``snippet_share`` of the budget,
    first in the context block."""
    fim_prompt("", "", template)                      # unknown template: ValueError before any work
    text = sanitize(doc.text if isinstance(doc.text, str) else "")
    offset = _clamp(offset, len(text))
    language = canonical_language(doc.language_id, doc.uri)
    ol = _outline_or_none(text, language, offset, doc.uri, trees)
    mode = choose_mode(text, offset, language, empty_body=bool(ol and ol.empty_body))
    count = _safe_counter(count_tokens)
    budget = max(16, int(budget_tokens) - count(fim_prompt("", "", template)))
    before, after = text[:offset], text[offset:]
    # (1) near text: suffix first (it depends only on text after the cursor), then the reserved near prefix
    suffix = _suffix_window(after, int(budget * SUFFIX_SHARE), count)
    suffix_tokens = count(suffix)
    lines = Lines(text, max(0, offset - budget * CHARS_PER_TOKEN_MAX), offset)
    near_budget = int(budget * NEAR_SHARE)
    snippet_budget = int(budget * max(0.0, min(1.0, snippet_share))) if snippets else 0
    if snippet_budget:                       # beyond-the-file context may shorten the near prefix's reservation
        near_budget = max(int(budget * NEAR_MIN_SHARE), min(near_budget, budget - suffix_tokens - snippet_budget))
    near_line = lines.line_of(_prefix_window(before, near_budget, count, lines))
    ctx_budget = max(0, budget - suffix_tokens - near_budget)
    comment, this = comment_prefix(language), doc.uri
    far = _snippet_block(snippets, min(snippet_budget, ctx_budget), count, comment)
    ctx_budget = max(0, ctx_budget - count(far))
    # (2-4) context in what is left
    chosen: list[Candidate] = []
    if ol is not None and ctx_budget > 0:
        chosen = _choose(_candidates(ol, doc, others, language, near_line), ctx_budget, count,
                         comment)
    marker = language != "text"
    chosen, context = _shrink_to_budget(chosen, ctx_budget, count, this, comment, marker)
    context = far + context
    # what the context leaves goes back to the prefix; items the longer prefix shows are dropped from the context
    prefix_budget = max(near_budget, budget - suffix_tokens - count(context))
    start = _prefix_window(before, prefix_budget, count, lines)
    start_line = lines.line_of(start)
    shown = [c for c in chosen if c.item.line >= start_line and c.source == this]
    if shown:
        chosen = [c for c in chosen if c not in shown]
        context = far + _context_block(chosen, this, comment, marker)
    prompt, prefix = _fit_prompt(before, suffix, context, template, start, prefix_budget, budget_tokens, count,
                                 lines)
    stop, new_tokens = _stops(mode, language, template, max_tokens)
    return PromptPlan(prompt=prompt, prefix=prefix, suffix=suffix, mode=mode.mode, stop=stop, indent=mode.indent,
                      language=language, max_tokens=new_tokens, context=context,
                      snippets=tuple(c.line for c in sorted(chosen, key=lambda c: c.priority)),
                      block_closed=mode.block_closed, template=template, prompt_tokens=count(prompt),
                      outer_indent=mode.outer)
