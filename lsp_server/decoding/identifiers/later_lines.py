"""The lines of a completion after its first, judged in their own scope.

The guide shapes a completion with the analysis of the cursor's line (`analysis.analyse`); a
completion's later lines may sit in another scope (a new block, a new function) and its name set
is a superset on purpose (every scope's definitions). Once the completion is written, the file
with it is read as a whole: `first_unbound_line` gives the first of the completion's later lines
that reads a name bound nowhere it can be read (pyflakes' "undefined name", which follows scopes
and the names the completion itself binds), and the engine offers the completion cut before that
line, as a completion tool is expected to: the longest cut whose names resolve that passes the
same checks as any answer (`model_pass.choose_offer`: the stop policy and the whole-file check).

pyflakes is the checker behind flake8 and ruff's F821; it reads the tree and never runs the code.
"""

from __future__ import annotations

from grammar_tools.parsing.cpython_check import parsed_tree
from pyflakes import checker, messages


def first_unbound_line(before: str, text: str, after: str) -> int | None:
    """The index (>= 1) of the first line of the completion `text`, written between `before` and
    `after` (the rest of the file), that reads a name bound nowhere it can be read; None when
    there is none, when `text` is one line, or when the file does not compile (the compile check
    answers that). A name the lines after the completion no longer find bound is not counted:
    cutting the completion would not bind it."""
    written = text.rstrip()  # a last line of blanks is the indentation of the line after it
    if "\n" not in written:
        return None
    try:  # the tree asked for again where jedi's thread disturbed its conversion (parsed_tree)
        tree = parsed_tree(before + text + after, "<completion>")
        found = [] if tree is None else checker.Checker(tree, filename="<completion>").messages
    except (MemoryError, RecursionError):  # too deep to read: not judged
        return None
    first = before.count("\n") + 1  # the completion's first line, 1-based as pyflakes counts
    last = first + written.count("\n")
    lines = [m.lineno - first for m in found if isinstance(m, messages.UndefinedName) and first < m.lineno <= last]
    return min(lines, default=None)


def line_start(text: bytes, line: int) -> int:
    """The offset in `text` of the newline that ends its line `line - 1` (where a cut before
    line `line` ends)."""
    at = -1
    for _ in range(line):
        at = text.index(b"\n", at + 1)
    return at
