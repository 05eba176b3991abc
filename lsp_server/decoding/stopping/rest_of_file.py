"""The rest of the file (the text after the cursor), built once per request: every part of a
request that must respect what already stands after the cursor asks this one object,
`RestOfFile`, and what it is made of:

- what surrounds the cursor (`CursorContext`, `cursor_context`): the mode (single-line or
  multi-line), whether code follows on the cursor's line (infix) or the cursor is at its start
  (lines: the answer is whole lines above it), the auto-closed brackets after the cursor, and
  whether the next line of code continues the cursor's statement (deeper);
- may the completion stop here, and does the file stay valid with it (`keeps_valid`: the whole
  rest of the file read by `Compatibility` over `grammar_tools.parsing.edit_check.EditCheck`, not
  a window of the next lines, a file that already has errors after the cursor judged by "no new
  error"; the existing text kept intact: not glued onto, not re-indented);
- does it repeat what follows (`follow`, `FollowingText`: the echo rule; `changes_nothing`: an
  answer that is what its replace range already holds);
- what is offered for a cut of the generated text (`offered`);
- the line ends of generated text (`LineScanner`), found by lexing it with the grammar's lexer
  automaton (never a regex guess): newlines inside strings, brackets or after a backslash are
  not line ends.

The echo rule: a completion that writes the file's next line again (an `else:` body that
follows, the function's `return` after the cursor's loop, the closing line of a call) or the
rest of the cursor's line that it must join is valid Python, so the grammar alone never stops
it. The generated text is compared with the following text: the file's next non-blank lines and
the rest of the cursor's line (when kept), without surrounding whitespace. The stop policy stops
at such a cut only where the file stays valid there (the grammar decides: a line that repeats
the next one where the completion could not stop before it, e.g. a block's only statement, is
kept).

At a line start (the cursor at or inside the leading whitespace of a non-blank line) an answer
is whole lines: the existing line moves down with its own text and indentation. The model
writes the lines; `tail` (a newline, then the part of the line's indentation before the cursor)
ends every non-empty answer, in the check and in what is offered, so that whatever the model
wrote the existing line stands after it as it stood.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, replace
from enum import Enum

from grammar_tools.lexing.lexer_automaton import START, LexError, LexerAutomaton
from grammar_tools.parsing.edit_check import EditCheck
from grammar_tools.parsing.incremental import PrefixParser, indent_width, newline_width


# ---------------------------------------------------------------------------- the cursor's context

CLOSERS = frozenset(")]}\"'")
_OPENER_END = re.compile(rb":[ \t]*(#[^\n]*)?\r?$")


def line_indent(line: str) -> int:
    """The column (`col`) where a line's text starts."""
    return indent_width(line.encode())[0]


def opens_block(line: bytes) -> bool:
    """Whether `line` (one physical line, no newline) ends like a block header: a colon, then
    at most a comment (its body must follow). The one block-opener rule: the cursor's context
    and the stop policy's lines ask it."""
    return bool(_OPENER_END.search(line))


class Start(Enum):
    """Where an answer at a line start writes its first code."""

    CURSOR_LINE = "cursor line"  # on the cursor's line, after the blanks before it
    NEXT_LINE = "next line"  # on a line of its own: the answer ends the cursor's line first (its indentation stays, blank)


@dataclass(frozen=True)
class CursorContext:
    """What surrounds the cursor, as far as stopping is concerned."""

    mode: str  # "single" | "multi"
    infix: bool  # the rest of the line holds code the completion must join
    covered: str  # auto-closed brackets/quotes after the cursor that the completion supplies
    continued: bool = False  # the next line of code is indented deeper than the cursor's statement
    lines: bool = False  # the cursor is at or inside the leading whitespace of a non-blank line: insert whole lines above it


def continues_deeper(text: str, indent: int) -> bool:
    """Whether the first line of code after the first line of `text` (what follows the
    completion) is indented deeper than `indent` (the cursor's statement): its continuation
    lines, or the body of a block the completion must open."""
    for ln in text.split("\n")[1:]:
        s = ln.strip()
        if s and not s.startswith("#"):
            return line_indent(ln) > indent
    return False


