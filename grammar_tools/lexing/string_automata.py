"""Exact byte automata for Python's string literals (CPython's tokenizer rules).

lark's STRING/LONG_STRING regexes use a lookbehind, which regex-to-automaton libraries reject,
so the six string terminals are built here directly as byte NFAs:

    STRING        prefix "" | u | r (any case), quoted with ' or "
    LONG_STRING   the same, triple-quoted
    FSTRING       prefix f | fr | rf (any case), quoted with ' or "
    LONG_FSTRING  the same, triple-quoted
    TSTRING       prefix t | tr | rt (any case): a template string (PEP 750, 3.14), read as an f-string
    LONG_TSTRING  the same, triple-quoted
    BYTES         prefix b | br | rb (any case), quoted with ' or "
    LONG_BYTES    the same, triple-quoted

Rules encoded exactly for str and bytes literals:
- single-quoted bodies can't hold a raw newline; a backslash-newline continues the literal;
- escapes in non-raw literals: `\\x` takes exactly two hex digits, `\\u` four and `\\U` eight
  (at most U+10FFFF) in str literals, `\\N{NAME}` a name (letters, digits, space, hyphen);
  other escapes, known or not, take one character (CPython only warns on unknown ones);
- raw literals keep a backslash and the next character, so `r"\\"` is unterminated, as in CPython;
- bytes literals hold ASCII only; str literals any valid UTF-8 (never a NUL byte).

f-/t-strings follow PEP 701's tokenizer (CPython 3.12+), whatever the target version: the
lexeme ends exactly where CPython's FSTRING_END does (`_FStringMachine`), and the automaton
accepts every f-string CPython 3.12+ accepts within `FIELD_LIMITS` (bracket depth, f-strings
in fields, fields in format specs). It is a superset as to what stands inside: a field's
expression, escapes in the literal parts and what an older version refuses (the same quote, a
backslash, a comment or a newline in a field before 3.12) are the field checker's business
(`fstring_fields`). Within the limits the automaton never reads an f-string to another end than
CPython; beyond them it refuses the text.
"""

from __future__ import annotations

from dataclasses import dataclass

from .byte_automaton import ByteDFA, ByteNFA, determinize, minimize

NON_ASCII = [(0x80, 0x10FFFF)]
HEX = b"0123456789abcdefABCDEF"
OCT = b"01234567"
NAME_CHARS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789 -"
ASCII = bytes(range(1, 128))  # NUL is never allowed in source


def _case_variants(prefix: str) -> set[bytes]:
    out = {b""}
    for ch in prefix:
        out = {p + bytes([c]) for p in out for c in {ord(ch.lower()), ord(ch.upper())}}
    return out


PREFIXES = {
    "str": ["", "u", "r"],
    "fstr": ["f", "fr", "rf"],
    "tstr": ["t", "tr", "rt"],
    "bytes": ["b", "br", "rb"],
}


