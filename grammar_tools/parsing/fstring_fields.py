"""Replacement fields of f-strings and t-strings, parsed by the grammar.

The lexer reads an f-/t-string as one lexeme (its automaton ends it where CPython 3.12+'s
tokenizer does, PEP 701, and is a superset inside: `string_automata`), so the recognizer never
sees inside it. This module reads a lexeme's text the way CPython's tokenizer does and parses
each replacement field's expression with the recognizer, in the context where the string stands
(a function, an async function, a lambda: `yield` and `await` follow the enclosing code):

- the literal parts and format specs: `{{`/`}}` are braces (not in a spec), a backslash never
  hides a brace, escapes in non-raw strings are checked (`\\x`, `\\u`, `\\U`, `\\N{NAME}`);
- a field: the expression, lexed by the lexer from its start state lexeme by lexeme with the
  brackets counted; at bracket depth 0 a `}` ends it, a `:` starts the format spec (so
  `lambda x: 1` and `x:=1` at the top of a field read as CPython reads them), a `!` not before
  `=` the conversion, an `=` not before `=` the debug specifier; nested strings are lexemes
  (f-strings among them are checked the same way, recursively);
- the expression is parsed as CPython parses it: before 3.12 as `(expression)` (CPython 3.11
  wraps it in parentheses), from 3.12 (PEP 701) as the right side of an assignment
  (`yield_expr | star_expressions`); newlines and comments inside a field are layout;
- the version's rules: before 3.12 no backslash or `#` in the expression, not the string's own
  quote, no line break in a single-quoted string's field, a conversion right before `:` or `}`,
  spec fields nested one level; from 3.12 those are allowed (same quote, comments, line breaks,
  `!r }`, deeper specs), as PEP 701 says.

`FieldChecker.check(text, ctx)` takes a whole lexeme or the start of one (the lexeme the cursor
or a completion is in): what is there must be the start of a valid string. The parser
(`incremental.PrefixParser`) runs it on every f-/t-string lexeme it feeds and the matcher
(`mask_store.matcher`) on every token that writes one, so a field's expression is constrained as
code: `f"{a[}"`, `f"{x +}"`, `f"{lambda x: 1}"` are errors where CPython says so.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from ..lexing.lexer_automaton import START, LexError, LexerAutomaton
from .recognizer import Node, Recognizer

FIELD_TERMINALS = ("FSTRING", "LONG_FSTRING", "TSTRING", "LONG_TSTRING")
PEP701 = (3, 12)
_MATCHING = {")": "(", "]": "[", "}": "{"}
_UNKNOWN = object()


class FieldError(ValueError):
    """A replacement field that the target version refuses; `pos` is the offset in the lexeme."""

    def __init__(self, pos: int, message: str) -> None:
        super().__init__(f"f-string: {message}")
        self.pos = pos
        self.message = message


class _Open(Exception):
    """The text ends inside the string (a prefix: more may come)."""


@dataclass(frozen=True)
class _Kind:
    quote: bytes  # the closing delimiter: one or three quote characters
    raw: bool

    @property
    def long(self) -> bool:
        return len(self.quote) == 3


@dataclass
class FieldChecker:
    """Checks the replacement fields of f-/t-string lexemes for one recognizer (one target
    version). Results are memoized by (text, context)."""

    recognizer: Recognizer
    lexer: LexerAutomaton
    _memo: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        g = self.recognizer.grammar
        tid = g.term_id
        self.terminals = frozenset(tid[n] for n in FIELD_TERMINALS if n in tid)
        self.pep701 = tuple(self.recognizer.python_version) >= PEP701
        self._ignored = g.ignored | {tid["_NEWLINE"]}
        self._opens = {tid["LPAR"]: "(", tid["LSQB"]: "[", tid["LBRACE"]: "{"}
        self._closes = {tid["RPAR"]: ")", tid["RSQB"]: "]", tid["RBRACE"]: "}"}
        self._string_ids = frozenset(
            tid[n] for n in g.terminal_defs if n.endswith(("STRING", "BYTES")) and n in tid
        )
        self._noteq, self._eqeq = tid["NOTEQUAL"], tid["EQEQUAL"]
        self._star, self._comma, self._semi = tid["STAR"], tid["COMMA"], tid["SEMICOLON"]
        self._wrap = (tid["NAME"], tid["EQUAL"]) if self.pep701 else (tid["LPAR"],)
        self._unwrap = () if self.pep701 else (tid["RPAR"],)

    def check(self, text: bytes, ctx: int = 0) -> None:
        """Raise `FieldError` if `text` (an f-/t-string lexeme, or the start of one) can't be
        (the start of) a string whose fields are valid in context `ctx` (`guards` contexts)."""
        key = (text, ctx)
        memo = self._memo  # shared by the server's threads: one lookup, never `in` then `[]`
        err = memo.get(key, _UNKNOWN)
        if err is _UNKNOWN:
            err = None
            try:
                self._string(text, 0, ctx, 0)
            except FieldError as e:
                err = e
            except _Open:
                pass
            if len(memo) > 4096:
                memo.clear()
            memo[key] = err
        if err is not None:
            raise err

    def is_valid(self, text: bytes, ctx: int = 0) -> bool:
        try:
            self.check(text, ctx)
        except FieldError:
            return False
        return True

    # ------------------------------------------------------------------ strings

    def _string(self, text: bytes, i: int, ctx: int, spec_depth: int) -> int:
        """Read the string literal starting at `i` (prefix letters, quotes); return its end.
        Raises `_Open` if the text ends inside it."""
        n = len(text)
        j = i
        while j < n and text[j] not in b"'\"":
            j += 1
        if j == n:
            raise _Open
        prefix = text[i:j].lower()
        q = text[j : j + 1]
        if text[j : j + 3] == q * 3:
            quote, j = q * 3, j + 3
        elif j + 2 >= n and text[j:] == q * (n - j):
            return n  # `f"` or `f""` at the end: empty, or a triple quote to come
        else:
            quote, j = q, j + 1
        kind = _Kind(quote, b"r" in prefix)
        if b"f" not in prefix and b"t" not in prefix:
            return self._plain_body(text, j, kind)
        return self._fstring_body(text, j, kind, ctx, spec_depth)

    def _plain_body(self, text: bytes, j: int, kind: _Kind) -> int:
        n = len(text)
        while j < n:
            if text.startswith(kind.quote, j):
                return j + len(kind.quote)
            j += 2 if text[j] == 0x5C else 1
        raise _Open

    def _fstring_body(self, text: bytes, j: int, kind: _Kind, ctx: int, spec_depth: int) -> int:
        n = len(text)
        while j < n:
            c = text[j]
            if text.startswith(kind.quote, j):
                return j + len(kind.quote)
            if c == 0x5C:  # backslash
                j = _escape_end(text, j, kind)
            elif c == 0x7B:  # {
                if text[j + 1 : j + 2] == b"{":
                    j += 2
                elif j + 1 == n:
                    raise _Open
                else:
                    j = self._field(text, j + 1, kind, ctx, spec_depth)
            elif c == 0x7D:  # }
                if text[j + 1 : j + 2] == b"}":
                    j += 2
                elif j + 1 == n:
                    raise _Open
                else:
                    raise FieldError(j, "single '}' is not allowed")
            else:
                j += 1
        raise _Open

    # ------------------------------------------------------------------ fields

    def _field(self, text: bytes, i: int, kind: _Kind, ctx: int, spec_depth: int) -> int:
        """The field whose expression starts at `i` (after its `{`); returns the offset after
        its `}`."""
        j, nodes = self._expression(text, i, kind, ctx, spec_depth)
        n = len(text)
        c = text[j : j + 1]
        if c == b"=":
            j = self._blanks(text, j + 1, kind)
            c = text[j : j + 1]
        if c == b"!":
            conv = text[j + 1 : j + 2]
            if not conv:
                raise _Open
            if conv not in (b"r", b"s", b"a"):
                raise FieldError(j + 1, "invalid conversion character: expected 's', 'r', or 'a'")
            j += 2
            if self.pep701:
                j = self._blanks(text, j, kind)
            if j == n:
                raise _Open
            c = text[j : j + 1]
            if c not in (b":", b"}"):
                raise FieldError(j, "expecting '}'")
        if c == b":":
            j = self._spec(text, j + 1, kind, ctx, spec_depth + 1)
            c = text[j : j + 1]
        if c == b"}":
            return j + 1
        if not c:
            raise _Open
        raise FieldError(j, "expecting '}'")

    def _blanks(self, text: bytes, j: int, kind: _Kind) -> int:
        n = len(text)
        while j < n and text[j] in b" \t\f\r\n":
            if text[j] in b"\r\n" and not (kind.long or self.pep701):
                raise FieldError(j, "expecting '}'")
            j += 1
        if j == n:
            raise _Open
        return j

    def _spec(self, text: bytes, j: int, kind: _Kind, ctx: int, spec_depth: int) -> int:
        """The format spec from `j`: text and nested fields, up to (not past) the field's `}`."""
        n = len(text)
        while j < n:
            c = text[j]
            if c == 0x7D:
                return j
            if text.startswith(kind.quote, j):
                raise FieldError(j, "expecting '}'")
            if c == 0x7B:
                if spec_depth >= 2 and not self.pep701:  # a field in a nested field's spec
                    raise FieldError(j, "expressions nested too deeply")
                j = self._field(text, j + 1, kind, ctx, spec_depth)
            elif c in b"\r\n" and not kind.long:
                raise FieldError(j, "newlines are not allowed in format specifiers for single quoted f-strings")
            elif c == 0x5C:
                j = _escape_end(text, j, kind)
            else:
                j += 1
        raise _Open

    def _expression(self, text: bytes, i: int, kind: _Kind, ctx: int, spec_depth: int):
        """Lex and parse the expression from `i` up to the `}`, `:`, `!` or `=` that ends it
        at bracket depth 0; returns (that offset, the parser's configurations)."""
        rec = self.recognizer
        lexemes = self.lexer.lexemes
        accepting = self.lexer.accepting
        acc_ids = self.lexer.accepting_ids
        n = len(text)
        nodes: list[Node] = [Node(rec.start_state, None, 0, ctx, 0, ())]
        nodes = _feed_all(rec, nodes, self._wrap)
        brackets: list[str] = []
        empty = True
        lone_star = False  # `*a` alone: "can't use starred expression here" (a compiler check)
        j = i
        while True:
            if j == n:
                raise _Open
            c = text[j]
            if not brackets:
                nxt = text[j + 1 : j + 2]
                if c == 0x7D or c == 0x3A or (c == 0x21 and nxt != b"=") or (c == 0x3D and nxt != b"="):
                    if (c == 0x21 or c == 0x3D) and not nxt:
                        # `!` or `=` at the end: a conversion or `=` if the expression is whole,
                        # else `!=`/`==` must be able to come
                        op = self._noteq if c == 0x21 else self._eqeq
                        whole = not empty and any(rec.can_end(m) for m in _feed_all(rec, nodes, self._unwrap))
                        if not whole and not any(rec.feed(m, op) is not None for m in nodes):
                            raise FieldError(j, "invalid syntax")
                        raise _Open
                    break
            if text.startswith(kind.quote, j) and not self.pep701:
                raise FieldError(j, "expecting '}'")
            if c == 0x5C and not self.pep701:
                raise FieldError(j, "expression part cannot include a backslash")
            if c == 0x23 and not self.pep701:
                raise FieldError(j, "expression part cannot include '#'")
            if c in b"\r\n" and not (kind.long or self.pep701):
                raise FieldError(j, "expecting '}'")
            # one lexeme, longest match
            try:
                _, k, state = next(lexemes(text, START, j, n))
            except LexError:
                raise FieldError(j, "invalid token") from None
            terms = acc_ids[state]
            if k == n and self.lexer.grows[state]:  # the text ends in a lexeme that may grow
                possible = self.lexer.possible_ids[state]
                if self._string_ids.intersection(possible) and not accepting[state]:
                    self._inner_string(text, j, kind, ctx, spec_depth)  # an open string: its start must be valid
                if not any(t in self._ignored or rec.feed(node, t) is not None for node in nodes for t in possible):
                    raise FieldError(j, "invalid syntax")
                raise _Open
            if not accepting[state]:
                raise FieldError(j, "invalid token")
            if any(t in self._string_ids for t in terms):
                self._inner_string(text[:k], j, kind, ctx, spec_depth)
            if all(t in self._ignored for t in terms):
                j = k
                continue
            if not brackets:
                if self._semi in terms:
                    raise FieldError(j, "invalid syntax")
                if empty and self._star in terms:
                    lone_star = True
                elif self._comma in terms:
                    lone_star = False
            opened = [self._opens[t] for t in terms if t in self._opens]
            closed = [self._closes[t] for t in terms if t in self._closes]
            if opened:
                brackets.append(opened[0])
            elif closed:
                if not brackets or brackets[-1] != _MATCHING[closed[0]]:
                    raise FieldError(j, f"closing parenthesis {closed[0]!r} does not match")
                brackets.pop()
            new = [m for node in nodes for t in terms if (m := rec.feed(node, t)) is not None]
            if not new:
                raise FieldError(j, "invalid syntax")
            nodes = new
            empty = False
            j = k
        if empty:
            raise FieldError(j, "valid expression required before " + repr(chr(text[j])))
        if lone_star:
            raise FieldError(i, "can't use starred expression here")
        nodes = _feed_all(rec, nodes, self._unwrap)
        if not any(rec.can_end(node) for node in nodes):
            raise FieldError(j, "invalid syntax")
        return j, nodes

    def _inner_string(self, text: bytes, j: int, kind: _Kind, ctx: int, spec_depth: int) -> None:
        """A string literal inside a field (from `j` to the end of `text`, or open there)."""
        if not self.pep701:
            body = text[j:]
            if kind.quote in body:
                raise FieldError(j + body.index(kind.quote), "expecting '}'")
            if b"\\" in body:
                raise FieldError(j + body.index(b"\\"), "expression part cannot include a backslash")
        self._string(text, j, ctx, 0)


