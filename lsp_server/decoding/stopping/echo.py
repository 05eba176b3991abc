"""Never echo the text after the cursor: the cuts where the generated text starts to repeat what
the file already has right after the cursor.

A completion that writes the file's next line again (an `else:` body that follows, the
function's `return` after the cursor's loop, the closing line of a call) or the rest of the
cursor's line that it must join is valid Python, so the grammar alone never stops it. Here the
generated text is compared with the following text: the file's next non-blank lines and the
rest of the cursor's line (when kept), without surrounding whitespace. The stop policy stops at
such a cut only where the file stays valid there (the grammar decides: a line that repeats the
next one where the completion could not stop before it, e.g. a block's only statement, is
kept)."""

from __future__ import annotations

from dataclasses import dataclass

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