class _Builder:
    """Adds string bodies to one NFA."""

    def __init__(self, kind: str, long: bool) -> None:
        self.kind = kind  # "str" | "fstr" | "tstr" | "bytes"
        self.fields = kind in ("fstr", "tstr")  # replacement fields
        self.long = long
        self.nfa = ByteNFA()
        self.start = self.nfa.add_state()
        self.end = self.nfa.add_state(accepting=True)
        self.fstrings = _FStringMachine(self.nfa, self.end, FIELD_LIMITS)

    # -- helpers
    def chars(self, src: int, dst: int, allowed: bytes, non_ascii: bool | None = None) -> None:
        """Edges for each byte of `allowed` (ASCII) and, for str-like literals, any non-ASCII
        character."""
        nfa = self.nfa
        for b in sorted(set(allowed)):
            nfa.add_edge(src, b, b, dst)
        if non_ascii if non_ascii is not None else self.kind != "bytes":
            nfa.add_codepoints(src, NON_ASCII, dst)

    def except_(self, excluded: bytes) -> bytes:
        return bytes(b for b in ASCII if b not in excluded)

    def newline(self, src: int, dst: int) -> None:
        """`\\n` or `\\r\\n` from src to dst."""
        self.nfa.add_edge(src, 0x0A, 0x0A, dst)
        mid = self.nfa.add_state()
        self.nfa.add_edge(src, 0x0D, 0x0D, mid)
        self.nfa.add_edge(mid, 0x0A, 0x0A, dst)

    def fixed(self, src: int, dst: int, classes: list[bytes]) -> None:
        cur = src
        for i, cls in enumerate(classes):
            nxt = dst if i == len(classes) - 1 else self.nfa.add_state()
            self.chars(cur, nxt, cls, non_ascii=False)
            cur = nxt

    def escape(self, src: int, dst: int, raw: bool) -> None:
        """A backslash escape read from `src`, continuing in `dst`."""
        nfa = self.nfa
        bs = nfa.add_state()
        nfa.add_edge(src, 0x5C, 0x5C, bs)
        self.newline(bs, dst)  # backslash-newline
        if raw:
            # the backslash and any one character stay; \r alone is a newline too
            self.chars(bs, dst, self.except_(b"\n\r"))
            return
        special = b"\n\rxuUN" if self.kind != "bytes" else b"\n\rx"
        self.chars(bs, dst, self.except_(special))
        self.fixed(bs, dst, [b"x", HEX, HEX])
        if self.kind != "bytes":
            self.fixed(bs, dst, [b"u", HEX, HEX, HEX, HEX])
            self.fixed(bs, dst, [b"U", b"0", b"0", b"0"] + [HEX] * 5)
            self.fixed(bs, dst, [b"U", b"0", b"0", b"1", b"0"] + [HEX] * 4)
            n_open = nfa.add_state()
            self.fixed(bs, n_open, [b"N", b"{"])
            name = nfa.add_state()
            self.chars(n_open, name, NAME_CHARS, non_ascii=False)
            self.chars(name, name, NAME_CHARS, non_ascii=False)
            nfa.add_edge(name, ord("}"), ord("}"), dst)

    # -- bodies
    def add(self, prefix: bytes, quote: int) -> None:
        nfa = self.nfa
        raw = b"r" in prefix.lower()
        after_prefix = nfa.add_bytes(self.start, prefix) if prefix else self.start
        body = nfa.add_state()
        nfa.add_bytes(after_prefix, bytes([quote]) * (3 if self.long else 1), body)
        if self.fields:
            self.fstrings.enter(body, ((_F, quote, self.long, "lit"),))
            return
        q = bytes([quote])
        if not self.long:
            nfa.add_edge(body, quote, quote, self.end)
            sources: tuple[int, ...] = (body,)
        else:
            # triple-quoted: the body, then the body after one and after two quotes
            q1, q2 = nfa.add_state(), nfa.add_state()
            nfa.add_edge(body, quote, quote, q1)
            nfa.add_edge(q1, quote, quote, q2)
            nfa.add_edge(q2, quote, quote, self.end)
            sources = (body, q1, q2)
        newlines = b"" if self.long else b"\n\r"
        for s in sources:
            self.chars(s, body, self.except_(q + b"\\" + newlines))
            self.escape(s, body, raw)


_F, _P, _C, _S = "fstring", "plain", "code", "spec"  # the frames of `_FStringMachine`
NONASCII = -1  # any non-ASCII character, as a byte of `_FStringMachine.step`
IDENT = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
BLANK = frozenset(b" \t\f\n\r")
QUOTES = frozenset(b"'\"")
OPERATORS = frozenset(b"+-*/%&|^~<>.,;@=!:")
_CONVERSIONS, _FIELD_OPS = frozenset(b"rsa"), frozenset(b":!=")
_OPENERS, _CLOSERS = frozenset(b"([{"), frozenset(b")]")
# a string prefix is read only where a token starts: after `u`, `r`, `b`, `f`/`t` and the
# two-letter prefixes a quote starts a string of that kind; any other letter makes a name
_PREFIX_START = {c: p for p, cs in (("pu", b"uU"), ("pr", b"rR"), ("pb", b"bB"), ("pf", b"fFtT")) for c in cs}
_PREFIX_NEXT = {("pr", c): "pu" for c in b"bB"} | {("pb", c): "pu" for c in b"rR"}
_PREFIX_NEXT |= {("pr", c): "pfr" for c in b"fFtT"} | {("pf", c): "pfr" for c in b"rR"}
_NAMEISH = frozenset({"id", "pu", "pr", "pb", "pf", "pfr"})


