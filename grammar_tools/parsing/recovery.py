"""Keep completing when the document has a syntax error before the cursor.

Documents being edited are often broken: an unclosed bracket three functions up, a half-typed
statement. `parse_prefix` parses the text before the cursor and, on an error, restarts from a
line after the error that starts a statement enclosing (or leading to) the cursor:

1. the block headers that enclose the cursor are found by indentation (each is the nearest line
   above with less indentation that ends with `:`);
2. restart candidates are, in order: those headers that come after the error (outermost first),
   then the lines after the error at the cursor block's indentation, then the cursor's line;
3. the headers above the restart line, which may be broken themselves, are replaced by neutral
   headers of the same kind and indentation (`def _():`, `class _:`, `while _:`, `if _:`), so
   the parser knows the indent stack and the context (inside a function, a loop...);
4. the first candidate that parses up to the cursor wins; the result says so (`Recovery`).
"""

from __future__ import annotations

import re

from .incremental import ParseError, PrefixParser, PrefixState, Recovery
from .indentation import indent_width
from ..lexing.lexer_automaton import LexError

_HEADER_END = re.compile(rb":\s*(#.*)?$")


def _neutral_header(stripped: bytes) -> bytes:
    word = stripped.split(None, 2)
    first = word[0] if word else b""
    if first.startswith(b"@"):
        return b""
    if first == b"async" and len(word) > 1:
        if word[1].startswith(b"def"):
            return b"async def _():"
        if word[1].startswith((b"for", b"with")):
            return b"async def _():"
    if first == b"def" or first.startswith(b"def"):
        return b"def _():"
    if first == b"class":
        return b"class _:"
    if first in (b"for", b"while"):
        return b"while _:"
    return b"if _:"


def _line_info(lines: list[bytes]) -> list[tuple[int, bytes, bytes] | None]:
    """Per line: (indent col, leading whitespace, stripped text) or None if blank/comment."""
    out = []
    for ln in lines:
        s = ln.lstrip(b" \t\f")
        if not s.strip() or s.startswith(b"#"):
            out.append(None)
            continue
        lead = ln[: len(ln) - len(s)]
        col, _ = indent_width(lead)
        out.append((col, lead, s.rstrip(b"\r")))
    return out


def enclosing_headers(lines: list[bytes], info, cursor_line: int, cursor_col: int):
    """The block headers enclosing the cursor, innermost first, as (line, col)."""
    out = []
    threshold = cursor_col
    for i in range(cursor_line - 1, -1, -1):
        li = info[i]
        if li is None:
            continue
        col, _, text = li
        if col < threshold and _HEADER_END.search(text):
            out.append((i, col))
            threshold = col
            if col == 0:
                break
    return out


def parse_prefix(parser: PrefixParser, data: bytes) -> PrefixState:
    """Parse `data` (the text before the cursor), recovering from an earlier syntax error.

    Raises the original LexError/ParseError if no restart point works."""
    try:
        return parser.parse(data)
    except (ParseError, LexError) as e:
        error = e
    result = _recover(parser, data, error)
    if result is None:
        raise error
    return result


def _recover(parser: PrefixParser, data: bytes, error: Exception) -> PrefixState | None:
    pos = error.pos
    lines = data.split(b"\n")
    starts = [0]
    for ln in lines[:-1]:
        starts.append(starts[-1] + len(ln) + 1)
    error_line = data.count(b"\n", 0, pos)
    cursor_line = len(lines) - 1
    info = _line_info(lines)
    cur = lines[cursor_line]
    cur_col = indent_width(cur)[0]
    headers = enclosing_headers(lines, info, cursor_line, cur_col if cur.strip() else 10**9)
    # the indentation of the cursor's block: the cursor line's, or the next after its header
    block_col = cur_col
    candidates: list[int] = [h for h, _ in reversed(headers) if h > error_line]
    for i in range(error_line + 1, cursor_line):
        if info[i] is not None and info[i][0] == block_col and i not in candidates:
            candidates.append(i)
    if cursor_line > error_line and cursor_line not in candidates:
        candidates.append(cursor_line)
    for r in candidates:
        synthetic = b"".join(
            info[h][1] + _neutral_header(info[h][2]) + b"\n"
            for h, col in reversed(headers)
            if h < r and info[h] is not None and _neutral_header(info[h][2])
        )
        text = synthetic + data[starts[r] :]
        fresh = PrefixParser(parser.recognizer, parser.lexer)
        try:
            st = fresh.parse(text)
        except (ParseError, LexError):
            continue
        held = st.end - st.lexeme_start
        return PrefixState(
            configs=st.configs,
            lexer_state=st.lexer_state,
            lexeme_start=max(len(data) - held, 0),
            end=len(data),
            newline_width=st.newline_width,
            recovered=Recovery(
                error_pos=pos,
                error=str(error),
                restart_line=r,
                synthetic_headers=tuple(
                    _neutral_header(info[h][2]).decode() for h, _ in reversed(headers) if h < r
                ),
                resume=starts[r],
                synthetic=synthetic,
            ),
        )
    return None
