"""LSP positions (line, UTF-16 code unit) <-> offsets in a text.

Lines end as LSP says: at "\n", "\r\n" or a lone "\r" (nothing else: not U+2028, form feeds or
the other breaks str.splitlines knows). The engine reads text with "\n" only (`to_lf`), which
has the same lines and the same characters in each, so a position means the same in both; a
lone surrogate (a JSON string may hold one, UTF-8 cannot: the tokenizer and the parser refused
the whole document) is U+FFFD there, one character for one.
"""

from __future__ import annotations

import re

LINE_BREAK = re.compile(r"\r\n|\r|\n")
LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # a str decoded from JSON holds a pair as one character


class PositionError(ValueError):
    pass


def line_starts(text: str) -> list[int]:
    """The offset where each line starts (LSP's three line ends)."""
    out = [0]
    if "\r" in text:
        out.extend(m.end() for m in LINE_BREAK.finditer(text))
        return out
    i = text.find("\n")
    while i >= 0:
        out.append(i + 1)
        i = text.find("\n", i + 1)
    return out


def to_lf(text: str) -> str:
    """`text` as the engine reads it: every line end as "\n", each lone surrogate as U+FFFD (the
    module's docstring); the same lines, the same number of characters in each."""
    if LONE_SURROGATE.search(text):
        text = LONE_SURROGATE.sub("\ufffd", text)
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


def line_end_of(text: str) -> str:
    """The document's line end: its first one ("\n" when it has none)."""
    m = LINE_BREAK.search(text)
    return m.group() if m else "\n"


def utf16_len(s: str) -> int:
    return sum(2 if ord(c) > 0xFFFF else 1 for c in s)


def offset_at(text: str, line: int, character: int, starts: list[int] | None = None) -> int:
    """The string index of an LSP position; raises PositionError if it is outside the text.
    A character past the end of its line is clamped to the line's end (as LSP asks)."""
    starts = starts or line_starts(text)
    if line < 0 or character < 0 or line >= len(starts):
        raise PositionError(f"position {line}:{character} is outside the document ({len(starts)} lines)")
    start = starts[line]
    if line + 1 < len(starts):
        end = starts[line + 1] - 1  # the line end's last character
        if end > start and text[end] == "\n" and text[end - 1] == "\r":
            end -= 1
    else:
        end = len(text)
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
