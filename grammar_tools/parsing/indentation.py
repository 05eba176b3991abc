"""The width of a line's indentation, by CPython's tokenizer: the one rule every part uses.

CPython (`Parser/tokenizer.c`, at the start of a line) counts two widths: `col`, where a tab
moves to the next multiple of 8, and `altcol`, where a tab counts as one column; a form feed
resets both to 0 ("for Emacs users"); any other byte ends the indentation. A line is indented
consistently when both widths order it the same way against the indent stack (else TabError).
"""

from __future__ import annotations

TAB_SIZE = 8

Width = tuple[int, int]  # (col, altcol)


def indent_width(ws: bytes, start: Width | None = None) -> Width:
    """(col, altcol) after the whitespace `ws` that begins a line (or continues one whose
    indentation so far is `start`); stops at the first byte that is not a space, tab or form
    feed."""
    col, alt = start or (0, 0)
    for b in ws:
        if b == 0x20:
            col += 1
            alt += 1
        elif b == 0x09:
            col = (col // TAB_SIZE + 1) * TAB_SIZE
            alt += 1
        elif b == 0x0C:
            col = alt = 0
        else:
            break
    return col, alt


def newline_width(lexeme: bytes) -> Width:
    """(col, altcol) of the indentation after the last newline of a `_NEWLINE` lexeme (a
    comment after it ends the indentation: the width is what came before it)."""
    return indent_width(lexeme[lexeme.rfind(b"\n") + 1 :])


def extend_width(width: Width | None, part: bytes) -> Width:
    """(col, altcol) of an open `_NEWLINE` lexeme's indentation (`width` so far, None: none yet)
    after more of its bytes `part` (as far as a token goes): from `part`'s last line break on,
    else added to `width`."""
    i = part.rfind(b"\n")
    if i >= 0:
        return indent_width(part[i + 1 :].replace(b"\r", b""))
    return indent_width(part, width)


def line_indent(line: str | bytes) -> int:
    """The column (`col`) where a line's text starts."""
    data = line.encode() if isinstance(line, str) else line
    return indent_width(data)[0]
