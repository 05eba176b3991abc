"""The grammar side's own end-to-end uses: a whole file checked against the grammar
(`check_source`), and a configuration set fed terminal by terminal (`IncrementalParser`: the
tests' and the benchmarks' terminal-level API)."""

from __future__ import annotations

from dataclasses import dataclass

from .fstring_fields import FieldError
from .incremental import ParseError, PrefixParser, PrefixState, dedupe
from .lookahead import accepted
from .recognizer import ACCEPTED, Node, Recognizer
from ..lexing.lexer_automaton import LexError


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    message: str = ""
    pos: int | None = None  # byte offset of the error
    line: int | None = None  # 1-based
    column: int | None = None  # 1-based, in bytes

    def __str__(self) -> str:
        if self.ok:
            return "ok"
        return f"line {self.line}, column {self.column}: {self.message}"


def check_source(data: bytes, parser: PrefixParser | None = None) -> CheckResult:
    """Whether `data` (UTF-8) is a complete Python file for the grammar."""
    parser = parser or PrefixParser()
    try:
        st = parser.parse(data)
    except LexError as e:
        return _field_error(data, e.pos, parser) or _error(data, e.pos, str(e).rsplit(" at byte", 1)[0])
    except ParseError as e:
        return _error(data, e.pos, str(e).rsplit(" at byte", 1)[0])
    if not parser.can_end(st, data):
        return _error(data, len(data), "unexpected end of file")
    return CheckResult(True)


def _field_error(data: bytes, pos: int, parser: PrefixParser) -> CheckResult | None:
    """Where the text can't be lexed inside an f-/t-string, the error the field checker finds in
    it, if any: the lexer counts a field's brackets without matching them, so in `f"{a[}"` it
    reads on past the `}` (and fails later), where CPython stops at the `}`."""
    lexer = parser.lexer
    _, state, start = lexer.lex(data, None, 0, pos)
    if not not parser.fields.terminals.isdisjoint(lexer.possible_ids[state]):
        return None
    try:
        parser.fields.check(data[start:pos])
    except FieldError as e:
        return _error(data, start + e.pos, str(e))
    return None


def _error(data: bytes, pos: int, message: str) -> CheckResult:
    line = data.count(b"\n", 0, pos) + 1
    col = pos - (data.rfind(b"\n", 0, pos) + 1) + 1
    return CheckResult(False, message, pos, line, col)


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
        self.configs = tuple(dedupe(out))

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
        return any(accepts(self.recognizer, c, ts) for c in self.configs)

    def accepted_mask(self) -> int:
        m = 0
        for c in self.configs:
            m |= accepted(self.recognizer, c)
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


def accepts(rec: Recognizer, node: Node, terminals) -> bool:
    """Whether `node` takes the terminal ids `terminals` one after another."""
    for t in terminals:
        node = rec.feed(node, t)
        if node is None:
            return False
    return True
