"""Where a prompt window may start: a line outside every bracket and string, so that the text
from it reads as code.

A window cut on a line grid starts where the grid falls: inside a docstring (the model is shown
its prose as code and its closing quotes as an opening one, so what follows reads as a string),
inside a call's arguments or a dict literal (a dangling `)` or `}`), where imports or headers
put in front make it worse (`import codecs` then `    0x0433: 0x00a3,`). On the default model's
short first windows of the benchmarks' cut points that was 11 of 40 stdlib and 15 of 40
third-party windows. So the window's text starts on the last such line at or before the grid
line where the text from there fits the budget (the docstring or the call whole: its words
say what the code does), else on the first one after it (fewer tokens), and stays on the grid
line where neither is known before the cursor's line (the cursor inside one long literal: its
inside is all there is to show).

Which lines those are, the document's parser says (`PrefixParser.statement_gaps`: the newline
lexemes between statements outside brackets, each with the blank and comment lines it holds), for
the text it has parsed, which is the text before the cursor up to its last newline, or up to a
syntax error: after one, nothing is known past the error. Without a parser nothing is known
(`NO_STARTS`): every window stays on its grid line.

    starts = StatementLines.of(before_bytes, parser.statement_gaps(before_bytes))
    starts.last_to(17)        # 12: the last line at or before 17 that starts a statement
    starts.first_from(17, 40)  # 18: the first from 17, before line 40
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class StatementLines:
    """The lines of a text that start outside every bracket and string, as ranges of lines
    `[firsts[i], lasts[i]]` in order (line 0 always); `known`: read from a parser (else
    nothing is known but line 0)."""

    firsts: tuple[int, ...] = ()
    lasts: tuple[int, ...] = ()
    known: bool = True

    @classmethod
    def of(cls, data: bytes, gaps: list[tuple[int, int]]) -> StatementLines:
        """From the parser's gaps of `data` (UTF-8 bytes): a gap from byte `start` (the end of a
        statement's line, or a comment after it) to `end` (the next statement's first
        character) holds the lines that start after `start` and at or before `end`."""
        if not gaps:
            return cls()  # line 0 only
        newlines = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
        bounds = np.asarray(gaps, dtype=np.int64)
        firsts = np.searchsorted(newlines, bounds[:, 0], side="left") + 1  # the line after the one holding `start`
        lasts = np.searchsorted(newlines, bounds[:, 1], side="left")  # the line holding `end`
        keep = firsts <= lasts
        return cls(tuple(firsts[keep].tolist()), tuple(lasts[keep].tolist()))

    def last_to(self, line: int) -> int | None:
        """The last line at or before `line` that starts outside every bracket and string, or
        None (nothing known)."""
        if line == 0 or not self.known:
            return 0 if line == 0 else None
        i = bisect.bisect_right(self.firsts, line) - 1  # the last range that starts at or before `line`
        return 0 if i < 0 else min(self.lasts[i], line)

    def first_from(self, line: int, below: int) -> int | None:
        """The first line at or after `line` and before `below` that starts outside every
        bracket and string, or None (none known)."""
        if line == 0:
            return 0 if below > 0 else None
        i = bisect.bisect_left(self.lasts, line)  # the first range that ends at or after `line`
        if i == len(self.lasts):
            return None
        first = max(self.firsts[i], line)
        return first if first < below else None


NO_STARTS = StatementLines(known=False)  # nothing known: every window stays on its grid line
