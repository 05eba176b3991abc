"""Where a completion ends: grammar-aware stopping and compatibility with the rest of the file.

The cursor's surroundings decide the policy (`CursorContext`):

- single-line (cursor mid-line, or a line that opens no block): stop at the end of the logical
  line, i.e. at the first newline at bracket depth 0; the line is complete there by construction
  (the mask only lets a newline through where brackets are balanced);
- multi-line (after a block opener `:`, or on an empty line inside a block): stop when a line
  dedents below the block the completion started in, or at a blank line after complete code;
- infix (the rest of the line holds code other than closing brackets/quotes): the completion must
  join that code; it ends at the longest point where completion + rest of line parses.

Whatever the policy, a stop is taken only where the file stays valid: the parser must be able to
continue from the end of the completion into the text that follows (the rest of the line after
the auto-closed brackets the completion supplies again, then the next line's indentation and
first word). `LineScanner` finds the line ends by lexing the completion with the grammar's lexer
automaton (never a regex guess): newlines inside strings, brackets or after a backslash are not
line ends.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from grammar_tools.incremental import ParseError, PrefixParser, newline_width
from grammar_tools.lexer_automaton import START, LexError, LexerAutomaton

CLOSERS = frozenset(")]}\"'")
_FIRST_WORD = re.compile(r"[ \t\f]*(?:[A-Za-z_][A-Za-z0-9_]*|[0-9]+|\S)")
_BLANK_LINE = re.compile(rb"\n[ \t\f]*\r?\n")
_OPENER_END = re.compile(r":[ \t]*(#.*)?$")
_OPENER_BYTES = re.compile(rb":[ \t]*(#[^\n]*)?\r?$")


@dataclass(frozen=True)
class CursorContext:
    """What surrounds the cursor, as far as stopping is concerned."""

    mode: str  # "single" | "multi"
    infix: bool  # the rest of the line holds code the completion must join
    covered: str  # auto-closed brackets/quotes after the cursor that the completion supplies
    follow: str  # the text the parser must be able to read after the completion
    at_eof: bool  # nothing but blank lines/comments follow: the completion may end the file
    continued: bool = False  # `follow` holds lines indented deeper than the cursor's statement


FOLLOW_LINES = 60  # at most this many lines of a statement's continuation are checked


def first_words(text: str, lexer: LexerAutomaton | None = None, lexemes: int = 2,
                indent: int | None = None) -> tuple[str, bool, bool]:
    """`text` (what follows the completion) cut after the rest of its first line, then every
    line indented deeper than `indent` (the cursor's statement: its continuation lines, or the
    body of a block the completion must open; up to FOLLOW_LINES), then the next line's
    indentation and first `lexemes` lexemes (closed, so that the parser reads them: the start
    of the one after is kept); whether no such line exists; and whether deeper lines were kept."""
    lines = text.split("\n")
    out = [lines[0]]
    deeper = 0
    for ln in lines[1:]:
        s = ln.strip()
        if not s or s.startswith("#"):
            out.append("")
            continue
        if indent is not None and _indent_width(ln) > indent and deeper < FOLLOW_LINES:
            out.append(ln)
            deeper += 1
            continue
        out.append(_line_head(ln, lexer, lexemes))
        return "\n".join(out), False, deeper > 0
    if deeper:
        return "\n".join(out).rstrip(" \t\n") + "\n", True, True
    return lines[0], True, False


def _indent_width(line: str) -> int:
    """Width of a line's indentation, tabs to the next multiple of 8 (as CPython)."""
    w = 0
    for ch in line:
        if ch == " ":
            w += 1
        elif ch == "\t":
            w = (w // 8 + 1) * 8
        elif ch == "\f":
            w = 0
        else:
            break
    return w


def _line_head(line: str, lexer: LexerAutomaton | None, lexemes: int) -> str:
    indent = len(line) - len(line.lstrip(" \t\f"))
    if lexer is not None:
        data = line[indent:].encode()
        try:
            found, _, _ = lexer.lex(data + b"\n", START, 0)
        except LexError:
            # the line can't be read on its own (`it's` in a docstring's text): only a completion
            # that opens what the line goes on with (the string) is compatible, so keep it all
            return line + "\n"
        if found is not None:
            words = [(a, b) for a, b, d in found if data[a:b].strip()]
            if len(words) > lexemes:
                return line[:indent] + data[: words[lexemes][0] + 1].decode("utf-8", errors="ignore")
            return line + "\n"
    m = _FIRST_WORD.match(line)
    return line[: m.end()] + " "


def cursor_context(before: str, after: str, mode: str = "auto", lexer: LexerAutomaton | None = None) -> CursorContext:
    nl = after.find("\n")
    rest = after if nl < 0 else after[:nl]
    stripped = rest.strip()
    covered = ""
    infix = False
    if stripped and all(ch in CLOSERS or ch in " \t" for ch in stripped):
        covered = rest[: len(rest.rstrip())]
    elif stripped:
        infix = not stripped.startswith("#")
    line_before = before[before.rfind("\n") + 1 :]
    # the statement at the cursor is indented as its line (or up to the cursor on a blank line)
    follow, at_eof, continued = first_words(after[len(covered) :], lexer, indent=_indent_width(line_before))
    if mode == "auto":
        mode = "single"
        if not infix and not rest.strip():
            if _OPENER_END.search(line_before):
                mode = "multi"
            elif not line_before.strip():
                above = [ln for ln in before.split("\n")[:-1][-50:] if ln.strip() and not ln.lstrip().startswith("#")]
                inside_block = bool(line_before) or (above and _OPENER_END.search(above[-1]))
                mode = "multi" if inside_block else "single"
    if infix:
        mode = "single"
    return CursorContext(mode, infix, covered, follow, at_eof, continued)


# ---------------------------------------------------------------- line ends in generated text


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

    def line_ends(self, data: bytes, depth: int = 0) -> tuple[list[LineEnd], list[tuple[int, int]]] | None:
        """The newlines of `data` (which starts at a lexeme start, at bracket `depth`), and the
        lexeme boundaries with the bracket depth there; None if the bytes don't lex
        (unconstrained output)."""
        try:
            lexemes, state, start = self.lexer.lex(data, START, 0)
        except LexError:
            return None
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

    def inside_string(self, data: bytes) -> bool:
        """Whether `data` (from a lexeme start) ends inside an unterminated string literal."""
        try:
            _, state, _ = self.lexer.lex(data, START, 0)
        except LexError:
            return False
        possible = self.lexer.possible_ids[state]
        return bool(possible) and set(possible) <= self.strings and not self.lexer.accepting[state]

    def depth_after(self, data: bytes, depth: int = 0) -> int:
        """Bracket depth at the end of `data` (from a lexeme start at `depth`)."""
        try:
            lexemes, state, _ = self.lexer.lex(data, START, 0)
        except LexError:
            return depth
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


# ---------------------------------------------------------------- compatibility


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


# ---------------------------------------------------------------- the policy


@dataclass(frozen=True)
class Stop:
    cut: int  # completion length in bytes (None-free: 0 is the empty completion)
    reason: str


CONTINUE = None
REJECT = "reject"  # the last token ends the line where the file can't go on: try another


class StopPolicy:
    """Decides, after every accepted token, whether the completion is done (`Stop`), must go
    on (`CONTINUE`) or took a token that ends it incompatibly (`REJECT`).

    Scanned bytes are `held + generated`: `held` is the open lexeme before the cursor (the
    scanner starts at a lexeme start), `generated` starts with the healed bytes (typed text
    the first tokens re-created). The completion proper starts `cursor` bytes in."""

    def __init__(self, ctx: CursorContext, scanner: LineScanner, compat: Compatibility | None,
                 held: bytes, heal: bytes, start_depth: int, line_col: int, line_blank: bool = False,
                 cursor_depth: int | None = None) -> None:
        self.ctx = ctx
        self.scanner = scanner
        self.compat = compat  # None: unconstrained (no compatibility constraint)
        self.held = held
        self.cursor = len(held) + len(heal)
        self.start_depth = start_depth  # bracket depth where `held` starts
        self.cursor_depth = start_depth if cursor_depth is None else cursor_depth
        # the file goes on inside the brackets open at the cursor (a multi-line call, list...):
        # a newline inside them may end the completion
        self.bracket_continues = False
        self.line_col = line_col
        self.mode = ctx.mode
        self.line_blank = line_blank  # nothing but indentation before the cursor on its line
        self.body_from = self.cursor  # multi-line: the block's indentation is its first line's after this

    def _ok(self, data: bytes, cut: int) -> bool:
        return self.compat is None or self.compat.ok(data[self.cursor : cut])

    def after_token(self, generated: bytes):
        data = self.held + generated
        k = self.cursor
        if len(data) <= k:  # still re-creating typed text
            return CONTINUE
        scan = self.scanner.line_ends(data, self.start_depth)
        if scan is None:  # not Python: the first newline ends it
            i = data.find(b"\n", k)
            return CONTINUE if i < 0 else Stop(i - k, "line-end")
        ends, _ = scan
        ctx = self.ctx
        if ctx.infix:
            if any(e.cut >= k for e in ends) or data.find(b"\n", k) >= 0:
                return self.fallback(generated, "suffix", at_end=False)
            return CONTINUE
        if self._blank_so_far(data, k):
            return CONTINUE if self.compat is None else REJECT
        if self.mode == "single":
            i = data.find(b"\n", k)
            if i >= 0 and self._inside_held_lexeme(i, ends, scan[1]):
                # a newline in a string or comment that began before the cursor ends the line
                return Stop(i - k, "line-end") if self._ok(data, i) else REJECT
            for e in ends:
                if e.cut < k:
                    continue
                if e.depth == 0:
                    if self._ok(data, e.cut):
                        return Stop(e.cut - k, "line-end")
                    if self._opens_block(data, e.cut):
                        # a block opener: its body follows, then the completion ends
                        self.mode, self.body_from = "multi", e.cut
                        break
                    return REJECT
                if 0 < e.depth <= self.cursor_depth and self.bracket_continues and self._ok(data, e.cut):
                    return Stop(e.cut - k, "line-end")
                if e.depth > self.cursor_depth and ctx.continued and self._ok(data, e.cut):
                    # brackets the completion opened, which the file's next lines go on with
                    return Stop(e.cut - k, "line-end")
            else:
                return CONTINUE
        base = None
        for e in ends:
            if e.depth != 0 or e.end <= self.body_from:
                continue
            if base is None:
                if e.closed:
                    base = e
                continue
            if e.cut > k and ((e.closed and e.col < base.col) or e.blank):
                if self._ok(data, e.cut):
                    return Stop(e.cut - k, "block-end")
        return CONTINUE

    def _goes_on(self, data: bytes, cut: int) -> bool:
        """A cut the token limit (or the model's end) left inside the cursor's brackets: the
        file's next lines must go on inside them, read in full (the rest of the cursor's line,
        which closed them, may be gone), unless it is infix (the line's rest joins it)."""
        c = self.compat
        if c is None or c.rest is None or self.ctx.infix:
            return True
        return c.goes_on_with(data[self.cursor : cut])

    def _blank_so_far(self, data: bytes, k: int) -> bool:
        """Nothing but whitespace after the cursor yet, and already a line ended where a
        statement was expected (an empty line) or a blank line: constrained decoding asks the
        model for code instead (an empty answer is the gap constraints close)."""
        tail = data[k:]
        if tail.strip(b" \t\r\n\f"):
            return False
        n = tail.count(b"\n")
        if n >= 2:
            return True
        return n == 1 and self.mode == "single" and self.line_blank

    def _inside_held_lexeme(self, i: int, ends, bounds) -> bool:
        """Whether offset `i` lies in a lexeme that started before the cursor (not a newline)."""
        if any(e.cut <= i < e.end for e in ends):
            return False
        start = max((b for b, _ in bounds if b <= i), default=0)
        return start < self.cursor and start < len(self.held)

    def _opens_block(self, data: bytes, cut: int) -> bool:
        """Whether the line ending at `cut` opens a block (its body must follow)."""
        line = data[: cut].rsplit(b"\n", 1)[-1]
        return bool(_OPENER_BYTES.search(line))

    def fallback(self, generated: bytes, reason: str, at_end: bool) -> Stop:
        """The longest compatible end at or before the end of `generated`: at a line end, or
        (single-line and infix) at a lexeme boundary; `at_end` when the text may end as it is
        (the model ended it)."""
        data = self.held + generated
        k = self.cursor
        inside: set[int] = set()  # cuts inside the cursor's brackets
        scan = self.scanner.line_ends(data, self.start_depth)
        if scan is None:
            cands = {k}
        else:
            ends, bounds = scan
            cands = {e.cut for e in ends if e.cut >= k and e.depth == 0}
            if self.mode == "single" or self.ctx.infix:
                # not inside brackets the completion opened: the file's next lines can't close them
                cands |= {b for b, depth in bounds if b >= k and depth <= self.cursor_depth}
                inside = {b for b, depth in bounds if b > k and depth > 0}
            cands.add(k)
            if at_end or self._inside_held_lexeme(len(data) - 1, ends, bounds):
                # the model ended it, or the cut falls inside a string that goes on in the file
                cands.add(len(data))
            if not self.ctx.infix and self.mode == "single":  # not past the line's end
                first = min((e.cut for e in ends if e.cut >= k and (e.depth == 0 or self.cursor_depth > 0)),
                            default=None)
                if first is not None:
                    cands = {c for c in cands if c <= first}
        for cut in sorted(cands, reverse=True)[:48]:
            if cut in inside and not self._goes_on(data, cut):
                continue
            if cut == k or self._ok(data, cut):
                return Stop(cut - k, reason if cut > k else reason)
        return Stop(0, reason)