def cursor_context(before: str, after: str, mode: str = "auto") -> CursorContext:
    nl = after.find("\n")
    rest = after if nl < 0 else after[:nl]
    stripped = rest.strip()
    covered = ""
    infix = False
    line_before = before[before.rfind("\n") + 1 :]
    if stripped and not line_before.strip():
        # a line start of existing code (its closing bracket too: not auto-closed, the line's own)
        return CursorContext("single", False, "", continues_deeper(after, line_indent(line_before)), lines=True)
    if stripped and all(ch in CLOSERS or ch in " \t" for ch in stripped):
        covered = rest[: len(rest.rstrip())]
    elif stripped:
        infix = not stripped.startswith("#")
    # the statement at the cursor is indented as its line (or up to the cursor on a blank line)
    continued = continues_deeper(after[len(covered) :], line_indent(line_before))
    if mode == "auto":
        mode = "single"
        if not infix and not rest.strip():
            if opens_block(line_before.encode()):
                mode = "multi"
            elif not line_before.strip():
                above = [ln for ln in before.split("\n")[:-1][-50:] if ln.strip() and not ln.lstrip().startswith("#")]
                inside_block = bool(line_before) or (above and opens_block(above[-1].encode()))
                mode = "multi" if inside_block else "single"
    if infix:
        mode = "single"
    return CursorContext(mode, infix, covered, continued)


# ---------------------------------------------------------------------------- the echo rule

ECHO_LINES = 64  # the file's next lines compared, at most
_BLANKS = b" \t\r\f\n"


@dataclass(frozen=True)
class FollowingText:
    """What the file has after the cursor, as an echo would repeat it."""

    line_before: bytes  # the cursor's line before the cursor (the completion's first line starts it)
    line_rest: bytes  # the rest of the cursor's line that the completion joins (infix), stripped; b"" if none
    lines: tuple[bytes, ...]  # the next non-blank lines after the cursor's line, stripped

    def line_echoes(self, data: bytes, cursor: int, cuts: list[int], at_end: bool) -> list[int]:
        """The cuts (offsets into `data`, the generated text starting at `cursor`; `cuts` are
        its line ends) after which every complete non-blank line of the generated text equals
        the file's next lines in order, at least one line (the last, unfinished one counts
        when the text ends there: `at_end`); earliest first. The cursor is a cut too: its
        line is read whole (the text before the cursor, then the completion's first line)."""
        if not self.lines:
            return []
        out = []
        if _repeats(self.line_before + data[cursor:], self.lines, at_end):
            out.append(cursor)
        for cut in sorted(set(cuts)):
            if cut >= cursor and _repeats(data[cut:], self.lines, at_end):
                out.append(cut)
        return out

    def rest_echoes(self, data: bytes, cursor: int, bounds: list[int]) -> list[int]:
        """The lexeme boundaries (`bounds`, offsets into `data`) from which the generated line
        (to its first newline) is the rest of the cursor's line again, earliest first: the
        completion must join that rest, not write it."""
        if not self.line_rest:
            return []
        nl = data.find(b"\n", cursor)
        end = len(data) if nl < 0 else nl
        return [b for b in sorted(set(bounds)) if cursor <= b <= end and data[b:end].strip(_BLANKS) == self.line_rest]


def _repeats(text: bytes, lines: tuple[bytes, ...], at_end: bool) -> bool:
    parts = text.split(b"\n")
    done = [p.strip(_BLANKS) for p in (parts if at_end else parts[:-1])]
    done = [p for p in done if p]
    return 0 < len(done) <= len(lines) and all(a == b for a, b in zip(done, lines))


def following_text(before: str, after: str, infix: bool, lines_start: bool = False) -> FollowingText:
    """The text after the cursor as `FollowingText` (`infix`: the completion joins the rest of
    the cursor's line; `lines_start`: the cursor is at the start of the existing line, which is
    then the first of the next lines)."""
    nl = -1 if lines_start else after.find("\n")
    rest = after if nl < 0 else after[:nl]
    lines: list[bytes] = []
    if nl >= 0 or lines_start:
        for line in after[nl + 1 :].split("\n"):
            s = line.strip()
            if s:
                lines.append(s.encode())
                if len(lines) >= ECHO_LINES:
                    break
    line_before = before[before.rfind("\n") + 1 :].encode()
    return FollowingText(line_before, rest.strip().encode() if infix and not lines_start else b"", tuple(lines))


# ---------------------------------------------------------------------------- the whole-file check

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


# ---------------------------------------------------------------------------- the line ends of generated text

_BLANK_LINE = re.compile(rb"\n[ \t\f]*\r?\n")


@dataclass(frozen=True)
class LineEnd:
    cut: int  # offset of the newline in the scanned bytes (text before it stays)
    end: int  # end of the newline lexeme (indentation of the next line included)
    closed: bool  # the next line's first non-blank character has arrived
    col: int  # that line's indentation (when closed)
    blank: bool  # a blank line lies between
    depth: int  # bracket depth at the newline (0: a logical line end)