@dataclass(frozen=True)
class FieldLimits:
    """What the lexer automaton follows inside one kind of replacement field, beyond which it
    refuses the text (CPython allows more; the automaton must stay finite and the mask store
    small: each bracket depth where a string may stand adds states with masks of their own).
    The depths are bracket depths inside the field; -1: nowhere."""

    brackets: int  # the deepest bracket nesting
    strings_at: int  # the deepest nesting where a string literal may open
    triple_at: int  # ... a triple-quoted string (or f-string) may open
    nested_at: int  # ... an f-/t-string may open
    comments_at: int  # ... a `#` comment or a backslash continuation may stand


# per field kind (f-string level, fields around it): the lexeme's own f-string is level 1, one
# in its fields level 2; a field in a format spec has 1 field around it; a field missing here
# is refused. Enough for every f-string of CPython 3.11-3.13's standard libraries but a third
# level of spec fields (test_fstring.py) and a 3-deep call in a spec field (3.13's
# test_interpreters/utils.py); see notes/issue20-pep701-lexer.md for what each costs.
FIELD_LIMITS = {
    (1, 0): FieldLimits(brackets=3, strings_at=2, triple_at=0, nested_at=2, comments_at=0),
    (1, 1): FieldLimits(brackets=2, strings_at=0, triple_at=-1, nested_at=-1, comments_at=-1),
    (2, 0): FieldLimits(brackets=1, strings_at=-1, triple_at=-1, nested_at=-1, comments_at=-1),
}


