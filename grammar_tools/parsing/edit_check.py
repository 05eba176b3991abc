"""Checked before offered: whether an edit at a cursor leaves the document without a syntax
error it did not already have -- the whole rest of the file, read by resynchronisation.

An `EditCheck` holds one document split at a cursor (`before`, as the parser reads it, and
`after`) and answers for any edit there (`insert` in place of the first `replaced` bytes of
`after`) whether the edited document is as valid as the document was:

- the edited text is parsed from the cursor's lexeme on, through the insert and into the rest of
  the file, and must meet no error;
- at every line start in the rest of the file its configuration (state stacks, indentation,
  bracket depth; a lexeme starts there) is compared with the one the document's own parse has
  at the same place in that text (`_Reference`, read from the cursor as far as the checks ask,
  shared by all the checks of the cursor). Once they are the same, the two parses are the same
  from there to the end of the file: the edit is compatible, and the rest is not read;
- if they never meet, the edited text is read to its end, which must end the file.

The text after the edit stays as it was (the edit inserts, never rewrites): where the
document's parse reads without an error from the cursor to the first line start after the edit,
the edited parse must reach that very line start (a logical line starts there: the existing text
is not glued onto the edit's last statement) with the same blocks open (the same indentation
stack: not re-indented into a block of the edit's or out of its own) and the same brackets. An
edit that absorbs the existing line into its own statement (`answer = ` before `result = f()`)
or re-indents it is refused like a syntax error. (Where the document has an error before
that line or in its statement, the edit may have to mend it, a block header whose body the line
is, a docstring whose opening line was cut: the usual check alone applies.) Which header a block at the same depth has is not compared: a line written
above `        x += 1` at a shallower depth may open the block that line is then in (`if y:`),
as the line a cut removed did; and on an empty line indented less deep than the line below it,
the edit may make that line the body of a header of its own (the blocks are not compared).

Stacks are compared structurally, stopping at shared nodes: both parses start from the same
configuration at the cursor, so a comparison after a statement usually stops after one or two
nodes. A statement usually brings the two parses together at its end, so a check reads the
insert and a line or two after it, not the file.

A document that already has a syntax error after the cursor (the statement being typed usually
does) is read past it the way `_Reference._recover` says: the broken statement is taken as
`pass`, and parsing goes on at the next line indented no deeper than it. The edited text must
have no error before it meets that parse; the errors after the meeting point are the same in
both. Errors before the cursor are the caller's (`incremental.parse_prefix` rewrites the text before
the cursor so that it parses; give that text as `before`).

Python's compiler rejects a few things the grammar accepts (`f() = 1`, `def f(a=1, b)`):
this module knows only the grammar.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from .incremental import ParseError, PrefixParser, indent_width, same_configs
from ..lexing.lexer_automaton import START, LexError
from .lookahead import accepted
from .recognizer import Node


STATEMENTS_KEPT = 8  # statement starts the reference's recovery may take as `pass` (the last ones)
LOOKAHEAD_LINES = 3  # statements a recovery's restart must read without an error to be taken at once


@dataclass(frozen=True)
class Verdict:
    """What a check found."""

    ok: bool
    error: int | None = None  # offset in the edited text of its first error (when not ok)
    synced: int | None = None  # offset in the edited text where its parse met the document's
    lexemes: int = 0  # lexemes read after the cursor's (the check's work)


class _Reference:
    """The document's own parse from the cursor on, read as far as the checks ask: the
    configurations where each line's code starts (the end of a `_NEWLINE` lexeme), read past
    syntax errors (`_recover`)."""

    def __init__(self, parser: PrefixParser, data: bytes, pos: int, configs, state, line, statements) -> None:
        self.parser = parser
        self.data = data
        self.lines: dict[int, tuple[Node, ...]] = {}
        self.statements: list[int] = []  # where statements start (line starts outside brackets), in order
        self.errors: list[int] = []  # where the document's parse met errors (before recovering)
        self.ends = False  # the parse reached the end of the text, where the file may end
        self.reached = pos  # the parse has read the text up to here
        self._line = line  # (offset, configs) where the line being read starts
        self._statements = list(statements)  # the last few statement starts: (offset, configs)
        self._last = configs  # the configurations after the last lexeme read
        self._restart = -1  # where the last recovery restarted (the next one restarts after it)
        self._run = parser.steps(data, configs, pos, state, ends=True)
        self._origin = pos  # where the parse starts
        self._open_to_end: dict[int, bool] = {}  # `_stays_open`, by where the parse had read to

    def at(self, offset: int) -> tuple[Node, ...] | None:
        """The configurations where a line's code starts at `offset` (None: no line of the
        document's parse starts there)."""
        while self.reached < offset and self._run is not None:
            self._advance()
        return self.lines.get(offset)

    def first_line(self, offset: int, reach: int | None = None) -> tuple[int, tuple[Node, ...]] | None:
        """The first line start at or after `offset` in the document's parse and its
        configurations, when the document reads to it and through its statement without an
        error (None: it does not, or no line starts after `offset`): the existing text an edit
        at `offset` must leave as it is (a statement longer than `reach` bytes: judged by those)."""
        while self._run is not None and (self._line[0] < offset or self._line[0] <= self._origin):
            self._advance()  # (a line the parse read, not the one it started in)
        at, configs = self._line
        if at < offset or at <= self._origin:
            return None
        limit = len(self.data) if reach is None else at + reach
        while self._run is not None and self.reached < limit and (not self.statements or self.statements[-1] <= at):
            self._advance()
        k = bisect.bisect_right(self.statements, at)
        until = self.statements[k] if k < len(self.statements) else self.reached
        if any(e <= until for e in self.errors) or (k == len(self.statements) and self._run is None and not self.ends):
            return None  # an error, or the file can't end in that statement (brackets left open)
        return at, configs

    def statement_ends_clean(self, offset: int, reach: int | None = None) -> bool:
        """Whether the statement that goes on at the line start `offset` (inside brackets) ends
        without an error: at its end (the next line start outside brackets), or at the end of
        the file, which must end there. With `reach`, a statement still going on `reach` bytes
        after `offset` (a table of thousands of lines) is judged by those bytes: no error in
        them (the two parses are the same from `offset` on, so whatever comes later is the
        document's own), and they are all that is read."""
        limit = len(self.data) if reach is None else offset + reach
        while self._run is not None and self.reached < limit and (not self.statements or self.statements[-1] < offset):
            self._advance()
        k = bisect.bisect_left(self.statements, offset)
        if k < len(self.statements):
            until = self.statements[k]
        elif self.reached >= len(self.data):
            until = len(self.data)
            if not self.ends:
                return False
        else:  # still inside the statement at `limit`
            if self._stays_open():
                return False  # a bracket left open to the end of the file shows only there
            until = self.reached
        return not any(offset <= e <= until for e in self.errors)

    def _stays_open(self) -> bool:
        """Whether a bracket open where the parse has read to stays open to the end of the file:
        the rest of the text lexed, brackets counted, nothing parsed (a few milliseconds for a
        40 KB table; once per place). A cut that removed a table entry's closing brace leaves
        the table's statement going on to the end of the file, where CPython finds it never
        closed: no error within a check's reach shows it."""
        at = self.reached
        if at not in self._open_to_end:
            self._open_to_end[at] = self.parser.lexer.brackets_stay_open(self.data, at, self._last[0].depth)
        return self._open_to_end[at]

    def clean_through_shallow_line(self, offset: int, col: int, met: int) -> bool:
        """Whether the text from `met` (a line start at or after `offset`) reads without an
        error through the first logical line from `offset` on whose indentation is `col` or
        less (the rest of the block a cut at a line indented `col` may have broken: its body
        left hanging, its `else:` left without its `if`); the file, if it ends before such a
        line, must end cleanly."""
        data = self.data
        k = bisect.bisect_left(self.statements, offset)
        while True:
            while self._run is not None and len(self.statements) <= k + 1:
                self._advance()
            if k >= len(self.statements):
                until = len(data)
                break
            at = self.statements[k]
            if indent_width(data[data.rfind(b"\n", 0, at) + 1 : at])[0] <= col:
                while self._run is not None and self.statements[-1] <= at:
                    self._advance()
                j = bisect.bisect_right(self.statements, at)  # (a restart there repeats `at`)
                until = self.statements[j] if j < len(self.statements) else len(data)
                break
            k += 1
        if until == len(data) and not self.ends:
            return False
        return not any(met <= e < until for e in self.errors)

    def _advance(self) -> None:
        try:
            end, configs, newline = next(self._run)
        except StopIteration as stop:
            self.ends = stop.value[2]
            self._run, self.reached = None, len(self.data)
            return
        except (ParseError, LexError) as e:
            self.errors.append(e.pos)
            self._recover(e.pos)
            return
        self.reached = end
        self._last = configs
        if newline:
            self._new_line(end, configs)

    def _new_line(self, at: int, configs) -> None:
        self.lines.setdefault(at, configs)  # a restart after an error there: its parse came first
        self._line = (at, configs)
        if configs[0].depth == 0:
            self.statements.append(at)
            self._statements = self._statements[1 - STATEMENTS_KEPT :] + [(at, configs)]

    def _restart_at(self, at: int, configs) -> None:
        configs = tuple(configs)
        self._new_line(at, configs)
        self.reached = self._restart = at
        self._last = configs
        self._run = self.parser.steps(self.data, configs, at, START, ends=True)

    # ------------------------------------------------------------------ recovery

    def _recover(self, pos: int) -> None:
        """Go on after an error at `pos`, as if the document were fixed in the least way that
        reads on: inside brackets, without the broken line; a block header left without its
        body, with `pass` for a body; else the statement it broke (or one that encloses it)
        taken as `pass`. Which fix is taken only decides how soon checks meet this parse, never
        a verdict: a check passes only where the edited text parses."""
        if self._drop_line(pos) or self._empty_block(pos) or self._statement_as_pass(pos):
            return
        self._run, self.reached = None, len(self.data)

    def _code_lines(self, pos: int):
        """(code start, col, altcol) of the lines after the one holding `pos` (or from it, when
        nothing but indentation comes before `pos` on it) that hold code, past the last restart."""
        data = self.data
        n = len(data)
        line = data.rfind(b"\n", 0, pos) + 1
        if data[line:pos].strip(b" \t\f"):  # the error is not the first thing on its line
            nl = data.find(b"\n", pos)
            line = n if nl < 0 else nl + 1
        while line < n:
            nl = data.find(b"\n", line)
            eol = n if nl < 0 else nl
            text = data[line:eol]
            code = text.lstrip(b" \t\f")
            at = line + len(text) - len(code)
            if code.strip() and not code.startswith(b"#") and at > self._restart:
                col, alt = indent_width(text)
                yield at, col, alt
            line = eol + 1

    def _drop_line(self, pos: int) -> bool:
        """Inside brackets (a line of a long call, list or table): go on at the next line as if
        the broken line were not there, when that line goes on inside them (it is indented
        deeper than the statement, or closes a bracket)."""
        start, configs = self._line
        if configs[0].depth == 0 or start > pos:
            return False
        top = configs[0].indent
        block = top[0] if top else 0
        for at, col, _ in self._code_lines(pos):
            if col > block or self.data[at : at + 1] in (b")", b"]", b"}"):
                self._restart_at(at, configs)
                return True
            return False
        return False

    def _empty_block(self, pos: int) -> bool:
        """A block header whose body is missing (its only line was cut; the error is the first
        code of the next line): `pass` for a body, then that line."""
        data = self.data
        line = data.rfind(b"\n", 0, pos) + 1
        if pos <= self._restart or data[line:pos].strip(b" \t\f"):
            return False
        rec = self.parser.recognizer
        pass_id = rec.grammar.term_id["PASS"]
        col, alt = indent_width(data[line:pos])
        out = []
        for c in self._last:
            if not accepted(rec, c) >> rec.INDENT & 1:
                continue
            for t in (rec.INDENT, pass_id, rec.NEWLINE):
                c = c and rec.feed(c, t)
            c = c and rec.feed_indentation(c, col, alt)
            if c is not None:
                out.append(c)
        if not out:
            return False
        self._restart_at(pos, out)
        return True

    def _statement_as_pass(self, pos: int) -> bool:
        """The statement the error broke, or failing that one that encloses it, taken as `pass`:
        the parse restarts at the first line from the error's on that is indented no deeper
        than that statement and can follow it. A restart whose next lines read into an error at
        once (`pass` for the body line before an `except` left without its `try` clause) gives
        way to an enclosing statement's; if every one does, the first is taken."""
        rec = self.parser.recognizer
        pass_id = rec.grammar.term_id["PASS"]
        first = None
        for _, start_configs in reversed(self._statements):
            top = start_configs[0].indent
            limit = top[0] if top else 0
            after_pass = [n for n in (rec.feed(c, pass_id) for c in start_configs) if n is not None]
            after_pass = [n for n in (rec.feed_newline(c) for c in after_pass) if n is not None]
            if not after_pass:
                continue  # `pass` can't stand there (between `try` and `except`): an enclosing one
            for at, col, alt in self._code_lines(pos):
                if col > limit:
                    continue
                configs = [n for n in (rec.feed_indentation(c, col, alt) for c in after_pass) if n is not None]
                if configs:
                    if self._reads_on(at, configs):
                        self._restart_at(at, configs)
                        return True
                    first = first or (at, configs)
                break  # that line can't follow this statement: try an enclosing one
        if first is not None:
            self._restart_at(*first)
            return True
        return False

    def _reads_on(self, at: int, configs) -> bool:
        """Whether a parse restarted at `at` reads its first `LOOKAHEAD_LINES` statements (or to
        the end of the text) without an error."""
        lines = 0
        try:
            for _, c, newline in self.parser.steps(self.data, configs, at, START):
                if newline and c[0].depth == 0:
                    lines += 1
                    if lines >= LOOKAHEAD_LINES:
                        return True
        except (ParseError, LexError):
            return False
        return True