class LineScanner:
    """Finds the newlines of generated text by lexing it (strings, brackets, backslash
    continuations and comments as the grammar has them)."""

    def __init__(self, lexer: LexerAutomaton) -> None:
        g = lexer.grammar
        self.lexer = lexer
        tid = g.term_id
        self.nl = tid["_NEWLINE"]
        self.opens = {tid[n] for n in ("LPAR", "LSQB", "LBRACE")}
        self.strings = {i for n, i in tid.items() if "STRING" in n or "BYTES" in n}
        self.closes = {tid[n] for n in ("RPAR", "RSQB", "RBRACE")}

    def _lex(self, data: bytes):
        """(lexemes, state, start) of `data` lexed from a lexeme start; None if it does not lex."""
        try:
            return self.lexer.lex(data, START, 0)
        except LexError:
            return None

    def line_ends(self, data: bytes, depth: int = 0) -> tuple[list[LineEnd], list[tuple[int, int]]] | None:
        """The newlines of `data` (which starts at a lexeme start, at bracket `depth`), and the
        lexeme boundaries with the bracket depth there; None if the bytes don't lex
        (unconstrained output)."""
        lexed = self._lex(data)
        if lexed is None:
            return None
        lexemes, state, start = lexed
        acc = self.lexer.accepting_ids
        ends: list[LineEnd] = []
        bounds = [(0, depth)]
        nl, opens, closes = self.nl, self.opens, self.closes
        for a, b, d in lexemes:
            terms = acc[d]
            if nl in terms:
                self._newline(ends, data, a, b, True, depth)
            elif len(terms) == 1:
                t = next(iter(terms))
                if t in opens:
                    depth += 1
                elif t in closes:
                    depth = max(depth - 1, 0)
            bounds.append((b, depth))
        if nl in self.lexer.possible_ids[state]:
            self._newline(ends, data, start, len(data), False, depth)
        return ends, bounds

    def string_cuts(self, data: bytes) -> list[int]:
        """Offsets inside the string literals of `data` (from a lexeme start) where a cut leaves
        the string open for the file's own text to close: before each newline in it, and
        before its closing quotes (a docstring's first line written whole and closed where the
        file's docstring goes on)."""
        lexed = self._lex(data)
        if lexed is None:
            return []
        lexemes, state, start = lexed
        acc = self.lexer.accepting_ids
        out = []
        spans = [(a, b, True) for a, b, d in lexemes if self.strings.intersection(acc[d])]
        if self.lexer.accepting[state] and self.strings.intersection(acc[state]):  # one ends the text
            spans.append((start, len(data), True))
        elif self.inside_string(data):  # a string still open at the end
            spans.append((start, len(data), False))
        for a, b, closed in spans:
            text = data[a:b]
            out += [a + i for i in range(len(text)) if text[i : i + 1] == b"\n"]
            if closed:
                out.append(b - (3 if text.endswith((b'"""', b"'''")) else 1))
        return out

    def inside_string(self, data: bytes) -> bool:
        """Whether `data` (from a lexeme start) ends inside an unterminated string literal."""
        lexed = self._lex(data)
        if lexed is None:
            return False
        state = lexed[1]
        possible = self.lexer.possible_ids[state]
        return bool(possible) and set(possible) <= self.strings and not self.lexer.accepting[state]

    def depth_after(self, data: bytes, depth: int = 0) -> int:
        """Bracket depth at the end of `data` (from a lexeme start at `depth`)."""
        lexed = self._lex(data)
        if lexed is None:
            return depth
        lexemes, state, _ = lexed
        acc = self.lexer.accepting_ids
        states = [d for _, _, d in lexemes]
        if data and self.lexer.accepting[state]:
            states.append(state)
        for d in states:
            terms = acc[d]
            if len(terms) == 1:
                t = next(iter(terms))
                depth += (t in self.opens) - (t in self.closes)
        return max(depth, 0)

    @staticmethod
    def _newline(ends, data, a, b, closed, depth) -> None:
        lexeme = data[a:b]
        i = lexeme.find(b"\n")
        if i < 0:  # a comment so far
            return
        if i > 0 and lexeme[i - 1 : i] == b"\r":
            i -= 1
        col = newline_width(lexeme)[0] if closed else 0
        ends.append(LineEnd(a + i, b, closed, col, bool(_BLANK_LINE.search(lexeme)), depth))


