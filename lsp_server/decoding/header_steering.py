"""Steering a re-decoding by what the following lines need: at a cursor on an otherwise empty
line whose following lines can only be read as a block's body (indented deeper than the cursor,
the body of an `except` whose header was cut away), every completion that keeps the file valid
writes a block header there; where they are the rest of a string whose first line was cut (a
docstring's text and its closing quotes), it opens that string. Which headers fit is asked of the whole-file check itself: a header
alone at the cursor, its body the lines that follow (`if x:` fits below a statement, `except:`
after a `try` body, `else:` after an `if` body...). The re-decoding (`model_pass.Tries`) then starts
with a token that begins one of the headers that fit, the model's own order among them. At a
line start of existing code whose header was cut away (`line_start_headers`), the header is
probed, and steered to, at the indentations of the lines above that are no shallower than the
cursor; where none fits there (the cursor at the end of the indentation of a body whose header
was cut: the header stands at a shallower column), the answer ends the cursor's line first and
writes its first line below it, at the shallower indentations where one fits (`Start.NEXT_LINE`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType

import numpy as np

from .stopping.rest_of_file import Start, opens_block, RestOfFile

# a header for each keyword that opens a block, the check's probe
PROBES = {
    b"if": b"if x:", b"elif": b"elif x:", b"else": b"else:", b"for": b"for x in y:", b"while": b"while x:",
    b"with": b"with x:", b"try": b"try:", b"except": b"except:", b"finally": b"finally:", b"def": b"def f():",
    b"class": b"class C:", b"async": b"async def f():",
    # the file's next lines are the rest of a string whose first line was cut (a docstring's)
    b'"""': b'"""', b"'''": b"'''",
}
QUOTES = (b'"""', b"'''")


def _blank_line_needs_code(rest: RestOfFile) -> bool:
    """The cursor's line holds nothing else and the file is not valid without a completion (the
    whole-file check on: constrained decoding)."""
    return rest.compat is not None and rest.line_blank and not rest.keeps_valid(b"")


def needed_headers(rest: RestOfFile) -> tuple[bytes, ...]:
    """The keywords whose headers alone at the cursor keep the file valid, where the file is not
    valid without a completion and the cursor's line holds nothing else (empty: no steering)."""
    if not _blank_line_needs_code(rest):
        return ()
    return tuple(k for k, probe in PROBES.items() if rest.keeps_valid(probe))


def line_start_headers(rest: RestOfFile, widths: Sequence[int], start: Start = Start.CURSOR_LINE,
                       level: int | None = None) -> tuple[tuple[bytes, ...], tuple[int, ...]]:
    """At a line start of existing code that needs a header above it (the file is not valid
    without one: its block header was cut away), the keywords whose headers fit there and which
    of the indentations `widths` they fit at (columns after the cursor on its line; of the next
    line where the answer ends the cursor's line first, `start`): the answer's first line is
    such a header, written at the depth the existing line's block needs. Where headers fit at
    `level` (one level above the existing line: its header as the file indents blocks), that
    indentation alone: a shallower one would also end the blocks the lines above stand in.
    Empty: no steering."""
    if not rest.inserts_lines or not _blank_line_needs_code(rest):
        return (), ()
    if level in widths:
        fits = _headers_at(rest, start, level)
        if fits:
            return fits, (level,)
    keywords, fits_at = set(), []
    for w in widths:
        if w == level:
            continue
        fits = _headers_at(rest, start, w)
        if fits:
            keywords.update(fits)
            fits_at.append(w)
    return tuple(k for k in PROBES if k in keywords), tuple(fits_at)


def _headers_at(rest: RestOfFile, start: Start, width: int) -> tuple[bytes, ...]:
    """The keywords whose header keeps the file valid written at indentation `width` (`_line`)."""
    return tuple(k for k, probe in PROBES.items() if rest.keeps_valid(_line(start, width) + probe))


STEER_LINES = 50  # the lines above the cursor whose indentations are tried for a header


class Fit(Enum):
    """What the rest of the file allows at the cursor before the model is asked."""

    FREE = "free"  # not asked (mid-line, inside brackets where the grammar already wants an expression, unchecked)
    SHAPED = "shaped"  # the first tokens are steered to what fits (`FirstLine.widths`, `keywords`)
    NOTHING = "nothing"  # nothing fits at the cursor: the answer is empty without asking the model


