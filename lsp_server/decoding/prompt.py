"""What the model sees: the text before the cursor within a token budget (plus the suffix for
models with fill-in-the-middle tokens, and other open files for those with a file separator).

The nearest lines are kept; the file's imports are put back in front when they fall outside the
window, and in a short first window (`scopes`) the headers of the `def`s and `class`es it starts
inside (`enclosing_headers`): a window of ~200 tokens often starts in the middle of a method.
The window starts on a line that is a multiple of `WINDOW_STEP` (counted from the top of
the file), its text on a line by it that starts outside every bracket and string
(`window_starts`: the docstring or call the grid line falls in whole where it fits, never its
middle), and a document's next prompt keeps the start of its previous one while that still
fits (`anchor`): typing on, adding lines or moving the cursor within the same function leave the
start of the prompt where it was, so the KV cache of the previous request (or of the prefill
made ahead of it) stays usable up to the cursor. A line too long for the budget is cut inside,
at a multiple of `LINE_CUT_STEP` characters from its start, so a 1 MB line gives a prompt of at
most `budget` tokens like any other text.

Tokenizing is bounded too: the window is found by tokenizing the text before the cursor
backwards, `WINDOW_STEP` lines at a time, and stops as soon as the budget is spent (a 3,500-line
file costs ~1,000 tokens of tokenizing, not 35,000); text that cannot fit (more than `budget`
times the longest token's length in characters) is never tokenized at all. The texts that stay
the same from one keystroke to the next (the other open documents, the context block's
sections) are tokenized once (`steady_ids`), not weighed again at every request.

Fill in the middle (a model with FIM tokens: `FimTokens`): the prompt is prefix, suffix, middle
in that order (PSM, the order the supported families are trained on), the model writes the
middle. The suffix is the text after the cursor from its start, bounded like the prefix
(`suffix_window`: SUFFIX_SHARE of the budget, tokenized WINDOW_STEP lines at a time, a line
too long cut inside). A model with a file separator (Qwen2.5-Coder's `<|file_sep|>`) is also
given the other open documents, whole, in front, as many as fit CONTEXT_SHARE of the budget
(`workspace_context`), in its repository-level format:

    <|repo_name|>REPO\n<|file_sep|>a.py\nTEXT\n<|file_sep|>b.py\n<|fim_prefix|>PREFIX<|fim_suffix|>SUFFIX<|fim_middle|>

(without other documents: `<|fim_prefix|>PREFIX<|fim_suffix|>SUFFIX<|fim_middle|>`).

A context block (`repo_context.ContextBlock`: stubs of the definitions the code at the cursor
uses, chunks of other documents like it; made ahead of the request) comes first, its sections
whole while they fit its share of the budget: as comments in front of the window for a plain
model (the window's budget is what they leave), as `<|file_sep|>` files before the other
documents for a model with repository markers (docs/context.md).

A model whose tokenizer starts every text with a start token (`TokenizerFacts.add_bos`) gets
it first (`with_start_token`).
"""

from __future__ import annotations

import functools
import re
import threading
import weakref
from dataclasses import dataclass, replace

from mask_store.healing import token_healing
from mask_store.vocabulary import LoadedTokenizer, Vocabulary

from ..model.runtime import FimTokens
from .repo_context.block import ContextBlock
from .window_starts import NO_STARTS, StatementLines
from .workspace_context import NO_CONTEXT, WorkspaceContext

WINDOW_STEP = 16  # lines: a window starts on a line that is a multiple of this
FIRST_WINDOW_STEP = 4  # and a short first window (~200 tokens: 16 lines would often be most of it)
LINE_CUT_STEP = 64  # characters from a line's start: where a line too long for the budget is cut
KEEP_SHARE = 0.5  # a document's previous start is kept while the window from it holds this share of the budget
REFILL_SHARE = 0.75  # a new window, and one past the budget, starts where it holds at most this share
IMPORT_SCAN_CHARS = 200_000  # the file's imports are looked for in its first characters only
SUFFIX_SHARE = 0.25  # the suffix's budget, as a share of the prefix's
MIN_SUFFIX_TOKENS = 16
CONTEXT_SHARE = 0.5  # the other documents' budget (all of them), as a share of the prefix's
IMPORT_LINE = re.compile(r"^(?:import\s|from\s+\S+\s+import\s).*(?:\n|$)", re.M)
SCOPE_LINE = re.compile(r"[ \t]*(?:async[ \t]+def|def|class)[ \t]")
HEADER_LINES = 6  # a `def`/`class` header longer than this many lines is left out
SCOPE_SCAN_CHARS = 200_000  # enclosing headers are looked for this far back from the window's start