# ---------------------------------------------------------------------------- the rest of the file

def offered_text(completion: bytes, cut: int, strip: bool) -> bytes:
    """The first `cut` bytes of `completion`, trailing blanks stripped unless it joins code."""
    text = completion[:cut]
    return text.rstrip(b" \t") if strip else text


@dataclass(frozen=True)
class RestOfFile:
    """What stands after the cursor, as the request's steps ask about it (module docstring)."""

    ctx: CursorContext
    follow: FollowingText  # the text after the cursor as an echo would repeat it
    compat: Compatibility | None  # None: unconstrained (no check of the file)
    tail: bytes  # b"" or, at a line start, what ends every non-empty answer (b"\n" and the indentation before the cursor)
    line_col: int  # the cursor's line's indentation
    line_blank: bool  # nothing but indentation before the cursor on its line
    cursor_depth: int  # bracket depth at the cursor
    code_col: int = 0  # at a line start, the column where the existing line's code starts

    @classmethod
    def build(cls, before: str, after: str, mode: str, scanner: LineScanner, held: bytes, heal: bytes,
              depth: int, parser: PrefixParser | None = None, parsed_before: bytes = b"") -> RestOfFile:
        """The rest of the file after `before` (the document split at the cursor; `mode`: auto |
        single | multi). `held` is the open lexeme before the cursor (which starts at bracket
        `depth`), `heal` the typed bytes the first tokens re-create. With a `parser`
        (constrained decoding), every answer must keep the file valid: `parsed_before` is the
        text before the cursor as the parser reads it (recovery rewrites a broken line); the
        check reads the whole rest of the file (raises ParseError/LexError when
        `parsed_before` does not parse)."""
        ctx = cursor_context(before, after, mode)
        cursor_depth = scanner.depth_after(held + heal, depth)
        in_brackets_or_string = cursor_depth > 0 or scanner.inside_string(held + heal)
        if ctx.mode == "multi" and in_brackets_or_string:
            # inside brackets or a string, lines end where the physical line does
            ctx = replace(ctx, mode="single")
        line_before = before[before.rfind("\n") + 1 :]
        compat = None
        if parser is not None:
            compat = Compatibility(parser, parsed_before, after.encode(), ctx.covered.encode())
        tail = ("\n" + line_before).encode() if ctx.lines else b""
        code_col = line_indent(line_before + after.split("\n", 1)[0]) if ctx.lines else 0
        return cls(ctx, following_text(before, after, ctx.infix, ctx.lines), compat, tail,
                   line_indent(line_before), not line_before.strip(), cursor_depth, code_col)

    @property
    def inserts_lines(self) -> bool:
        """The cursor is at a line start of existing code: an answer is whole lines above it."""
        return self.ctx.lines

    def keeps_valid(self, completion: bytes) -> bool:
        """Whether the file stays valid, and the existing text intact, with `completion` (the
        generated bytes after the cursor; `tail` appended when not empty) at the cursor."""
        blank_lines_above = self.tail and completion and not completion.strip()
        if blank_lines_above:  # above the existing line: nothing to offer
            return False
        if self.compat is None:
            return True
        return self.compat.ok(completion + self.tail if completion else b"")

    def changes_nothing(self, text: bytes) -> bool:
        """Whether `text`, offered in place of the auto-closed brackets/quotes it supplies again,
        is what that range already holds (`))` over the auto-closed `))`, the rest of a
        suggestion typed up to its closers): it repeats the text after the cursor, an echo."""
        return bool(text) and text == self.ctx.covered.encode()

    def offered(self, completion: bytes, cut: int) -> bytes:
        """What is offered for the first `cut` bytes of `completion`: trailing blanks stripped
        unless the completion joins code, `tail` after a non-empty answer."""
        text = offered_text(completion, cut, not self.ctx.infix)
        if self.tail and not text.strip():
            return b""
        return text + self.tail if text else text

    def answer(self, completion: bytes, cut: int) -> tuple[str, bool]:
        """The answer's text for the first `cut` bytes of `completion` (`offered`, decoded), and
        whether it changes nothing (`changes_nothing`: then its text is empty)."""
        text = self.offered(completion, cut)
        if self.changes_nothing(text):
            return "", True
        return text.decode("utf-8", errors="replace"), False

    @property
    def check_ms(self) -> float:
        """Time spent checking edits against the whole file (set-up and checks)."""
        return round(self.compat.ms, 2) if self.compat is not None else 0.0