class _FStringMachine:
    """PEP 701's f-string tokenizer (CPython 3.12+) as states of a byte NFA.

    A configuration is a stack of frames, outermost first: `(_F, quote, triple, phase)` an
    f-/t-string's literal part, `(_C, depth, sub)` the code of a replacement field (`depth`
    brackets open), `(_S, phase)` a format spec, `(_P, quote, triple, phase)` a string literal
    inside a field. The machine is deterministic and follows CPython's tokenizer, so that the
    lexeme ends exactly at its FSTRING_END: a `:` (or `!`) at bracket depth 0 of a field starts
    the format spec (the conversion), a `}` there closes the field, a `{` in a spec opens a
    field, `{{`/`}}` are literal braces outside specs, a backslash never hides a brace, a `#`
    comments to the end of the line, strings of any quote and prefix (f-strings too) may stand
    in a field, a newline may too, and ends a single-quoted f-string's spec.

    UTF-8: the string's own literal parts and format specs accept exactly the valid UTF-8
    encodings of non-ASCII characters, as every other terminal does; inside a field (the code,
    its strings, comments and nested f-strings) any byte >= 0x80 is taken as part of one, a
    superset with the same lexeme ends on valid text (a valid character's bytes lead where the
    character does). The field checker lexes each field's text again with the exact automata
    (`fstring_fields`), which refuses what is not UTF-8 there. Exact UTF-8 inside fields costs
    ~7 states per state it returns to, 62% of the f-string states.
    `__init__` takes the NFA, its final state and the limits per field kind; `enter` links a
    state to a configuration, `explore` adds every configuration reachable from those."""

    def __init__(self, nfa: ByteNFA, end: int, limits: dict[tuple[int, int], FieldLimits]) -> None:
        self.nfa = nfa
        self.end = end
        self.limits = limits
        self.states: dict[tuple, int] = {(): end}
        self.todo: list[tuple] = []

    def state_of(self, stack: tuple) -> int:
        s = self.states.get(stack)
        if s is None:
            s = self.states[stack] = self.nfa.add_state()
            self.todo.append(stack)
        return s

    def enter(self, src: int, stack: tuple) -> None:
        self.nfa.add_eps(src, self.state_of(stack))

    def explore(self) -> None:
        while self.todo:
            stack = self.todo.pop()
            src = self.states[stack]
            row = [self.step(stack, b) for b in range(128)]
            b = 0
            while b < 128:
                e = b
                while e + 1 < 128 and row[e + 1] == row[b]:
                    e += 1
                if row[b] is not None:
                    self.nfa.add_edge(src, b, e, self.state_of(row[b]))
                b = e + 1
            other = self.step(stack, NONASCII)
            if other is None:
                continue
            if other[-1][0] in (_F, _S) and _level(other) == 1:
                self.nfa.add_codepoints(src, NON_ASCII, self.state_of(other))
            else:  # inside a field: any byte >= 0x80 (see the docstring)
                self.nfa.add_edge(src, 0x80, 0xFF, self.state_of(other))

    # -- one byte (NONASCII: one non-ASCII character); None: CPython refuses the text
    def step(self, stack: tuple, b: int) -> tuple | None:
        if b == 0:
            return None
        kind = stack[-1][0]
        if kind == _F:
            return self._fstring(stack, b)
        if kind == _C:
            return self._code(stack, b)
        if kind == _S:
            return self._spec(stack, b)
        return self._plain(stack, b)

    def _fstring(self, stack: tuple, b: int) -> tuple | None:
        _, q, long, ph = stack[-1]
        rest = stack[:-1]

        def go(phase: str, triple: bool | None = long) -> tuple:
            return rest + ((_F, q, triple, phase),)

        if ph == "open1":  # a nested f-string after its first quote
            return go("open2", None) if b == q else self._fstring(go("lit", False), b)
        if ph == "open2":  # after two quotes: a triple quote, or `f""` has ended
            if b != q:
                return self.step(rest, b)
            return go("lit", True) if rest[-1][1] <= self._field_limits(rest).triple_at else None
        if ph in ("q1", "q2"):
            if b == q:
                return go("q2") if ph == "q1" else rest
            return self._fstring(go("lit"), b)
        if ph == "lb":  # after `{`: `{{` is a brace, else a field starts with b
            if b == ord("{"):
                return go("lit")
            field = self._open_field(go("lit"))
            return field and self._code(field, b)
        if ph == "rb":
            return go("lit") if b == ord("}") else None
        if ph == "bs":  # a backslash never hides a brace (`\N{...}` reads as a field: same end)
            if b in (ord("{"), ord("}")):
                return self._fstring(go("lit"), b)
            return go("bscr") if b == 0x0D else go("lit")
        if ph == "bscr":
            return go("lit") if b == 0x0A else None
        if b == q:
            return go("q1") if long else rest
        if b == ord("\\"):
            return go("bs")
        if b == ord("{"):
            return go("lb")
        if b == ord("}"):
            return go("rb")
        if b in (0x0A, 0x0D) and not long:
            return None
        return stack

    def _plain(self, stack: tuple, b: int) -> tuple | None:
        _, q, long, ph = stack[-1]
        rest = stack[:-1]

        def go(phase: str, triple: bool | None = long) -> tuple:
            return rest + ((_P, q, triple, phase),)

        if ph == "open1":
            return go("open2", None) if b == q else self._plain(go("body", False), b)
        if ph == "open2":
            if b != q:
                return self.step(rest, b)
            return go("body", True) if rest[-1][1] <= self._field_limits(rest).triple_at else None
        if ph in ("q1", "q2"):
            if b == q:
                return go("q2") if ph == "q1" else rest
            return self._plain(go("body"), b)
        if ph == "bs":  # any character is kept, a newline too (`\\` CR LF: not in a '...')
            return go("body")
        if b == q:
            return go("q1") if long else rest
        if b == ord("\\"):
            return go("bs")
        if b in (0x0A, 0x0D) and not long:
            return None
        return stack

    def _open_field(self, stack: tuple) -> tuple | None:
        """`stack` with a new field's code pushed, if the limits allow it."""
        return stack + ((_C, 0, "fresh"),) if _field_kind(stack + ((_C,),)) in self.limits else None

    def _field_limits(self, stack: tuple) -> FieldLimits:
        """The limits of the field whose code is on top of `stack`."""
        return self.limits[_field_kind(stack)]

    def _code(self, stack: tuple, b: int) -> tuple | None:
        _, d, sub = stack[-1]
        rest = stack[:-1]

        def go(depth: int, s: str) -> tuple:
            return rest + ((_C, depth, s),)

        if sub in ("com", "comf"):  # a comment, to the end of the line
            if b in (0x0A, 0x0D):
                return go(d, "fresh" if sub == "comf" else "n")
            return stack
        if sub == "bs":  # a line continuation
            return go(d, "n") if b == 0x0A else go(d, "bscr") if b == 0x0D else None
        if sub == "bscr":
            return go(d, "n") if b == 0x0A else None
        if sub == "bang":  # `!` at depth 0: `!=` or a conversion
            if b == ord("="):
                return go(d, "n")
            return go(d, "conv") if b in _CONVERSIONS else None
        if sub == "conv":
            if b in BLANK:
                return stack
            if b == ord("}"):
                return rest
            return rest + ((_S, "text"),) if b == ord(":") else None
        if sub in _NAMEISH:
            if b == NONASCII or b in IDENT:
                return go(d, _PREFIX_NEXT.get((sub, b), "id"))
            if b in QUOTES:
                if sub in ("pf", "pfr"):
                    return self._open_fstring(go(d, "n"), b)
                return self._open_string(go(d, "n"), b)
            sub = "n"
        fresh = sub == "fresh"
        if b in BLANK:
            return stack
        if b in (ord("#"), ord("\\")) and d > self._field_limits(stack).comments_at:
            return None
        if b == ord("#"):
            return go(d, "comf" if fresh else "com")
        if b == ord("\\"):
            return go(d, "bs")
        if b in QUOTES:
            return self._open_string(go(d, "n"), b)
        if b == NONASCII or b in IDENT:
            return go(d, _PREFIX_START.get(b, "id"))
        if b in _OPENERS:
            return go(d + 1, "n") if d < self._field_limits(stack).brackets else None
        if b in _CLOSERS:
            return go(d - 1, "n") if d > 0 else None
        if b == ord("}"):
            if d > 0:
                return go(d - 1, "n")
            return None if fresh else rest
        if d == 0 and b in _FIELD_OPS:
            if fresh:  # a field's expression is not blank
                return None
            if b == ord(":"):
                return rest + ((_S, "text"),)
            if b == ord("!"):
                return go(d, "bang")
        return go(d, "n") if b in OPERATORS else None

    def _open_string(self, stack: tuple, quote: int) -> tuple | None:
        """`stack` (its top the code of a field) with a string literal opened, if the limits
        allow."""
        if stack[-1][1] > self._field_limits(stack).strings_at:
            return None
        return stack + ((_P, quote, None, "open1"),)

    def _open_fstring(self, stack: tuple, quote: int) -> tuple | None:
        """`stack` (its top the code of a field) with an f-string opened, if the limits allow."""
        if stack[-1][1] > self._field_limits(stack).nested_at:
            return None
        return stack + ((_F, quote, None, "open1"),)

    def _spec(self, stack: tuple, b: int) -> tuple | None:
        _, ph = stack[-1]
        rest = stack[:-1]
        _, q, long, _ = next(f for f in reversed(rest) if f[0] == _F)
        text = rest + ((_S, "text"),)
        if ph in ("q1", "q2"):  # triple-quoted: the end quotes can't stand in a spec
            if b == q:
                return rest + ((_S, "q2"),) if ph == "q1" else None
            return self._spec(text, b)
        if ph == "bs":
            if b in (ord("{"), ord("}")):
                return self._spec(text, b)
            return rest + ((_S, "bscr"),) if b == 0x0D else text
        if ph == "bscr":
            return text if b == 0x0A else None
        if b == q:
            return rest + ((_S, "q1"),) if long else None
        if b == ord("{"):
            return self._open_field(text)
        if b == ord("}"):
            return rest
        if b == ord("\\"):
            return rest + ((_S, "bs"),)
        if b in (0x0A, 0x0D) and not long:  # the spec ends; the field's code goes on
            return rest + ((_C, 0, "n"),)
        return stack


