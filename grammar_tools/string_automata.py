"""Exact byte automata for Python's string literals (CPython 3.11 tokenizer rules).

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

Rules encoded exactly:
- single-quoted bodies can't hold a raw newline; a backslash-newline continues the literal;
- escapes in non-raw literals: `\\x` takes exactly two hex digits, `\\u` four and `\\U` eight
  (at most U+10FFFF) in str literals, `\\N{NAME}` a name (letters, digits, space, hyphen);
  other escapes, known or not, take one character (CPython only warns on unknown ones);
- raw literals keep a backslash and the next character, so `r"\\"` is unterminated, as in CPython;
- bytes literals hold ASCII only; str literals any valid UTF-8 (never a NUL byte);
- f-string replacement fields: `{{`/`}}` escapes, no lone `}`, a field is non-blank and holds no
  backslash or `#` (3.11), inner string literals of the other quote kind, an optional
  `!r`/`!s`/`!a` conversion and a format spec with nested fields.
The automata are exact for everything but the inside of f-string expressions, which is only
checked for the brace structure above (CPython parses it as an expression afterwards).
"""

from __future__ import annotations

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

    def escape(self, src: int, dst: int, raw: bool, braces: tuple[int, int] | None = None) -> None:
        """A backslash escape read from `src`, continuing in `dst`. In f-strings a backslash
        never hides a brace: `\\{` is a backslash, then whatever `{` starts (`braces` gives the
        states after a `{` and after a `}`)."""
        nfa = self.nfa
        bs = nfa.add_state()
        nfa.add_edge(src, 0x5C, 0x5C, bs)
        self.newline(bs, dst)  # backslash-newline
        if braces is not None:
            nfa.add_edge(bs, ord("{"), ord("{"), braces[0])
            nfa.add_edge(bs, ord("}"), ord("}"), braces[1])
        braces = b"{}" if self.fields else b""
        if raw:
            # the backslash and any one character stay; \r alone is a newline too
            self.chars(bs, dst, self.except_(b"\n\r" + braces))
            return
        special = b"\n\rxuUN" if self.kind != "bytes" else b"\n\rx"
        self.chars(bs, dst, self.except_(special + braces))
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
        q = bytes([quote])
        body = nfa.add_state()
        if not self.long:
            nfa.add_edge(after_prefix, quote, quote, body)
            nfa.add_edge(body, quote, quote, self.end)
            sources: tuple[int, ...] = (body,)
        else:
            # triple-quoted: the body, then the body after one and after two quotes
            open1, open2 = nfa.add_state(), nfa.add_state()
            nfa.add_edge(after_prefix, quote, quote, open1)
            nfa.add_edge(open1, quote, quote, open2)
            nfa.add_edge(open2, quote, quote, body)
            q1, q2 = nfa.add_state(), nfa.add_state()
            nfa.add_edge(body, quote, quote, q1)
            nfa.add_edge(q1, quote, quote, q2)
            nfa.add_edge(q2, quote, quote, self.end)
            sources = (body, q1, q2)
        newlines = b"" if self.long else b"\n\r"
        if self.fields:
            self._fstring_body(body, sources, quote, raw)
            return
        for s in sources:
            self.chars(s, body, self.except_(q + b"\\" + newlines))
            self.escape(s, body, raw)

    def _fstring_body(self, lit: int, sources: tuple[int, ...], quote: int, raw: bool) -> None:
        """Literal part `lit` of an f-string (entered from `sources`), with replacement fields."""
        nfa = self.nfa
        q = bytes([quote])
        newlines = b"" if self.long else b"\n\r"
        # {{ and }} are literal braces; a lone } is an error
        open_ = nfa.add_state()
        close = nfa.add_state()
        for s in sources:
            self.chars(s, lit, self.except_(q + b"\\{}" + newlines))
            self.escape(s, lit, raw, braces=(open_, close))
        for s in sources:
            nfa.add_edge(s, ord("{"), ord("{"), open_)
            nfa.add_edge(s, ord("}"), ord("}"), close)
        nfa.add_edge(open_, ord("{"), ord("{"), lit)
        nfa.add_edge(close, ord("}"), ord("}"), lit)
        self._field(open_, lit, quote, nested=False)

    def _inner_string(self, src: int, dst: int, oq: int, forbidden: bytes) -> None:
        """A string literal inside an f-string expression, quoted with `oq`."""
        nfa = self.nfa
        body = nfa.add_state()
        nfa.add_edge(src, oq, oq, body)
        self.chars(body, body, self.except_(bytes([oq]) + forbidden))
        nfa.add_edge(body, oq, oq, dst)

    def _field(self, open_: int, after: int, quote: int, nested: bool) -> None:
        """A replacement field from `open_` (just after `{`) to `after` (just after its `}`):
        a non-blank expression, an optional `!r`/`!s`/`!a`, an optional `:spec`.

        Brackets inside the expression are not counted (a `:` or `!` inside them reads as the
        start of the spec or conversion, which accepts the same texts), which keeps the
        automaton small; a `{` inside an expression (a set or dict display) is not accepted."""
        nfa = self.nfa
        newline_ok = self.long
        # a single-quoted f-string ends at its quote, so the expression can't hold it; inner
        # literals use the other kind (in a triple-quoted one, either kind)
        others = [c for c in b"'\"" if self.long or c != quote]
        nl = b"" if newline_ok else b"\n\r"
        forbidden = (b"" if self.long else bytes([quote])) + b"\\#" + nl  # 3.11
        in_inner_forbidden = forbidden.replace(b"#", b"")  # '#' may stand in an inner string
        fresh, started = nfa.add_state(), nfa.add_state()
        nfa.add_eps(open_, fresh)
        plain = self.except_(forbidden + b"{}'\"!:= \t\n\r")
        blank = b" \t" + (b"\n\r" if newline_ok else b"")
        spec = nfa.add_state()
        conv_bang = nfa.add_state()
        conv_done = nfa.add_state()
        for s in (fresh, started):
            self.chars(s, started, plain)
            self.chars(s, s, blank, non_ascii=False)
            for oq in others:
                self._inner_string(s, started, oq, in_inner_forbidden)
        self.chars(started, started, b"=", non_ascii=False)
        nfa.add_edge(started, ord("}"), ord("}"), after)
        nfa.add_edge(started, ord(":"), ord(":"), spec)
        nfa.add_edge(started, ord("!"), ord("!"), conv_bang)
        # '!=' goes on with the expression; '!r', '!s', '!a' are conversions
        nfa.add_edge(conv_bang, ord("="), ord("="), started)
        for c in b"rsa":
            nfa.add_edge(conv_bang, c, c, conv_done)
        nfa.add_edge(conv_done, ord("}"), ord("}"), after)
        nfa.add_edge(conv_done, ord(":"), ord(":"), spec)
        # the format spec: text with nested fields (one level)
        self.chars(spec, spec, self.except_((b"" if self.long else bytes([quote])) + b"\\{}" + nl))
        nfa.add_edge(spec, ord("}"), ord("}"), after)
        if not nested:
            inner_open = nfa.add_state()
            nfa.add_edge(spec, ord("{"), ord("{"), inner_open)
            self._field(inner_open, spec, quote, nested=True)


def string_dfa(kind: str, long: bool) -> ByteDFA:
    """The byte automaton of one string terminal (`kind` in str/fstr/tstr/bytes)."""
    b = _Builder(kind, long)
    for prefix in PREFIXES[kind]:
        for variant in _case_variants(prefix):
            for quote in (ord("'"), ord('"')):
                b.add(variant, quote)
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
