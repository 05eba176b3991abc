"""Where a document's line starts, read from the text before it by Python's tokenizer: a new
statement, inside brackets (the statement before it goes on: which brackets close it, and whether
the innermost is a `def`'s parameter list), or inside a string that spans lines.

    line_place("def f(\n    a,\n")   # LinePlace(Place.CONTINUATION, ")", parameters=True)

The names analysis reads the cursor's line by where it starts (jedi completes nothing where a
parameter's name goes; `pass` inside brackets breaks the statement), as does `unbound.unbound_at`.
"""

from __future__ import annotations

import enum
import io
import tokenize
from dataclasses import dataclass

_CLOSING = {"(": ")", "[": "]", "{": "}"}
_IGNORED = (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT)


class Place(enum.Enum):
    """Where a line starts, read from the text before it."""

    STATEMENT = "statement"  # a new statement
    CONTINUATION = "continuation"  # inside a bracket: the statement before it goes on
    STRING = "string"  # inside a string that spans lines


@dataclass(frozen=True)
class LinePlace:
    place: Place
    closers: str = ""  # the brackets that close what is open there, innermost first (`)]`)
    parameters: bool = False  # the innermost open bracket is the one after `def name`


def line_place(before: str) -> LinePlace:
    """Where the line after `before` starts (module docstring); a text the tokenizer can't read
    (an indentation error) is taken as ending a statement."""
    open_: list[tuple[str, bool]] = []  # (its closer, whether it opens a def's parameters)
    last: tuple[str, ...] = ()  # the two significant tokens before this one
    try:
        for token in tokenize.generate_tokens(io.StringIO(before).readline):
            if token.type == tokenize.OP and token.string in _CLOSING:
                open_.append((_CLOSING[token.string], token.string == "(" and len(last) == 2 and last[0] == "def"))
            elif token.type == tokenize.OP and token.string in _CLOSING.values() and open_:
                open_.pop()
            if token.type not in _IGNORED:
                last = (last + (token.string,))[-2:]
    except tokenize.TokenError as e:
        if "string" in str(e.args[0]):
            return LinePlace(Place.STRING)
        return LinePlace(Place.CONTINUATION, "".join(c for c, _ in reversed(open_)), bool(open_) and open_[-1][1])
    except (SyntaxError, ValueError):  # IndentationError is a SyntaxError
        pass
    return LinePlace(Place.STATEMENT)
