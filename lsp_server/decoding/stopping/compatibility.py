"""Whether a completion leaves the file valid: the whole rest of the file is read
(`grammar_tools.parsing.edit_check.EditCheck`), not a window of the next lines, and a file that already
has errors after the cursor is judged by "no new error"."""

from __future__ import annotations

import time

from grammar_tools.parsing.edit_check import EditCheck
from grammar_tools.parsing.incremental import PrefixParser


REACH = 16_384  # bytes after a completion within which its parse must meet the document's (the cost's bound)


class Compatibility:
    """Whether a completion at the cursor, put in place of the auto-closed brackets/quotes it
    supplies again (`covered`), leaves the document without a syntax error it did not already
    have, and none in the statement right after it (`EditCheck`'s strict mode: a completion
    must mend what the cut at the cursor broke). `before` is the text before the cursor as the
    parser reads it (its recovery applied), `after` the rest of the document. Verdicts are
    memoized: the stop policy asks again about the same cuts as tokens arrive; `ms` adds up
    the time spent (set-up and checks)."""

    def __init__(self, parser: PrefixParser, before: bytes, after: bytes, covered: bytes) -> None:
        t0 = time.perf_counter()
        self.edit_check = EditCheck(parser, before, after, strict=True, reach=REACH)
        self.replaced = len(covered)
        self.ms = (time.perf_counter() - t0) * 1000  # the time spent: set-up and checks

    @property
    def checks(self) -> int:
        """Edits checked so far (not from the memo)."""
        return self.edit_check.checks

    def ok(self, completion: bytes) -> bool:
        """Whether the file stays valid with `completion` at the cursor."""
        return self._timed(completion, self.replaced if completion else 0)

    def _timed(self, completion: bytes, replaced: int) -> bool:
        t0 = time.perf_counter()
        verdict = self.edit_check.ok(completion, replaced)
        self.ms += (time.perf_counter() - t0) * 1000
        return verdict