def _feed_all(rec: Recognizer, nodes: list[Node], terminals) -> list[Node]:
    for t in terminals:
        nodes = [m for node in nodes if (m := rec.feed(node, t)) is not None]
    return nodes


_HEX = frozenset(b"0123456789abcdefABCDEF")
_NAME = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789 -")
_DIGITS = {0x78: 2, 0x75: 4, 0x55: 8}  # \x, \u, \U


def _escape_end(text: bytes, j: int, kind: _Kind) -> int:
    """The end of the backslash escape at `j` in a literal part or format spec: a backslash
    never hides a brace; in a non-raw string `\\x`, `\\u`, `\\U` take exactly 2, 4, 8 hex digits
    (at most U+10FFFF), `\\N{NAME}` a name (letters, digits, space, hyphen), any other escape
    one character, as string_automata has them for str literals (the lexer's f-string automaton
    does not check them: it would have to tell raw from non-raw in every state)."""
    n = len(text)
    if j + 1 == n:
        raise _Open
    nxt = text[j + 1]
    if nxt in (0x7B, 0x7D):
        return j + 1
    if kind.raw:
        return j + 2
    if nxt in _DIGITS:
        end = j + 2 + _DIGITS[nxt]
        digits = text[j + 2 : end]
        if not all(d in _HEX for d in digits):
            raise FieldError(j, "invalid escape: truncated \\" + chr(nxt) + " escape")
        if len(digits) < end - j - 2:
            raise _Open
        if nxt == 0x55 and int(digits, 16) > 0x10FFFF:
            raise FieldError(j, "invalid escape: illegal Unicode character")
        return end
    if nxt == 0x4E:  # N
        if j + 2 == n:
            raise _Open
        if text[j + 2] != 0x7B:
            raise FieldError(j, "invalid escape: malformed \\N character escape")
        k = j + 3
        while k < n and text[k] in _NAME:
            k += 1
        if k == n:
            raise _Open
        if text[k] != 0x7D or k == j + 3:
            raise FieldError(j, "invalid escape: malformed \\N character escape")
        return k + 1
    return j + 2


@functools.lru_cache(maxsize=16)
def field_checker(recognizer: Recognizer, lexer: LexerAutomaton) -> FieldChecker:
    """The one `FieldChecker` of a (recognizer, lexer): every document's prefix parser and the
    compiled grammar share it and its memo (its results depend on nothing else)."""
    return FieldChecker(recognizer, lexer)