@dataclass(frozen=True)
class FirstLine:
    """What the first line of an answer may be, as the rest of the file requires it."""

    fit: Fit
    # the indentations its code may start at: columns after the cursor (Start.CURSOR_LINE), or
    # the columns of the line below the cursor's (Start.NEXT_LINE: the answer ends the cursor's line first)
    widths: tuple[int, ...] = ()
    keywords: tuple[bytes, ...] = ()  # (): any statement; else a header of one of these keywords
    start: Start = Start.CURSOR_LINE


FREE = FirstLine(Fit.FREE)
NO_TOKENS = np.zeros(0, dtype=np.int64)
PROBE_STATEMENT = b"pass"  # a simple statement: where it fits, any simple statement's layout does


def _line(start: Start, width: int) -> bytes:
    """What an answer writes before its first line's code at indentation `width` (`FirstLine.widths`)."""
    return (b"\n" if start is Start.NEXT_LINE else b"") + b" " * width


def _candidate_widths(before: str, col: int) -> tuple[list[int], int]:
    """The indentations an answer's first line may take: those of the lines above, the cursor's
    (column `col`), and one level deeper than each (a block's first line); and the level (how
    much deeper a block's body stands than its header in the lines above)."""
    lines = [ln for ln in before.split("\n")[-STEER_LINES:] if ln.strip()]
    depths = {len(ln) - len(ln.lstrip(" ")) for ln in lines} | {col}
    # a level: how much deeper a block's body stands than its header (not a bracket's continuation lines)
    steps = {len(b) - len(b.lstrip(" ")) - (len(a) - len(a.lstrip(" "))) for a, b in zip(lines, lines[1:])
             if opens_block(a.rstrip().encode())}
    unit = min((d for d in steps if d > 0), default=4)
    depths |= {d + unit for d in depths}
    return sorted(depths), unit


def _fitting(rest: RestOfFile, widths: Sequence[int], start: Start, level: int) -> FirstLine | None:
    """The first line that fits at `widths` (`FirstLine.widths`, written from `start`): a
    simple statement (`pass`) where one keeps the file valid and the existing line intact,
    else a header (`line_start_headers`, at `level` where one fits there); None where neither does."""
    fits = tuple(w for w in widths if rest.keeps_valid(_line(start, w) + PROBE_STATEMENT))
    if fits:
        return FirstLine(Fit.SHAPED, fits, (), start)
    keywords, fits = line_start_headers(rest, widths, start, level)
    return FirstLine(Fit.SHAPED, fits, keywords, start) if keywords else None


def first_line(rest: RestOfFile, before: str) -> FirstLine:
    """What the rest of the file lets the answer's first line be, asked of `RestOfFile.keeps_valid`
    with probes before the model writes anything (the first decoding pass is steered by it):

    - at a line start of existing code (outside brackets), the indentations at which a simple
      statement (`pass`) keeps the file valid and the existing line intact (a dedent below
      allows the enclosing levels, a block opener above with no body below only a deeper one);
      where none does (a body below that lost its header), only the headers that fit and
      their indentations (`line_start_headers`); where none does either at the cursor's
      column or deeper (the end of the indentation of a body whose header was cut), the same
      at the shallower indentations after ending the cursor's line (`Start.NEXT_LINE`: the
      cursor's indentation stays as a blank line); where nothing fits there either, nothing;
    - on an otherwise empty line the file needs something at (`needed_headers`), the headers
      that fit there;
    - else the model's own first tokens (a line continuing a bracket needs an expression: the
      grammar's mask already asks only for one)."""
    if rest.compat is None or not rest.line_blank:
        return FREE
    if not rest.inserts_lines:
        keywords = needed_headers(rest)
        return FirstLine(Fit.SHAPED, (0,), keywords) if keywords else FREE  # a header at the cursor
    if rest.cursor_depth > 0:
        return FREE
    col = len(rest.follow.line_before.decode(errors="replace"))
    widths, unit = _candidate_widths(before, col)
    level = rest.code_col - unit  # the existing line's header, one level above it
    shape = _fitting(rest, [w - col for w in widths if w >= col], Start.CURSOR_LINE, level - col)
    if shape is None and col > 0:
        shape = _fitting(rest, [w for w in widths if w < col], Start.NEXT_LINE, level)
    return shape or FirstLine(Fit.NOTHING)


