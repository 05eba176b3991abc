"""The line ends of generated text, found by lexing it with the grammar's lexer automaton (never
a regex guess): newlines inside strings, brackets or after a backslash are not line ends."""

from __future__ import annotations

import re
from dataclasses import dataclass

from grammar_tools.parsing.incremental import newline_width
from grammar_tools.lexing.lexer_automaton import START, LexError, LexerAutomaton

_BLANK_LINE = re.compile(rb"\n[ \t\f]*\r?\n")


@dataclass(frozen=True)
class LineEnd:
    cut: int  # offset of the newline in the scanned bytes (text before it stays)
    end: int  # end of the newline lexeme (indentation of the next line included)
    closed: bool  # the next line's first non-blank character has arrived
    col: int  # that line's indentation (when closed)
    blank: bool  # a blank line lies between
    depth: int  # bracket depth at the newline (0: a logical line end)


class LineScanner:
    """Finds the newlines of generated text by lexing it (strings, brackets, backslash
    continuations and comments as the grammar has them)."""

    def __init__(self, lexer: LexerAutomaton) -> None:
        g = lexer.grammar
        self.lexer = lexer
        tid = g.term_id
        self.nl = tid["_NEWLINE"]
        self.opens = {tid[n] for n in ("LPAR", "LSQB", "LBRACE")}
        self.strings = {i for n, i in tid.items() if "STRING" in n or "BYTES" in n}
        self.closes = {tid[n] for n in ("RPAR", "RSQB", "RBRACE")}

    def line_ends(self, data: bytes, depth: int = 0) -> tuple[list[LineEnd], list[tuple[int, int]]] | None:
        """The newlines of `data` (which starts at a lexeme start, at bracket `depth`), and the
        lexeme boundaries with the bracket depth there; None if the bytes don't lex
        (unconstrained output)."""
        try:
            lexemes, state, start = self.lexer.lex(data, START, 0)
        except LexError:
            return None
        acc = self.lexer.accepting_ids
        ends: list[LineEnd] = []
        bounds = [(0, depth)]
        nl, opens, closes = self.nl, self.opens, self.closes
        for a, b, d in lexemes:
            terms = acc[d]
            if nl in terms:
                self._newline(ends, data, a, b, True, depth)
            elif len(terms) == 1:
                t = next(iter(terms))
                if t in opens:
                    depth += 1
                elif t in closes:
                    depth = max(depth - 1, 0)
            bounds.append((b, depth))
        if nl in self.lexer.possible_ids[state]:
            self._newline(ends, data, start, len(data), False, depth)
        return ends, bounds

    def string_cuts(self, data: bytes) -> list[int]:
        """Offsets inside the string literals of `data` (from a lexeme start) where a cut leaves
        the string open for the file's own text to close: before each newline in it, and
        before its closing quotes (a docstring's first line written whole and closed where the
        file's docstring goes on)."""
        try:
            lexemes, state, start = self.lexer.lex(data, START, 0)
        except LexError:
            return []
        acc = self.lexer.accepting_ids
        out = []
        spans = [(a, b, True) for a, b, d in lexemes if self.strings.intersection(acc[d])]
        if self.lexer.accepting[state] and self.strings.intersection(acc[state]):  # one ends the text
            spans.append((start, len(data), True))
        elif self.inside_string(data):  # a string still open at the end
            spans.append((start, len(data), False))
        for a, b, closed in spans:
            text = data[a:b]
            out += [a + i for i in range(len(text)) if text[i : i + 1] == b"\n"]
            if closed:
                out.append(b - (3 if text.endswith((b'"""', b"'''")) else 1))
        return out

    def inside_string(self, data: bytes) -> bool:
        """Whether `data` (from a lexeme start) ends inside an unterminated string literal."""
        try:
            _, state, _ = self.lexer.lex(data, START, 0)
        except LexError:
            return False
        possible = self.lexer.possible_ids[state]
        return bool(possible) and set(possible) <= self.strings and not self.lexer.accepting[state]

    def depth_after(self, data: bytes, depth: int = 0) -> int:
        """Bracket depth at the end of `data` (from a lexeme start at `depth`)."""
        try:
            lexemes, state, _ = self.lexer.lex(data, START, 0)
        except LexError:
            return depth
        acc = self.lexer.accepting_ids
        states = [d for _, _, d in lexemes]
        if data and self.lexer.accepting[state]:
            states.append(state)
        for d in states:
            terms = acc[d]
            if len(terms) == 1:
                t = next(iter(terms))
                depth += (t in self.opens) - (t in self.closes)
        return max(depth, 0)

    @staticmethod
    def _newline(ends, data, a, b, closed, depth) -> None:
        lexeme = data[a:b]
        i = lexeme.find(b"\n")
        if i < 0:  # a comment so far
            return
        if i > 0 and lexeme[i - 1 : i] == b"\r":
            i -= 1
        col = newline_width(lexeme)[0] if closed else 0
        ends.append(LineEnd(a + i, b, closed, col, bool(_BLANK_LINE.search(lexeme)), depth))
