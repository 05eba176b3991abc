"""Where a completion ends: grammar-aware stopping and compatibility with the rest of the file; what
the stop policy says after a token (`Verdict` or a `Stop`), and why a completion ended
(`StopReason`, reported as `stop_reason`).

The cursor's surroundings decide the policy (`CursorContext`):

- single-line (cursor mid-line, or a line that opens no block): stop at the end of the logical
  line, i.e. at the first newline at bracket depth 0; the line is complete there by construction
  (the mask only lets a newline through where brackets are balanced);
- multi-line (after a block opener `:`, or on an empty line inside a block): stop when a line
  dedents below the block the completion started in, or at a blank line after complete code;
- infix (the rest of the line holds code other than closing brackets/quotes): the completion must
  join that code; it ends at the longest point where completion + rest of line parses;
- a line start (the cursor at or inside the leading whitespace of a non-blank line): single-line,
  the answer's lines go above the existing one (`RestOfFile.tail` ends them).

Whatever the policy, a stop is taken only where the file stays valid: the document with the
completion in place of the auto-closed brackets it supplies again has no syntax error it did not
already have, the whole rest of the file read (`Compatibility`, over `EditCheck`). `LineScanner` finds the line ends by lexing the completion with the grammar's lexer
automaton (never a regex guess): newlines inside strings, brackets or after a backslash are not
line ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, StrEnum

from ..repeated_names import repeated_name_at
from .rest_of_file import LineScanner, RestOfFile, Start, opens_block


class StopReason(StrEnum):
    """Why a completion ended (the value is what `--json` and the logs say)."""

    LINE_END = "line-end"
    BLOCK_END = "block-end"
    SUFFIX = "suffix"
    EOS = "eos"
    MAX_TOKENS = "max-tokens"
    CANCELLED = "cancelled"
    NO_CONTINUATION = "no-continuation"
    ECHO = "echo"
    BUDGET = "budget"
    COMPILER = "compiler"
    REPEATED = "repeated-name"

    @property
    def description(self) -> str:
        return _DESCRIPTIONS[self]


_DESCRIPTIONS = {
    StopReason.LINE_END: "the logical line is complete",
    StopReason.BLOCK_END: "the code dedented below the block it started in, or a blank line followed a complete "
                          "statement",
    StopReason.SUFFIX: "the completion joins the text after the cursor",
    StopReason.EOS: "the model ended the sequence where the code can end",
    StopReason.MAX_TOKENS: "the token limit",
    StopReason.CANCELLED: "the request was cancelled",
    StopReason.NO_CONTINUATION: "the grammar allows nothing the model would say",
    StopReason.ECHO: "the completion stopped where it began to repeat the text after the cursor (the file's next "
                     "lines, the rest of the line), or it was that text already",
    StopReason.COMPILER: "CPython's compiler refuses the file with the completion where it was written (a check "
                         "made after the parse: decoding/request.py); nothing is offered",
    StopReason.REPEATED: "the completion wrote a parameter of one def, or a keyword argument of one call, a second "
                         "time (CPython refuses it: decoding/repeated_names.py); it ends before that name",
    StopReason.BUDGET: "the latency budget ran out: the complete lines so far are offered, the rest is decoded in "
                       "the background (decoding/budget.py)",
}


@dataclass(frozen=True)
class Stop:
    """The completion ends: its first `cut` bytes (0 is the empty completion) are kept."""

    cut: int
    reason: StopReason


class Verdict(Enum):
    """The policy's answer after a token when it does not stop the completion."""

    CONTINUE = "continue"  # the completion goes on
    REJECT = "reject"  # the token ends the line where the file can't go on: roll it back, try another


Decision = Verdict | Stop


# ---------------------------------------------------------------------------- the policy

