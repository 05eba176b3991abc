"""Check a whole file against the grammar: the grammar side's own end-to-end use."""

from __future__ import annotations

from dataclasses import dataclass

from .fstring_fields import FieldError
from .incremental import ParseError, PrefixParser
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
    if not any(parser.fields.is_field_string(t) for t in lexer.possible_ids[state]):
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