@dataclass(frozen=True)
class Prompt:
    ids: list[int]  # the whole prompt (FIM tokens and other files included)
    prefix_ids: int  # how many ids spell the prefix text (they end the prompt, or come before SUF)
    text: str  # the prefix text the ids spell (healed bytes included)
    truncated: bool
    healed_ids: tuple[int, ...] = ()  # prompt tokens backed off (token healing)
    healed: bytes = b""  # their bytes: the completion's first tokens must spell them again
    window_start: int = 0  # characters of the text before the cursor that the window leaves out
    window_line: int = 0  # the document line the window starts in (the document's next anchor)
    prefix_start: int = 0  # where the prefix text's ids start in `ids`
    context_files: tuple[str, ...] = ()  # the other documents the prompt holds, by name
    context_sections: tuple[str, ...] = ()  # the context block's sections it holds ("definitions:pkg/util.py")
    canonical: bool = False  # built for canonical tokenization (`heal_pretoken`): the grammar matcher follows it

    @property
    def prefix(self) -> list[int]:
        """The ids that spell the prefix text."""
        return self.ids[self.prefix_start : self.prefix_start + self.prefix_ids]


@dataclass(frozen=True)
class Window:
    text: str  # what the prompt spells: the imports put back in front, then the kept text
    truncated: bool
    start: int  # characters of the text before the cursor left out before the kept text
    line: int  # the document line the kept text starts in


@functools.cache
def _longest_token(vocab: Vocabulary) -> int:
    """Bytes of the longest token: a text of n characters has at least n / this many tokens."""
    return max(len(b) for b in vocab.token_bytes)


def _count(tok: LoadedTokenizer, text: str) -> int:
    return len(tok.encode(text)) if text else 0


STEADY_TEXTS = 256  # texts whose tokens are kept, per tokenizer (`steady_ids`)
_steady: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> its memo
_steady_lock = threading.Lock()


def steady_ids(tok: LoadedTokenizer, text: str) -> tuple[int, ...]:
    """The tokens of a text that stays the same from one keystroke to the next (another open
    document, a section of the context block, the tail of either), tokenized once: a prompt
    weighs each of them at every request, and each weighing tokenized ~2,000 characters
    (Qwen2.5-Coder's tokenizer, 16 open tabs: ~50 ms of every request on this machine). The
    last `STEADY_TEXTS` texts per tokenizer (functools.lru_cache; the tokenizer held weakly)."""
    with _steady_lock:
        encoded = _steady.get(tok)
        if encoded is None:
            ref = weakref.ref(tok)  # the memo must not keep its own key alive
            encoded = _steady[tok] = functools.lru_cache(maxsize=STEADY_TEXTS)(lambda t: tuple(ref().encode(t)))
    return encoded(text)


def _steady_count(tok: LoadedTokenizer, text: str) -> int:
    return len(steady_ids(tok, text)) if text else 0


def _line_start(text: str, off: int) -> int:
    """Where the line before the one starting at `off` starts."""
    return text.rfind("\n", 0, off - 1) + 1


def _tokens_within(tok: LoadedTokenizer, text: str, room: int, limit: int, count=_count) -> int:
    """The tokens of `text`, or `room + 1` when it has more than `room`: a text longer than
    `limit` is not tokenized, and of a long one the tail is tokenized first (enough when the
    tail alone is over). `count`: `_steady_count` for a text that stays the same between requests."""
    if len(text) > limit:
        return room + 1
    if len(text) > 4 * room + 4 and count(tok, text[-4 * room - 4 :]) > room:
        return room + 1
    return count(tok, text)