def _field_kind(stack: tuple) -> tuple[int, int]:
    """The key of `FIELD_LIMITS` for the field whose code is on top of `stack`: its f-string's
    level and the fields around it in that f-string (1 for a field in a format spec)."""
    around = 0
    for frame in reversed(stack[:-1]):
        if frame[0] == _F:
            break
        around += frame[0] == _S
    return _level(stack), around


def _level(stack: tuple) -> int:
    """The f-strings open in `stack`."""
    return sum(1 for f in stack if f[0] == _F)


def string_dfa(kind: str, long: bool) -> ByteDFA:
    """The byte automaton of one string terminal (`kind` in str/fstr/tstr/bytes)."""
    b = _Builder(kind, long)
    for prefix in PREFIXES[kind]:
        for variant in _case_variants(prefix):
            for quote in (ord("'"), ord('"')):
                b.add(variant, quote)
    b.fstrings.explore()
    return minimize(determinize(b.nfa, b.start))


STRING_TERMINALS = {
    "STRING": ("str", False),
    "LONG_STRING": ("str", True),
    "FSTRING": ("fstr", False),
    "LONG_FSTRING": ("fstr", True),
    "TSTRING": ("tstr", False),
    "LONG_TSTRING": ("tstr", True),
    "BYTES": ("bytes", False),
    "LONG_BYTES": ("bytes", True),
}