def same_layout(a, b) -> bool:
    """Whether two configuration sets open the same blocks (indentation stacks) and brackets:
    the existing text after an edit stands where it stood (its statement may still differ in
    what may follow it: an `else:` the document allowed after a block just closed)."""
    return {(c.depth, c.indent) for c in a} == {(c.depth, c.indent) for c in b}


class EditCheck:
    """Whether edits at one cursor keep a document free of new syntax errors (see the module
    docstring). `before` is the text before the cursor as the parser reads it (it must parse:
    raises ParseError/LexError otherwise), `after` the rest of the document. Verdicts are
    memoized: a stop policy asks again about the same cuts as a completion grows.

    `strict`: an error the document already had after the point where the edited parse met
    the document's (outside brackets), up to the end of the first logical line after the edit
    indented no deeper than the cursor's line, counts as the edit's: the edit must mend what a
    cut there broke (a statement whose first line was cut away, a block header whose body or
    `else:` is left hanging). Errors further on are still the document's own.

    `reach` bounds a check's cost: an edited parse that has not met the document's within
    `reach` bytes after the edit (a string opened that swallows the file, brackets left open)
    is refused without reading further (a refusal is always safe; the edits that need more are
    rare); and where it met the document's parse inside brackets, the statement it is in is read
    at most `reach` bytes further for errors (`_Reference.statement_ends_clean`: from the
    meeting point the two parses are one, so the edit adds no error past them either)."""

    def __init__(self, parser: PrefixParser, before: bytes, after: bytes, strict: bool = False,
                 reach: int | None = None) -> None:
        self.parser = parser
        self.strict = strict
        self.reach = reach
        self.before = before
        self.after = after
        st = parser.parse(before)
        if st.lexeme_start == 0:  # from the document's start (its virtual newline)
            self._origin = (0, (parser.recognizer.initial(),), None)
        else:
            self._origin = (st.lexeme_start, st.configs, START)
        pos, configs, state = self._origin
        line, statements = parser.restart_points(pos, STATEMENTS_KEPT)
        self.reference = _Reference(parser, before + after, pos, configs, state, line, statements)
        self._known: dict[tuple[bytes, int], Verdict] = {}
        self._kept: dict[int, tuple[int, tuple[Node, ...]] | None] = {}  # per `replaced`: the existing text's first line
        line = before[before.rfind(b"\n") + 1 :]
        self._col = indent_width(line)[0]  # the cursor's line's indentation (for `strict`)
        self.checks = 0  # edits checked (not from the memo)

    def ok(self, insert: bytes, replaced: int = 0) -> bool:
        return self.check(insert, replaced).ok

    def check(self, insert: bytes, replaced: int = 0) -> Verdict:
        """The verdict for `insert` in place of the first `replaced` bytes after the cursor."""
        key = (insert, replaced)
        known = self._known.get(key)
        if known is None:
            known = self._known[key] = self._check(insert, replaced)
        return known

    def _layout_kept(self, at: int) -> bool:
        """Whether the existing line whose code starts at `at` must keep its blocks: always, but
        below an empty cursor line indented less deep than it (a blank line the user opened
        above deeper lines), where the edit may write the header those lines then belong to,
        as the line a cut removed did."""
        data = self.reference.data
        if self.after.split(b"\n", 1)[0].strip(b" \t\f\r") or self.before[self.before.rfind(b"\n") + 1 :].strip():
            return True
        return indent_width(data[data.rfind(b"\n", 0, at) + 1 : at])[0] <= self._col

    def _existing_line(self, replaced: int) -> tuple[int, tuple[Node, ...]] | None:
        """Where the text after the edit (past the `replaced` bytes) starts its first line in
        the document, and the configurations there, when the document reads to it cleanly."""
        if replaced not in self._kept:
            self._kept[replaced] = self.reference.first_line(len(self.before) + replaced, self.reach)
        return self._kept[replaced]

    def _check(self, insert: bytes, replaced: int) -> Verdict:
        self.checks += 1
        data = self.before + insert + self.after[replaced:]
        edit_end = len(self.before) + len(insert)
        cut_short = self.reach is not None and len(data) > edit_end + self.reach
        if cut_short:
            data = data[: edit_end + self.reach]
        shift = len(insert) - replaced  # an offset after the edit minus the document's same place
        pos, configs, state = self._origin
        parser = self.parser
        kept = self._existing_line(replaced)
        run = parser.steps(data, configs, pos, state, ends=True)
        n = 0
        try:
            while True:
                end, configs, newline = next(run)
                n += 1
                if newline and end >= edit_end:
                    if kept is not None and end - shift >= kept[0]:
                        if end - shift != kept[0] or (self._layout_kept(kept[0]) and not same_layout(configs, kept[1])):
                            return Verdict(False, error=end, lexemes=n)  # the existing text rewritten
                        kept = None  # met it: the usual check from here
                    ref = self.reference.at(end - shift)
                    if ref is not None and same_configs(configs, ref):
                        # one parse from here; inside brackets, the statement the edit is in
                        # must still end cleanly (the document's own may not: its end was cut)
                        if configs[0].depth == 0:
                            clean = not self.strict or self.reference.clean_through_shallow_line(
                                len(self.before) + replaced, self._col, end - shift)
                        else:
                            clean = self.reference.statement_ends_clean(end - shift, self.reach)
                        if clean:
                            return Verdict(True, synced=end, lexemes=n)
                        return Verdict(False, error=end, synced=end, lexemes=n)
        except StopIteration as stop:
            ends = stop.value[2]
        except (ParseError, LexError) as e:
            return Verdict(False, error=e.pos, lexemes=n)
        if cut_short or kept is not None:  # not met within reach, or the existing text's line never reached
            return Verdict(False, error=len(data), lexemes=n)
        if ends:
            return Verdict(True, lexemes=n)
        return Verdict(False, error=len(data), lexemes=n)