def starts_with_keyword(token: bytes, keyword: bytes) -> bool:
    """Whether `token` spells `keyword` as a whole word at its start (after blanks; a string
    opener's text may follow it in the token)."""
    s = token.lstrip(b" \t")
    rest = s[len(keyword) : len(keyword) + 1]
    ends_there = keyword in QUOTES or not (rest.isalnum() or rest == b"_")  # a string opener's text may follow
    return s.startswith(keyword) and ends_there


class HeaderStarts:
    """The tokens that start each keyword's header, as masks over the vocabulary (built once
    per keyword)."""

    def __init__(self, token_bytes: Sequence[bytes]) -> None:
        self.token_bytes = token_bytes
        self._masks: dict[bytes, np.ndarray] = {}

    def first_line(self, shape: FirstLine, heal: bytes, encode: Callable[[str], list[int]]):
        """The steering of a first line shaped as `shape` (None: not shaped). `heal` is the
        healed text the first tokens re-create, `encode` the tokenizer's: the blanks before the
        code are taken as the tokenizer writes them before a line at one of the wanted
        indentations (canonical tokenization allows no other split of a run of blanks), the
        newline that ends the cursor's line first included (`Start.NEXT_LINE`)."""
        if shape.fit is not Fit.SHAPED:
            return None
        paths: dict[int, set[int]] = {}  # bytes written from the healed text's start -> the blank tokens that go on
        for w in shape.widths:
            at = 0
            for t in encode((heal + _line(shape.start, w) + PROBE_STATEMENT).decode("utf-8", errors="replace")):
                if self.token_bytes[t].strip():
                    break
                paths.setdefault(at, set()).add(t)
                at += len(self.token_bytes[t])
        return self.steer(shape.keywords, shape.widths, {at: np.array(sorted(ts)) for at, ts in paths.items()},
                          len(heal), len(_line(shape.start, 0)))

    def steering(self, rest: RestOfFile, before: str, heal: bytes, encode: Callable[[str], list[int]]):
        """What the rest of the file lets the first line be (`first_line`) and that line's
        steering (`HeaderStarts.first_line`; None: not shaped): a request's one question here."""
        shape = first_line(rest, before)
        return shape, self.first_line(shape, heal, encode)

    def steer(self, keywords: Sequence[bytes], widths: Sequence[int],
              blanks: Mapping[int, np.ndarray] = MappingProxyType({}), healed: int = 0, line_from: int = 0):
        """What the decoding loop's steered steps allow: given the healed bytes still to
        re-create (`room`) and the bytes written after them (`written`), the tokens that start a
        header of one of `keywords` (none: any code) at one of the indentations `widths` of the
        line that starts `line_from` bytes after the cursor (0: the cursor's, the widths counted
        from the cursor; 1: the next, after the newline that ends the cursor's line), and the
        blank tokens `blanks` allows at each count of bytes written from the start of the
        `healed` text (those that lead to one)."""
        headers = np.zeros(len(self.token_bytes), dtype=bool) if keywords else self._code()
        for k in keywords:
            m = self._masks.get(k)
            if m is None:
                m = self._masks[k] = np.array([starts_with_keyword(b, k) for b in self.token_bytes], dtype=bool)
            headers |= m
        lead = self._lead()
        wanted = np.array(sorted(widths))

        def allowed(room: int, written: int) -> np.ndarray:
            # `written` < 0: healed bytes still to re-create (the newline and indentation before
            # the cursor); a token's code starts `written + lead - line_from` columns after the
            # cursor, or into the next line (which starts once `line_from` bytes are written)
            on_line = written >= line_from or not line_from  # no code before the newline it is to follow
            out = headers & np.isin(written + lead - line_from, wanted) & on_line
            out[blanks.get(healed + written, NO_TOKENS)] = True
            return out

        return allowed

    def _lead(self) -> np.ndarray:
        """Each token's leading spaces and tabs."""
        lead = self._masks.get(b"lead")
        if lead is None:
            lead = self._masks[b"lead"] = np.array([len(b) - len(b.lstrip(b" \t")) for b in self.token_bytes])
        return lead

    def _code(self) -> np.ndarray:
        """The tokens that start a line's code after their leading spaces and tabs (not a newline)."""
        m = self._masks.get(b"code")
        if m is None:
            m = self._masks[b"code"] = np.array([b.lstrip(b" \t")[:1] not in (b"", b"\n", b"\r")
                                                 for b in self.token_bytes], dtype=bool)
        return m.copy()
