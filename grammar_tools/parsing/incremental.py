"""Parse a Python text prefix that ends anywhere, incrementally across edits.

`PrefixParser.parse(data)` lexes and parses `data` (UTF-8 bytes of the text before a cursor)
and returns a `PrefixState`:

- `configs`: the parser configurations after every complete lexeme (usually one; two while a
  soft keyword such as `match` may still be a name);
- the *held-back* lexeme: the last lexeme, which more text may still extend (`ret` may become
  `return`, `"abc` a string, `0x` a number), as its lexer state and start offset. It is not fed
  to the parser: a completion continues it;
- `newline_width`: when the held-back lexeme is a newline, the width (col, altcol) of the
  indentation typed so far;
- `recovered`: set when a syntax error before the cursor was skipped (see `parse_prefix`).

The parser keeps checkpoints (parser configurations where lines start, and every
`CHECKPOINT_EVERY` lexemes inside long lines) of the last text it parsed; parsing a new text
re-lexes only from the last checkpoint before the first changed byte, so typing at the cursor or
editing after it costs a line, not the file. `check.IncrementalParser` is the terminal-level API.

Recovery: documents being edited are often broken (an unclosed bracket three functions up, a
half-typed statement). `parse_prefix` parses the text before the cursor and, on an error,
restarts from a line after the error that starts a statement enclosing (or leading to) the cursor:

1. the block headers that enclose the cursor are found by indentation (each is the nearest line
   above with less indentation that ends with `:`);
2. restart candidates are, in order: those headers that come after the error (outermost first),
   then the lines after the error at the cursor block's indentation, then the cursor's line;
3. the headers above the restart line, which may be broken themselves, are replaced by neutral
   headers of the same kind and indentation (`def _():`, `class _:`, `while _:`, `if _:`), so
   the parser knows the indent stack and the context (inside a function, a loop...);
4. the first candidate that parses up to the cursor wins; the result says so (`Recovery`).

Indentation widths, by CPython's tokenizer (the one rule every part uses: `indent_width`): at
the start of a line (`Parser/tokenizer.c`) CPython counts two widths, `col`, where a tab moves to
the next multiple of 8, and `altcol`, where a tab counts as one column; a form feed resets both
to 0 ("for Emacs users"); any other byte ends the indentation. A line is indented consistently
when both widths order it the same way against the indent stack (else TabError).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

from .fstring_fields import FieldError, field_checker
from ..lexing.lexer_automaton import START, LexError, LexerAutomaton, load_lexer_automaton
from .recognizer import Node, Recognizer

CHECKPOINT_EVERY = 64  # lexemes between checkpoints inside long bracketed expressions


class ParseError(ValueError):
    """The text has a syntax error at byte `pos` (before the cursor)."""

    def __init__(self, pos: int, message: str) -> None:
        super().__init__(f"{message} at byte {pos}")
        self.pos = pos
        self.message = message


@dataclass(frozen=True)
class Recovery:
    """How a syntax error before the cursor was skipped."""

    error_pos: int  # byte offset of the error in the original text
    error: str
    restart_line: int  # 0-based line where parsing restarted
    synthetic_headers: tuple[str, ...]  # block headers put in place of the broken ones
    resume: int = 0  # byte offset in the original text where parsing resumed
    synthetic: bytes = b""  # the neutral header lines parsed in front of it

    def rewrite(self, data: bytes) -> bytes:
        """The text the parser actually read for the original prefix `data`: the neutral
        headers, then the original from the restart line on (extend `data` to check more)."""
        return self.synthetic + data[self.resume :]


@dataclass(frozen=True)
class PrefixState:
    configs: tuple[Node, ...]
    lexer_state: int  # state of the held-back lexeme
    lexeme_start: int  # its byte offset
    end: int  # length of the parsed prefix in bytes
    newline_width: tuple[int, int] | None  # (col, altcol) if the held-back lexeme is a newline
    recovered: Recovery | None = None

    @property
    def held_back_len(self) -> int:
        return self.end - self.lexeme_start


def dedupe(configs: list[Node]) -> list[Node]:
    if len(configs) < 2:
        return configs
    out: list[Node] = []
    for c in configs:
        if not any(_same_stack(c, o) for o in out):
            out.append(c)
    return out


def same_configs(a, b) -> bool:
    """Whether two configuration sets are the same (stacks compared structurally, stopping
    where they share a node): from here on they parse every text alike."""
    return len(a) == len(b) and all(any(_same_stack(x, y) for y in b) for x in a)


def _same_stack(a: Node, b: Node) -> bool:
    while a is not b:
        if a is None or b is None:
            return False
        if (a.state, a.attr, a.ctx, a.depth, a.indent) != (b.state, b.attr, b.ctx, b.depth, b.indent):
            return False
        a, b = a.parent, b.parent
    return True


@dataclass
class _Checkpoint:
    offset: int  # a lexeme starts here
    configs: tuple[Node, ...]
    line: bool = False  # after a newline: a line's code starts here
    statement: bool = False  # ... outside brackets: a statement starts here
    gap: int = 0  # where the newline lexeme that ends here starts (statement checkpoints)


@dataclass
class PrefixParser:
    """Parses prefixes of one document, reusing the work of the previous call."""

    recognizer: Recognizer = field(default_factory=Recognizer)
    lexer: LexerAutomaton = field(default_factory=load_lexer_automaton)

    def __post_init__(self) -> None:
        self._data = b""
        self._checkpoints: list[_Checkpoint] = []
        g = self.recognizer.grammar
        self._nl = g.term_id["_NEWLINE"]
        self._cont = g.term_id["LINE_CONT"]
        self._ignored = g.ignored
        self.fields = field_checker(self.recognizer, self.lexer)  # one per (recognizer, lexer)

    # -------------------------------------------------------------- lexemes -> parser

    def feed_lexeme(self, configs, data: bytes, start: int, end: int, state: int):
        """Feed one complete lexeme to every configuration; returns the surviving ones."""
        rec = self.recognizer
        terms = self.lexer.accepting_ids[state]
        if self._nl in terms:
            width = newline_width(data[start:end])
            out = []
            for c in configs:
                c = rec.feed_terminal(c, self._nl, width)
                if c is not None:
                    out.append(c)
            return out
        if all(t in self._ignored for t in terms):
            return configs
        fields = self.fields
        check = not fields.terminals.isdisjoint(terms)
        out = []
        error = None
        for c in configs:
            if check:  # an f-/t-string: its fields' expressions are parsed in c's context
                try:
                    fields.check(data[start:end], c.ctx)
                except FieldError as e:
                    error = e
                    continue
            for t in terms:
                n = rec.feed_terminal(c, t)
                if n is not None:
                    out.append(n)
        if not out and error is not None:
            raise ParseError(start + error.pos, str(error))
        return dedupe(out)

    def parse(self, data: bytes) -> PrefixState:
        """Parse `data` (a prefix ending anywhere). Raises LexError/ParseError on an error."""
        # reuse the checkpoints of the unchanged part
        common = _common_prefix(self._data, data)
        cps = self._checkpoints
        k = bisect.bisect_left([c.offset for c in cps], common) - 1
        while k >= 0 and cps[k].offset >= common:
            k -= 1
        if k >= 0:
            del cps[k + 1 :]
            cp = cps[k]
            configs, pos, state = list(cp.configs), cp.offset, START
        else:
            cps.clear()
            configs, pos, state = [self.recognizer.initial()], 0, None
        self._data = data
        return self._run(data, configs, pos, state, cps)

    def can_end(self, st: PrefixState, data: bytes) -> bool:
        """Whether the parsed prefix is a complete file (statements closed, brackets balanced)."""
        return self.can_end_with(st.configs, data[st.lexeme_start : st.end], st.lexer_state)

    def can_end_with(self, configs, held: bytes, lexer_state: int) -> bool:
        """Whether the text can end after `configs` and the open lexeme `held` (in
        `lexer_state`): the lexeme closed, then `Recognizer.can_end`. A line continuation is
        no end (CPython: "unexpected EOF" for a file that ends right after a backslash-newline;
        `x = 1 \\` then a line of blanks ends well)."""
        if held:
            terms = self.lexer.accepting_ids[lexer_state]
            if not terms or self._cont in terms:
                return False
            if self._nl not in terms:  # a held newline is the implicit one (its indentation doesn't count)
                configs = self.feed_lexeme(configs, held, 0, len(held), lexer_state)
        return any(self.recognizer.can_end(c) for c in configs)

    def restart_points(self, offset: int, n: int):
        """Where the parsed text can be read again from, at or before `offset`, with the
        configurations there: the start of the last line whose code starts there (the file's
        start if no newline came before), and the last `n` statement starts (outside brackets),
        in order (the file's start if none)."""
        line, statements = None, []
        for cp in reversed(self._checkpoints):
            if line is not None and len(statements) == n:
                break
            if cp.offset <= offset and cp.line:
                line = line or (cp.offset, cp.configs)
                if cp.statement:
                    statements.append((cp.offset, cp.configs))
        if line is None or not statements:
            start = (0, (self.recognizer.initial(),))
            line, statements = line or start, statements or [start]
        return line, statements[::-1]

    def statement_gaps(self, data: bytes) -> list[tuple[int, int]]:
        """The spans `(start, end)` of `data` between statements, outside brackets and strings,
        as the last parse found them: each a newline lexeme (the line's end, then any blank and
        comment lines, then the next statement's indentation), in order. A line that starts
        inside one starts outside every bracket and string: the text from it reads as code.
        Only the spans within what `data` shares with the text last parsed (for the text just
        given to `parse`, all of it up to the last newline, or up to a syntax error)."""
        common = _common_prefix(self._data, data)
        return [(cp.gap, cp.offset) for cp in self._checkpoints if cp.statement and cp.offset <= common]

    def steps(self, data: bytes, configs, pos: int, state: int | None = START, ends: bool = False):
        """Lex and parse `data` from `pos`, where a lexeme starts in lexer `state` (None: a
        fresh document, after its virtual newline), one lexeme at a time: yields
        `(end, configs, newline)` after each complete lexeme (`newline`: it was a `_NEWLINE`, so
        the next line's code starts at `end`); returns `(state, start, may_end)`: the open
        lexeme that ends `data`, and with `ends` whether the text may end there (`can_end_with`;
        else None). Raises LexError / ParseError at the first error."""
        acc_ids = self.lexer.accepting_ids
        nl = self._nl
        n = len(data)
        for start, i, lexeme_state in self.lexer.lexemes(data, state, pos, n):
            if i == n:  # the last lexeme is held back: more text may extend it
                return lexeme_state, start, self.can_end_with(configs, data[start:], lexeme_state) if ends else None
            configs = self.feed_lexeme(configs, data, start, i, lexeme_state)
            if not configs:
                raise ParseError(start, f"unexpected {data[start:i][:20]!r}")
            yield i, configs, nl in acc_ids[lexeme_state]

    def _run(self, data, configs, pos, state, cps) -> PrefixState:
        since = 0
        run = self.steps(data, configs, pos, state)
        start = pos  # where the lexeme just read starts: where the one before it ended
        try:
            while True:
                end, configs, newline = next(run)
                since += 1
                if newline or since >= CHECKPOINT_EVERY:
                    cps.append(_Checkpoint(end, tuple(configs), newline, newline and configs[0].depth == 0, start))
                    since = 0
                start = end
        except StopIteration as stop:
            state, start, _ = stop.value
        except (ParseError, LexError) as e:
            self._data = data[: e.pos]  # checkpoints beyond here are not valid
            raise
        nlw = newline_width(data[start:]) if self._nl in self.lexer.possible_ids[state] else None
        return PrefixState(tuple(configs), state, start, len(data), nlw)


def _common_prefix(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n
    while lo < hi:  # a[:lo] == b[:lo], a[:hi] != b[:hi]
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


# ---------------------------------------------------------------- indentation widths

TAB_SIZE = 8

Width = tuple[int, int]  # (col, altcol)


def indent_width(ws: bytes, start: Width | None = None) -> Width:
    """(col, altcol) after the whitespace `ws` that begins a line (or continues one whose
    indentation so far is `start`); stops at the first byte that is not a space, tab or form
    feed."""
    col, alt = start or (0, 0)
    for b in ws:
        if b == 0x20:
            col += 1
            alt += 1
        elif b == 0x09:
            col = (col // TAB_SIZE + 1) * TAB_SIZE
            alt += 1
        elif b == 0x0C:
            col = alt = 0
        else:
            break
    return col, alt


def newline_width(lexeme: bytes) -> Width:
    """(col, altcol) of the indentation after the last newline of a `_NEWLINE` lexeme (a
    comment after it ends the indentation: the width is what came before it)."""
    return indent_width(lexeme[lexeme.rfind(b"\n") + 1 :])


def extend_width(width: Width | None, part: bytes) -> Width:
    """(col, altcol) of an open `_NEWLINE` lexeme's indentation (`width` so far, None: none yet)
    after more of its bytes `part` (as far as a token goes): from `part`'s last line break on,
    else added to `width`."""
    i = part.rfind(b"\n")
    if i >= 0:
        return indent_width(part[i + 1 :].replace(b"\r", b""))
    return indent_width(part, width)


# ---------------------------------------------------------------- recovery

_HEADER_END = re.compile(rb":\s*(#.*)?$")


def _neutral_header(stripped: bytes) -> bytes:
    word = stripped.split(None, 2)
    first = word[0] if word else b""
    if first.startswith(b"@"):
        return b""
    if first == b"async" and len(word) > 1:
        if word[1].startswith(b"def"):
            return b"async def _():"
        if word[1].startswith((b"for", b"with")):
            return b"async def _():"
    if first == b"def" or first.startswith(b"def"):
        return b"def _():"
    if first == b"class":
        return b"class _:"
    if first in (b"for", b"while"):
        return b"while _:"
    return b"if _:"


def _line_info(lines: list[bytes]) -> list[tuple[int, bytes, bytes] | None]:
    """Per line: (indent col, leading whitespace, stripped text) or None if blank/comment."""
    out = []
    for ln in lines:
        s = ln.lstrip(b" \t\f")
        if not s.strip() or s.startswith(b"#"):
            out.append(None)
            continue
        lead = ln[: len(ln) - len(s)]
        col, _ = indent_width(lead)
        out.append((col, lead, s.rstrip(b"\r")))
    return out


def enclosing_headers(lines: list[bytes], info, cursor_line: int, cursor_col: int):
    """The block headers enclosing the cursor, innermost first, as (line, col)."""
    out = []
    threshold = cursor_col
    for i in range(cursor_line - 1, -1, -1):
        li = info[i]
        if li is None:
            continue
        col, _, text = li
        if col < threshold and _HEADER_END.search(text):
            out.append((i, col))
            threshold = col
            if col == 0:
                break
    return out


def parse_prefix(parser: PrefixParser, data: bytes) -> PrefixState:
    """Parse `data` (the text before the cursor), recovering from an earlier syntax error.

    Raises the original LexError/ParseError if no restart point works."""
    try:
        return parser.parse(data)
    except (ParseError, LexError) as e:
        error = e
    result = _recover(parser, data, error)
    if result is None:
        raise error
    return result


def _recover(parser: PrefixParser, data: bytes, error: Exception) -> PrefixState | None:
    pos = error.pos
    lines = data.split(b"\n")
    starts = [0]
    for ln in lines[:-1]:
        starts.append(starts[-1] + len(ln) + 1)
    error_line = data.count(b"\n", 0, pos)
    cursor_line = len(lines) - 1
    info = _line_info(lines)
    cur = lines[cursor_line]
    cur_col = indent_width(cur)[0]
    headers = enclosing_headers(lines, info, cursor_line, cur_col if cur.strip() else 10**9)
    # the indentation of the cursor's block: the cursor line's, or the next after its header
    block_col = cur_col
    candidates: list[int] = [h for h, _ in reversed(headers) if h > error_line]
    for i in range(error_line + 1, cursor_line):
        if info[i] is not None and info[i][0] == block_col and i not in candidates:
            candidates.append(i)
    if cursor_line > error_line and cursor_line not in candidates:
        candidates.append(cursor_line)
    for r in candidates:
        synthetic = b"".join(
            info[h][1] + _neutral_header(info[h][2]) + b"\n"
            for h, col in reversed(headers)
            if h < r and info[h] is not None and _neutral_header(info[h][2])
        )
        text = synthetic + data[starts[r] :]
        fresh = PrefixParser(parser.recognizer, parser.lexer)
        try:
            st = fresh.parse(text)
        except (ParseError, LexError):
            continue
        held = st.end - st.lexeme_start
        return PrefixState(
            configs=st.configs,
            lexer_state=st.lexer_state,
            lexeme_start=max(len(data) - held, 0),
            end=len(data),
            newline_width=st.newline_width,
            recovered=Recovery(
                error_pos=pos,
                error=str(error),
                restart_line=r,
                synthetic_headers=tuple(
                    _neutral_header(info[h][2]).decode() for h, _ in reversed(headers) if h < r
                ),
                resume=starts[r],
                synthetic=synthetic,
            ),
        )
    return None
