"""LSP positions (line, UTF-16 code unit) <-> offsets in a text."""

from __future__ import annotations


class PositionError(ValueError):
    pass


def line_starts(text: str) -> list[int]:
    out = [0]
    i = text.find("\n")
    while i >= 0:
        out.append(i + 1)
        i = text.find("\n", i + 1)
    return out


def utf16_len(s: str) -> int:
    return sum(2 if ord(c) > 0xFFFF else 1 for c in s)


def offset_at(text: str, line: int, character: int, starts: list[int] | None = None) -> int:
    """The string index of an LSP position; raises PositionError if it is outside the text.
    A character past the end of its line is clamped to the line's end (as LSP asks)."""
    starts = starts or line_starts(text)
    if line < 0 or character < 0 or line >= len(starts):
        raise PositionError(f"position {line}:{character} is outside the document ({len(starts)} lines)")
    start = starts[line]
    end = starts[line + 1] - 1 if line + 1 < len(starts) else len(text)
    if end > start and text[end - 1] == "\r":
        end -= 1
    units = 0
    i = start
    while i < end and units < character:
        units += 2 if ord(text[i]) > 0xFFFF else 1
        i += 1
    return i


def position_of(text: str, offset: int, starts: list[int] | None = None) -> tuple[int, int]:
    """The LSP (line, character) of a string index."""
    import bisect

    starts = starts or line_starts(text)
    line = bisect.bisect_right(starts, offset) - 1
    return line, utf16_len(text[starts[line] : offset])
