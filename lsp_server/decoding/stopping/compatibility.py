"""Whether a completion leaves the file parseable: the parser must continue from the end of the
completion into what follows."""

from __future__ import annotations

from grammar_tools.incremental import ParseError, PrefixParser
from grammar_tools.lexer_automaton import LexError

from .context import CursorContext


def following_lines(after: str, lines: int = 30) -> tuple[bytes, bool]:
    """The text after the cursor cut after its next `lines` lines, and whether that is all of it."""
    rest = after.split("\n")
    return "\n".join(rest[: lines + 1]).encode(), len(rest) <= lines + 1


class Compatibility:
    """Whether a completion leaves the file parseable: the parser must continue from the end of
    the completion into what follows (and end there, when nothing follows)."""

    def __init__(self, parser: PrefixParser, before: bytes, ctx: CursorContext, top_level: bool = False,
                 head_depth: int = 0, rest: bytes | None = None, rest_ends_file: bool = False) -> None:
        self.parser = parser
        self.before = before
        self.follow = ctx.follow.encode()
        self.at_eof = ctx.at_eof
        # the cursor is outside brackets: the next statement's first words (which end the
        # follow) must be read outside brackets too, or the completion left one open that the
        # next lines would wrongly continue (`f(1,` + `y = 1` reads as a keyword argument)
        self.top_level = top_level
        self.head_depth = head_depth  # brackets the next statement's first words open themselves
        self.rest = rest  # the next lines after the cursor (`following_lines`), read by `goes_on_with`
        self.rest_ends_file = rest_ends_file  # and nothing comes after them
        self.checks = 0
        self._known: dict[bytes, bool] = {}

    def goes_on_with(self, completion: bytes) -> bool:
        """Whether the file's next lines (`rest`, not only the next statement's first words)
        parse after `completion`, and the file can end there when they are its end: a cut
        `f(1, 0,` before a new statement `g(x)` passes `ok` (`g` reads as one more argument)
        but not this. With the empty completion: whether the cursor sits inside a construct
        (brackets) that the file goes on with."""
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