class StopPolicy:
    """Decides, after every accepted token, whether the completion is done (`Stop`), must go
    on (`Verdict.CONTINUE`) or took a token that ends it incompatibly (`Verdict.REJECT`), asking
    the request's `RestOfFile` whether the file stays valid and whether the text repeats it.

    Scanned bytes are `held + generated`: `held` is the open lexeme before the cursor (the
    scanner starts at a lexeme start), `generated` starts with the healed bytes (typed text
    the first tokens re-created). The completion proper starts `cursor` bytes in. `start`: where the answer's first code
    stands (`Start.NEXT_LINE`: the steering has it end the cursor's blank line first; a line end
    there is neither a stop nor a blank line)."""

    def __init__(self, rest: RestOfFile, scanner: LineScanner, held: bytes, heal: bytes, start_depth: int,
                 start: Start = Start.CURSOR_LINE, line_head: bytes = b"") -> None:
        self.rest = rest  # what stands after the cursor: validity, the echo rule, a line start's tail
        self.line_head = line_head  # the cursor's line before `held`, where repeated names are read from
        self.ctx = rest.ctx
        self.scanner = scanner
        self.held = held
        self.cursor = len(held) + len(heal)
        self.start_depth = start_depth  # bracket depth where `held` starts
        self.cursor_depth = rest.cursor_depth
        self.line_col = rest.line_col
        self.mode = rest.ctx.mode
        self.line_blank = rest.line_blank  # nothing but indentation before the cursor on its line
        self.body_from = self.cursor  # multi-line: the block's indentation is its first line's after this
        # the first line end that may end the answer: past the cursor's line when the answer ends that line first
        self.first_end = self.cursor + (start is Start.NEXT_LINE)

    def _ok(self, data: bytes, cut: int) -> bool:
        return self.rest.keeps_valid(data[self.cursor : cut])

    def after_token(self, generated: bytes) -> Decision:
        data = self.held + generated
        k = self.cursor
        if len(data) <= k:  # still re-creating typed text
            return Verdict.CONTINUE
        repeat = self._repeated_name(data)
        if repeat is not None:
            return self._before(data, repeat)
        scan = self.scanner.line_ends(data, self.start_depth)
        if scan is None:  # not Python: the first newline ends it
            i = data.find(b"\n", k)
            return Verdict.CONTINUE if i < 0 else Stop(i - k, StopReason.LINE_END)
        ends, bounds = scan
        ctx = self.ctx
        if not ctx.infix:
            echo = self._echo(data, ends, bounds, at_end=False)
            if echo is not None:
                return echo
        if ctx.infix:
            if any(e.cut >= k for e in ends) or data.find(b"\n", k) >= 0:
                return self.fallback(generated, StopReason.SUFFIX, at_end=False)
            return Verdict.CONTINUE
        if self._blank_so_far(data, k):
            return Verdict.CONTINUE if self.rest.compat is None else Verdict.REJECT
        if self.mode == "single":
            i = data.find(b"\n", k)
            if i >= 0 and self._inside_held_lexeme(i, ends, scan[1]):
                # a newline in a string or comment that began before the cursor ends the line
                return Stop(i - k, StopReason.LINE_END) if self._ok(data, i) else Verdict.REJECT
            for e in ends:
                if e.cut < self.first_end:
                    continue
                if e.depth == 0:
                    if self._ok(data, e.cut):
                        return Stop(e.cut - k, StopReason.LINE_END)
                    if self._opens_block(data, e.cut):
                        # a block opener: its body follows, then the completion ends
                        self.mode, self.body_from = "multi", e.cut
                        break
                    return Verdict.REJECT
                if 0 < e.depth <= self.cursor_depth and self._ok(data, e.cut):
                    # a newline inside the brackets open at the cursor, where the file's next lines
                    # go on inside them (a multi-line call, list, parameter list: the check reads
                    # them); whether the text after the cursor alone parses does not matter (a
                    # word cut at the cursor does not)
                    return Stop(e.cut - k, StopReason.LINE_END)
                # brackets the completion opened, which the file's next lines go on with
                in_own_brackets = e.depth > self.cursor_depth and ctx.continued
                if in_own_brackets and self._ok(data, e.cut):
                    return Stop(e.cut - k, StopReason.LINE_END)
            else:
                return Verdict.CONTINUE
        base = None
        # on an empty line the completion writes the next line of the cursor's block: its first
        # line end may already leave that block (a dedent below the cursor's line, or a blank
        # line: the function's `return` after a loop body, a new `def`)
        on_empty_line = self.line_blank and self.body_from == self.cursor
        for e in ends:
            if e.depth != 0 or e.end <= self.body_from:
                continue
            written = e.cut > k  # the line end is the completion's
            if base is None:
                if e.closed:
                    base = e
                    # a blank line, or a line dedented below the cursor's, ends the cursor's block
                    leaves_cursor_block = on_empty_line and written and (e.blank or e.col < self.line_col)
                    if leaves_cursor_block and self._ok(data, e.cut):
                        return Stop(e.cut - k, StopReason.BLOCK_END)
                continue
            leaves_body = (e.closed and e.col < base.col) or e.blank  # dedented below the body's first line, or blank
            if written and leaves_body:
                if self._ok(data, e.cut):
                    return Stop(e.cut - k, StopReason.BLOCK_END)
        return Verdict.CONTINUE

    def _repeated_name(self, data: bytes) -> int | None:
        """Where in `data` the completion wrote a parameter of one `def`, or a keyword of one call,
        a second time (`repeated_names`; read from the cursor's line), None where it did not: a
        name CPython refuses, which a small model's loop writes until its token limit."""
        return repeated_name_at(self.line_head, data, self.cursor)

    def _before(self, data: bytes, repeat: int) -> Stop:
        """The completion ends before the name it repeats at `repeat`: at the last line end before
        it where the file stays valid (not mid-line: `print` of `print(x, end=1, end=`), else
        empty, and the search goes on from that name (`request.search_again`)."""
        k = self.cursor
        scan = self.scanner.line_ends(data[:repeat], self.start_depth)
        ends = scan[0] if scan is not None else ()
        for e in sorted(ends, key=lambda e: e.cut, reverse=True):
            if e.cut >= self.first_end and e.depth <= self.cursor_depth and self._ok(data, e.cut):
                return Stop(e.cut - k, StopReason.REPEATED)
        return Stop(0, StopReason.REPEATED)

    def _echo(self, data: bytes, ends, bounds, at_end: bool) -> Stop | None:
        """The earliest valid stop where the generated text starts to repeat the text after the
        cursor (the file's next lines; infix: the rest of the cursor's line), if any."""
        k = self.cursor
        follow = self.rest.follow
        if self.ctx.infix:
            cuts = follow.rest_echoes(data, k, [b for b, _ in bounds])
        else:
            cuts = follow.line_echoes(data, k, [e.cut for e in ends], at_end)
        for cut in cuts:
            if self._ok(data, cut):
                return Stop(cut - k, StopReason.ECHO)
        return None

    def _blank_so_far(self, data: bytes, k: int) -> bool:
        """Nothing but whitespace after the cursor yet, and already a line ended where a
        statement was expected (an empty line) or a blank line: constrained decoding asks the
        model for code instead (an empty answer is the gap constraints close)."""
        tail = data[k:]
        if tail.strip(b" \t\r\n\f"):
            return False
        n = tail.count(b"\n") - (self.first_end - k)  # the cursor's line ended first: not a blank line
        if n >= 2:
            return True
        single_on_empty_line = self.mode == "single" and self.line_blank  # there one line end is a blank line
        return n == 1 and single_on_empty_line

    def _inside_held_lexeme(self, i: int, ends, bounds) -> bool:
        """Whether offset `i` lies in a lexeme that started before the cursor (not a newline)."""
        if any(e.cut <= i < e.end for e in ends):
            return False
        start = max((b for b, _ in bounds if b <= i), default=0)
        return start < self.cursor and start < len(self.held)

    def _opens_block(self, data: bytes, cut: int) -> bool:
        """Whether the line ending at `cut` opens a block (its body must follow)."""
        return opens_block(data[:cut].rsplit(b"\n", 1)[-1])

    def fallback(self, generated: bytes, reason: StopReason, at_end: bool) -> Stop:
        """The longest compatible end at or before the end of `generated`: at a line end, or
        (single-line and infix) at a lexeme boundary; `at_end` when the text may end as it is
        (the model ended it)."""
        data = self.held + generated
        k = self.cursor
        scan = self.scanner.line_ends(data, self.start_depth)
        if scan is None:
            cands = {k}
        else:
            ends, bounds = scan
            echo = self._echo(data, ends, bounds, at_end)
            if echo is not None:
                return echo
            cands = {e.cut for e in ends if e.cut >= k and e.depth == 0}
            if self.mode == "single" or self.ctx.infix:
                # not inside brackets the completion opened: the file's next lines can't close them
                cands |= {b for b, depth in bounds if b >= k and depth <= self.cursor_depth}
            cands.add(k)
            if at_end or self._inside_held_lexeme(len(data) - 1, ends, bounds):
                # the model ended it, or the cut falls inside a string that goes on in the file
                cands.add(len(data))
            if not self.ctx.infix and self.mode == "single":  # not past the line's end
                first = min((e.cut for e in ends if e.cut >= self.first_end and (e.depth == 0 or self.cursor_depth > 0)),
                            default=None)
                if first is not None:
                    cands = {c for c in cands if c <= first}
        for cut in sorted(cands, reverse=True)[:48]:
            if cut == k or self._ok(data, cut):
                return Stop(cut - k, reason)
        return Stop(0, reason)
