"""Whether a completion leaves the file parseable: the parser must continue from the end of the
completion into what follows."""

from __future__ import annotations

from grammar_tools.incremental import ParseError, PrefixParser
from grammar_tools.lexer_automaton import LexError

from .context import CursorContext


class Compatibility:
    """Whether a completion leaves the file parseable: the parser must continue from the end of
    the completion into what follows (and end there, when nothing follows)."""

    def __init__(self, parser: PrefixParser, before: bytes, ctx: CursorContext) -> None:
        self.parser = parser
        self.before = before
        self.follow = ctx.follow.encode()
        self.at_eof = ctx.at_eof
        # the cursor is outside brackets: the next statement's first words (which end the
        # follow) must be read outside brackets too, or the completion left one open that the
        # next lines would wrongly continue (`f(1,` + `y = 1` reads as a keyword argument)
        self.top_level = False
        self.head_depth = 0  # brackets the next statement's first words open themselves
        self.checks = 0
        self._known: dict[bytes, bool] = {}
        self.rest: bytes | None = None  # the next lines after the cursor (`continues` reads them)
        self.rest_ends_file = False

    def continues(self, after: str, lines: int = 30) -> bool:
        """Whether the text after the cursor (its next `lines` lines) parses after the prefix
        as it is: the cursor sits inside a construct the file goes on with."""
        rest = after.split("\n")
        self.rest = "\n".join(rest[: lines + 1]).encode()
        self.rest_ends_file = len(rest) <= lines + 1
        return self.goes_on_with(b"")

    def goes_on_with(self, completion: bytes) -> bool:
        """Whether the file's next lines (`rest`, not only the next statement's first words)
        parse after `completion`, and the file can end there when they are its end: a cut
        `f(1, 0,` before a new statement `g(x)` passes `ok` (`g` reads as one more argument)
        but not this."""
        data = self.before + completion + self.rest
        try:
            st = self.parser.parse(data)
        except (ParseError, LexError):
            return False
        return not self.rest_ends_file or self.parser.can_end(st, data)

    def ok(self, completion: bytes) -> bool:
        """Whether the file stays valid with `completion` at the cursor (memoized: the stop
        policy asks again about the same cuts as tokens arrive)."""
        known = self._known.get(completion)
        if known is None:
            known = self._known[completion] = self._check(completion)
        return known

    def _check(self, completion: bytes) -> bool:
        self.checks += 1
        data = self.before + completion + self.follow
        try:
            st = self.parser.parse(data)
        except (ParseError, LexError):
            return False
        if self.top_level and not self.at_eof and not any(c.depth == self.head_depth for c in st.configs):
            return False
        return not self.at_eof or self.parser.can_end(st, data)
