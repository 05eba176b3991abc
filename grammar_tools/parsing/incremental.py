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
- `recovered`: set when a syntax error before the cursor was skipped (see `recovery`).

The parser keeps checkpoints (parser configurations where lines start, and every
`CHECKPOINT_EVERY` lexemes inside long lines) of the last text it parsed; parsing a new text re-lexes only from the last checkpoint before the first changed
byte, so typing at the cursor or editing after it costs a line, not the file.

`IncrementalParser` is the terminal-level API over one configuration set: `feed(terminal)`,
`accepts(terminals)`, `accepted_terminals()`, `snapshot()`/`restore()`.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from .indentation import newline_width
from .fstring_fields import FieldChecker, FieldError
from ..lexing.lexer_automaton import START, LexError, LexerAutomaton, load_lexer_automaton
from .recognizer import ACCEPTED, Node, Recognizer

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


def _dedupe(configs: list[Node]) -> list[Node]:
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
        self.fields = FieldChecker(self.recognizer, self.lexer)

    # -------------------------------------------------------------- lexemes -> parser

    def feed_lexeme(self, configs, data: bytes, start: int, end: int, state: int):
        """Feed one complete lexeme to every configuration; returns the surviving ones."""
        rec = self.recognizer
        terms = self.lexer.accepting_ids[state]
        if self._nl in terms:
            col, alt = newline_width(data[start:end])
            out = []
            for c in configs:
                c = rec.feed_newline(c)
                if c is not None:
                    c = rec.feed_indentation(c, col, alt)
                    if c is not None:
                        out.append(c)
            return out
        if all(t in self._ignored for t in terms):
            return configs
        fields = self.fields
        check = any(fields.is_field_string(t) for t in terms)
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
                n = rec.feed(c, t)
                if n is not None:
                    out.append(n)
        if not out and error is not None:
            raise ParseError(start + error.pos, str(error))
        return _dedupe(out)

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

    def last_line(self, offset: int) -> tuple[int, tuple[Node, ...]]:
        """Where the last line of the parsed text whose code starts at or before `offset`
        starts, and the configurations there (the file's start if no newline came before;
        statements outside brackets: `last_statements`)."""
        for cp in reversed(self._checkpoints):
            if cp.offset <= offset and cp.line:
                return cp.offset, cp.configs
        return 0, (self.recognizer.initial(),)

    def last_statements(self, offset: int, n: int) -> list[tuple[int, tuple[Node, ...]]]:
        """The last `n` statement starts (outside brackets) of the parsed text at or before
        `offset`, in order, with their configurations (the file's start if none)."""
        out = []
        for cp in reversed(self._checkpoints):
            if len(out) == n:
                break
            if cp.offset <= offset and cp.statement:
                out.append((cp.offset, cp.configs))
        return out[::-1] or [(0, (self.recognizer.initial(),))]

    def steps(self, data: bytes, configs, pos: int, state: int | None = START):
        """Lex and parse `data` from `pos`, where a lexeme starts in lexer `state` (None: a
        fresh document, after its virtual newline), one lexeme at a time: yields
        `(end, configs, newline)` after each complete lexeme (`newline`: it was a `_NEWLINE`, so
        the next line's code starts at `end`); returns `(state, start)` of the open lexeme that
        ends `data`. Raises LexError / ParseError at the first error."""
        acc_ids = self.lexer.accepting_ids
        nl = self._nl
        n = len(data)
        for start, i, lexeme_state in self.lexer.lexemes(data, state, pos, n):
            if i == n:
                return lexeme_state, start  # the last lexeme is held back: more text may extend it
            configs = self.feed_lexeme(configs, data, start, i, lexeme_state)
            if not configs:
                raise ParseError(start, f"unexpected {data[start:i][:20]!r}")
            yield i, configs, nl in acc_ids[lexeme_state]

    def _run(self, data, configs, pos, state, cps) -> PrefixState:
        since = 0
        run = self.steps(data, configs, pos, state)
        try:
            while True:
                end, configs, newline = next(run)
                since += 1
                if newline or since >= CHECKPOINT_EVERY:
                    cps.append(_Checkpoint(end, tuple(configs), newline, newline and configs[0].depth == 0))
                    since = 0
        except StopIteration as stop:
            state, start = stop.value
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


# ---------------------------------------------------------------- terminal-level API


class UnexpectedTerminal(ValueError):
    def __init__(self, terminal: str, expected: set[str]) -> None:
        super().__init__(f"unexpected {terminal}; expected one of {sorted(expected)}")
        self.terminal = terminal
        self.expected = expected


class IncrementalParser:
    """A parser configuration set with terminal-level operations.

    `feed` takes a terminal name or id (`_NEWLINE` and `_INDENT`/`_DEDENT` included, or use
    `feed_newline(col, altcol)` for a newline with its indentation). Snapshots are the
    (immutable) configuration tuples themselves.
    """

    def __init__(self, recognizer: Recognizer | None = None, configs=None) -> None:
        self.recognizer = recognizer or Recognizer()
        self.configs: tuple[Node, ...] = tuple(configs) if configs else (self.recognizer.initial(),)

    @classmethod
    def from_text(cls, text: str | bytes, parser: PrefixParser | None = None) -> tuple[IncrementalParser, PrefixState]:
        parser = parser or PrefixParser()
        data = text.encode() if isinstance(text, str) else text
        st = parser.parse(data)
        return cls(parser.recognizer, st.configs), st

    def _tid(self, t) -> int:
        return t if isinstance(t, int) else self.recognizer.grammar.term_id[t]

    def feed(self, terminal) -> None:
        t = self._tid(terminal)
        out = [n for n in (self.recognizer.feed(c, t) for c in self.configs) if n is not None]
        if not out:
            g = self.recognizer.grammar
            raise UnexpectedTerminal(g.terminals[t], self.accepted_terminals())
        self.configs = tuple(_dedupe(out))

    def feed_newline(self, col: int = 0, alt: int | None = None) -> None:
        rec = self.recognizer
        alt = col if alt is None else alt
        out = []
        for c in self.configs:
            c = rec.feed_newline(c)
            if c is not None:
                c = rec.feed_indentation(c, col, alt)
            if c is not None:
                out.append(c)
        if not out:
            raise UnexpectedTerminal("_NEWLINE", self.accepted_terminals())
        self.configs = tuple(out)

    def accepts(self, terminals) -> bool:
        ts = [self._tid(t) for t in terminals]
        return any(self.recognizer.accepts(c, ts) for c in self.configs)

    def accepted_mask(self) -> int:
        m = 0
        for c in self.configs:
            m |= self.recognizer.accepted(c)
        return m

    def accepted_terminals(self) -> set[str]:
        return set(self.recognizer.grammar.names(self.accepted_mask()))

    def snapshot(self) -> tuple[Node, ...]:
        return self.configs

    def restore(self, snapshot: tuple[Node, ...]) -> None:
        self.configs = snapshot

    def is_accepted(self) -> bool:
        """Whether the input so far is a complete file (after an implicit end)."""
        return any(self.recognizer.feed(c, self.recognizer.END) is ACCEPTED for c in self.configs)