def _cut_inside(tok: LoadedTokenizer, before: str, line_start: int, budget: int, limit: int) -> int:
    """Where to start the window inside the cursor's line, too long for the budget: the last
    `budget` tokens, from a multiple of LINE_CUT_STEP characters after the line's start. Tokenizes
    at most `limit` characters (4x as many as tried before each time, as long as too few tokens)."""
    span = 4 * budget
    while True:
        a = max(line_start, len(before) - span)
        a = line_start + -(-(a - line_start) // LINE_CUT_STEP) * LINE_CUT_STEP
        enc = tok.tokenizer.encode(before[a:], add_special_tokens=False)
        if len(enc.ids) > budget or a == line_start or span >= limit:
            break
        span *= 4
    if len(enc.ids) <= budget:
        return a
    first = a + enc.offsets[len(enc.ids) - budget][0]
    return line_start + -(-(first - line_start) // LINE_CUT_STEP) * LINE_CUT_STEP


def _within_lines(tok: LoadedTokenizer, before: str, budget: int, limit: int, scopes: bool = False,
                  starts: StatementLines = NO_STARTS) -> Window:
    """The window when the cursor's group of WINDOW_STEP lines alone is over the budget: whole
    lines back from the cursor while they fit (on to a line outside every bracket and string:
    `_statement_start`), else a cut inside the cursor's line."""
    cursor_line = before.count("\n")
    off, line, end, total = before.rfind("\n") + 1, cursor_line, len(before), 0
    while True:
        n = _tokens_within(tok, before[off:end], budget - total, limit)
        if total + n > budget:
            break
        total, end = total + n, off
        if line == 0:
            return Window(before, False, 0, 0)
        off, line = _line_start(before, off), line - 1
    if end == len(before):  # the cursor's line itself
        cut = _cut_inside(tok, before, off, budget, limit)
        return Window(before[cut:], True, cut, line)
    start, total, _ = _statement_start(tok, before, line + 1, end, total, budget, limit, starts, cursor_line, {})
    return Window(_with_front(tok, before, start, total, budget, limit, scopes), True, start, line + 1)


def _statement_start(tok: LoadedTokenizer, before: str, line: int, off: int, tokens: int, budget: int, limit: int,
                     starts: StatementLines, cursor_line: int,
                     backs: dict[int, tuple[int, int] | None]) -> tuple[int, int, bool]:
    """(where the kept text starts, its tokens, whether it starts by `line`) for a window from
    `line` (at `off`, `tokens` from there to the cursor): on a line that starts outside every
    bracket and string (`starts`, `window_starts`): the last at or before `line` where the text
    from it fits the budget (True), else the first after it before the cursor's line (False: a
    start that moves on as the cursor does), else `line` itself (True: none known). `backs`:
    what the window's lines found for each line before them (the text from one to the cursor
    fits or not whichever grid line looks back to it: each is walked back to once)."""
    back = starts.last_to(line)
    if back is None or back == line:
        return off, tokens, True
    if back not in backs:
        backs[back] = None
        start = off
        for _ in range(line - back):
            start = _line_start(before, start)
            if off - start > limit:
                break
        else:
            extra = _tokens_within(tok, before[start:off], budget - tokens, limit)
            if tokens + extra <= budget:
                backs[back] = (start, tokens + extra)
    if backs[back] is not None:
        return *backs[back], True
    ahead = starts.first_from(line, cursor_line)
    if ahead is None:
        return off, tokens, True
    start = off
    for _ in range(ahead - line):
        start = before.index("\n", start) + 1
    return start, tokens - _count(tok, before[off:start]), False


def _with_front(tok: LoadedTokenizer, before: str, off: int, tokens: int, budget: int, limit: int,
                  scopes: bool = False) -> str:
    """The kept text `before[off:]` (of `tokens` tokens) with the file's imports before it put
    in front, when they fit in the budget with it; with `scopes`, the headers of the `def`s and
    `class`es around the kept text that start before it too (`enclosing_headers`), between the
    two, when they fit (before the imports)."""
    kept = before[off:]
    imports = "".join(m.group(0) for m in IMPORT_LINE.finditer(before, 0, min(off, IMPORT_SCAN_CHARS)))
    headers = enclosing_headers(before, off) if scopes else ""
    for front in (imports + headers, headers, imports):
        if front and len(front) <= limit and _count(tok, front) + tokens <= budget:
            return front + kept
    return kept


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def enclosing_headers(before: str, off: int) -> str:
    """The headers of the `def`s and `class`es whose bodies hold the text from `off` (a line's
    start) and that start before it, outermost first, each whole (its lines up to the one that
    ends in its colon, at most HEADER_LINES of them), e.g. `class Cache:` then
    `    def get(self, key):` for a window that starts inside that method's body. What
    encloses is read from the indentation: the first code line at `off` sets it, and each code
    line further up indented less than the last one encloses it; of those, the headers are kept
    (an `if` between them is left out, and so are decorators). A line of a bracket or string
    continued at a smaller indentation ends the search early (fewer headers, never a wrong one
    from a sibling block)."""
    first = next((ln for ln in before[off:].split("\n", 50)[:50] if ln.strip() and not ln.lstrip().startswith("#")),
                 None)
    if first is None:
        return ""
    need, found = _indent(first), []
    end, floor = off, max(0, off - SCOPE_SCAN_CHARS)
    while need > 0 and end > floor:  # the lines before `off`, last first
        start = max(before.rfind("\n", floor, end - 1) + 1, floor)
        line = before[start : end - 1]
        end = start
        if _indent(line) >= need or not line.strip() or line.lstrip().startswith("#"):
            continue
        need = _indent(line)  # a line indented less: what holds the text is here or further up
        if not SCOPE_LINE.match(line):
            continue
        header = before[start:off].split("\n", HEADER_LINES)[:HEADER_LINES]
        for j, part in enumerate(header):
            if part.split("#", 1)[0].rstrip().endswith(":"):
                found.append("\n".join(header[: j + 1]) + "\n")
                break
    return "".join(reversed(found))


def window(tok: LoadedTokenizer, before: str, budget: int, anchor: int | None = None,
           step: int = WINDOW_STEP, scopes: bool = False, starts: StatementLines = NO_STARTS) -> Window:
    """The text before the cursor cut to at most `budget` tokens (see the module's docstring),
    with the file's imports put back in front when they fit. The window starts on the first
    multiple of `step` lines that fits; with `anchor` (the start line of the document's
    previous window) it starts there again while that fits and holds at least KEEP_SHARE of the
    budget; otherwise (a new window, or the cursor has gone on past the anchor's) on the first
    multiple that leaves 1 - REFILL_SHARE of the budget for what comes next. `scopes`: the
    enclosing `def`/`class` headers put in front too (`_with_front`). `starts`: the lines a
    window's text may start on (`window_starts`): each grid line's text starts on one of them
    (`_statement_start`) and is measured from there; one whose text would start after it (what
    it falls in does not fit) is taken only where no other fits, so that the anchor moves when
    its text's start would. The grid line is the anchor."""
    limit = budget * _longest_token(tok.vocab)  # more characters than this: more tokens than the budget
    cursor_line = before.count("\n")
    fits: dict[int, tuple[int, int]] = {}  # grid line -> (where its text starts, tokens from there to the cursor)
    later: dict[int, tuple[int, int]] = {}  # ... for those whose text starts after them
    backs: dict[int, tuple[int, int] | None] = {}  # `_statement_start`'s lines looked back to
    end, total, line = len(before), 0, cursor_line
    off = before.rfind("\n") + 1
    grid = cursor_line - cursor_line % step
    while True:
        while line > grid:
            off, line = _line_start(before, off), line - 1
        n = _tokens_within(tok, before[off:end], budget - total, limit - (len(before) - end))
        if total + n > budget:
            break
        total, end = total + n, off
        start, tokens, by_it = _statement_start(tok, before, grid, off, total, budget, limit, starts, cursor_line,
                                                backs)
        (fits if by_it else later)[grid] = (start, tokens)
        if grid == 0:
            return Window(before, False, 0, 0)
        grid -= step
    fits = fits or later
    if not fits:
        return _within_lines(tok, before, budget, limit, scopes, starts)
    if anchor is not None and anchor in fits and fits[anchor][1] >= KEEP_SHARE * budget:
        line = anchor
    else:
        # a new window, or typed on past the budget: room for more (a new window filled to the
        # budget would be started again, all of it computed again, at the first line accepted
        # or typed after it: docs/latency.md)
        line = min((g for g, (_, n) in fits.items() if n <= REFILL_SHARE * budget), default=min(fits))
    off, total = fits[line]
    return Window(_with_front(tok, before, off, total, budget, limit, scopes), True, off, line)


def build_prompt(tok: LoadedTokenizer, before: str, after: str, budget: int, fim: FimTokens | None,
                 heal: bool = False, anchor: int | None = None, heal_pretoken: bool = False,
                 workspace: WorkspaceContext = NO_CONTEXT, step: int = WINDOW_STEP,
                 context: ContextBlock | None = None, scopes: bool = False,
                 starts: StatementLines = NO_STARTS) -> Prompt:
    """The prompt for a cursor; with `heal`, the last prefix token is backed off (token healing,
    unless it is all the prefix has) so that the model may spell the typed text its own way;
    with `heal_pretoken` too, all the tokens of the text's last pre-token (canonical
    tokenization: mask_store.healing.last_pretoken_tokens). `anchor`: the start line of the
    document's previous window (see `window`, which starts it on a multiple of `step` lines). With `fim`, the suffix and the other documents
    of `workspace` too; `context`: the block in front (see the module's docstring); `scopes`: the
    headers of the `def`s and `class`es around a window that starts inside them, in front;
    `starts`: the lines its text may start on (`window`)."""
    as_files = fim is not None and fim.file_sep is not None
    block_ids, sections = _block(tok, context, budget, as_files)
    if not as_files:  # the comments take their tokens from the window's budget
        budget -= len(block_ids)
    w = window(tok, before, budget, anchor, step, scopes, starts)
    ids = tok.encode(w.text)
    if len(ids) > budget:  # the lines were counted apart: joined, a few may tokenize longer
        w = window(tok, before, 2 * budget - len(ids), None, step, scopes, starts)
        ids = tok.encode(w.text)
        if len(ids) > budget:
            cut = tok.tokenizer.encode(w.text, add_special_tokens=False).offsets[len(ids) - budget][0]
            w = Window(w.text[cut:], True, w.start + cut, w.line)
            ids = tok.encode(w.text)
    text = w.text
    healed_ids: tuple[int, ...] = ()
    healed = b""
    if heal:
        pre_tokenizer = tok.tokenizer.pre_tokenizer if heal_pretoken else None  # None: the last token only
        h = token_healing(tok.vocab.token_bytes, pre_tokenizer, text, ids)
        ids, healed_ids, healed = h.kept, h.healed_ids, h.healed
    if not ids:  # an empty document: a newline is the most neutral start a model knows
        ids = tok.encode("\n")
    prompt = Prompt(ids, len(ids), text, w.truncated, healed_ids, healed, w.start, w.line,
                    context_sections=sections, canonical=heal_pretoken)
    if not as_files and block_ids:
        prompt = replace(prompt, ids=block_ids + prompt.ids, prefix_start=len(block_ids))
    if fim is not None:
        prompt = _fill_in_the_middle(tok, prompt, after, budget, fim, workspace, block_ids if as_files else [])
    return with_start_token(tok, prompt)


def _block(tok: LoadedTokenizer, context: ContextBlock | None, budget: int, as_files: bool) -> tuple[list[int], tuple[str, ...]]:
    """The block's tokens (its sections in order, each whole while it fits the block's share of
    `budget`; as comments, or as `<|file_sep|>` files without their separators) and the sections kept."""
    if not context:
        return [], ()
    room = int(budget * context.share)
    limit = room * _longest_token(tok.vocab)
    ids: list[list[int]] = []
    kept: list[str] = []
    used = 0
    for s in context.sections:
        text = s.as_file() if as_files else s.as_code() if context.form == "code" else s.as_comment()
        if _tokens_within(tok, text, room - used, limit, _steady_count) + used + as_files > room:
            continue
        got = list(steady_ids(tok, text))
        if used + len(got) + as_files <= room:
            ids.append(got)
            kept.append(f"{s.kind}:{s.name}")
            used += len(got) + as_files
    if as_files:
        return [i for got in ids for i in [-1] + got], tuple(kept)  # -1: where each file separator goes
    return [i for got in ids for i in got], tuple(kept)


def with_start_token(tok: LoadedTokenizer, prompt: Prompt) -> Prompt:
    """The prompt after the model's start token where its tokenizer puts one in front of every
    text (`facts.add_bos`: Gemma, Llama 3, CodeLlama, DeepSeek-Coder; not SmolLM2, Qwen or
    StarCoder2), as llama.cpp does: such models were trained on sequences that begin with it."""
    bos = tok.facts.bos_id
    if not tok.facts.add_bos or bos is None:
        return prompt
    return replace(prompt, ids=[bos] + prompt.ids, prefix_start=prompt.prefix_start + 1)


def _fill_in_the_middle(tok: LoadedTokenizer, prompt: Prompt, after: str, budget: int, fim: FimTokens,
                        workspace: WorkspaceContext, block: list[int]) -> Prompt:
    """The prefix's prompt as prefix, suffix, middle, after the context block's files (`block`:
    -1 where a file separator goes) and the other documents that fit."""
    suffix_ids = tok.encode(suffix_window(tok, after, max(int(budget * SUFFIX_SHARE), MIN_SUFFIX_TOKENS)))
    head: list[int] = [fim.file_sep if i == -1 else i for i in block]
    included: list[str] = []
    if fim.file_sep is not None and workspace.others:
        room = int(budget * CONTEXT_SHARE) - len(block)
        limit = room * _longest_token(tok.vocab)
        for f in workspace.others:
            text = f"{f.name}\n{f.text}" + ("" if f.text.endswith("\n") else "\n")
            if _tokens_within(tok, text, room - 1, limit, _steady_count) <= room - 1:
                ids = steady_ids(tok, text)
                if len(ids) + 1 <= room:
                    head += [fim.file_sep, *ids]
                    room -= len(ids) + 1
                    included.append(f.name)
    if included or block:
        own = [fim.file_sep] + tok.encode(f"{workspace.path or 'untitled.py'}\n")
        repo = [fim.repo_name] + tok.encode(f"{workspace.repo}\n") if workspace.repo and fim.repo_name is not None else []
        head = repo + head + own
    start = len(head) + 1 + prompt.prefix_start
    ids = head + [fim.prefix] + prompt.ids + [fim.suffix] + suffix_ids + [fim.middle]
    return replace(prompt, ids=ids, prefix_start=start, context_files=tuple(included))


def suffix_window(tok: LoadedTokenizer, after: str, budget: int) -> str:
    """The start of the text after the cursor within `budget` tokens: WINDOW_STEP lines at a
    time while they fit, then line by line, and inside the first line when it alone is over
    (at a token boundary). Text past `budget` times the longest token is never tokenized."""
    limit = budget * _longest_token(tok.vocab)
    end, total = 0, 0
    for step in (WINDOW_STEP, 1):
        while end < len(after):
            nxt = end
            for _ in range(step):
                nxt = after.find("\n", nxt) + 1 or len(after)
                if nxt == len(after):
                    break
            n = _tokens_within(tok, after[end:nxt], budget - total, limit)
            if total + n > budget:
                break
            total, end = total + n, nxt
    if end == 0 and after:  # the first line alone is over the budget: its first tokens
        first = after[: min(len(after), limit, after.find("\n") + 1 or len(after))]
        enc = tok.tokenizer.encode(first, add_special_tokens=False)
        end = enc.offsets[budget][0] if len(enc.ids) > budget else len(first)
    text = after[:end]
    ids = tok.tokenizer.encode(text, add_special_tokens=False)
    if len(ids.ids) > budget:  # counted apart, joined a few tokenize longer
        text = text[: ids.offsets[budget][0]]
    return text


class RecentEncodings:
    """A tokenizer's `encode` that keeps the ids of the last `kept` texts, by text. The
    speculator's reference (`lookup_reference`) is the same two texts from one keystroke to the
    next (the text after the cursor, the text before the prompt's window, until the window
    moves), and encoding its 12,000 characters again costs ~7 ms at every decoding pass
    (SmolLM2's tokenizer, this kind of machine)."""

    def __init__(self, tok: LoadedTokenizer, kept: int = 4) -> None:
        self.tok = tok
        self.kept = kept
        self._ids: dict[str, tuple[int, ...]] = {}
        self._lock = threading.Lock()

    def encode(self, text: str) -> list[int]:
        with self._lock:
            ids = self._ids.pop(text, None)
        if ids is None:
            ids = tuple(self.tok.encode(text))
        with self._lock:
            self._ids[text] = ids  # the most recent last
            while len(self._ids) > self.kept:
                del self._ids[next(iter(self._ids))]
        return list(ids)


def lookup_reference(tok: LoadedTokenizer | RecentEncodings, before: str, after: str, prompt: Prompt,
                     chars: int = 6000) -> list[int]:
    """The document's text that the prompt leaves out, as tokens, for the speculator's lookup:
    the text after the cursor (its first `chars` characters), then the text before the prompt's
    window (its last `chars`)."""
    ids = tok.encode(after[:chars]) if after.strip() else []
    left_out = before[max(0, prompt.window_start - chars) : prompt.window_start]
    if left_out.strip():
        ids += tok.encode(left_out)
    return ids
