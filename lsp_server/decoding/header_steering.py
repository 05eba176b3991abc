"""Steering a re-decoding by what the following lines need: at a cursor on an otherwise empty
line whose following lines can only be read as a block's body (indented deeper than the cursor,
the body of an `except` whose header was cut away), every completion that keeps the file valid
writes a block header there; where they are the rest of a string whose first line was cut (a
docstring's text and its closing quotes), it opens that string. Which headers fit is asked of the whole-file check itself: a header
alone at the cursor, its body the lines that follow (`if x:` fits below a statement, `except:`
after a `try` body, `else:` after an `if` body...). The re-decoding (`redecode.py`) then starts
with a token that begins one of the headers that fit, the model's own order among them. At a
line start of existing code whose header was cut away (`line_start_headers`), the header is
probed, and steered to, at the indentations of the lines above that are no shallower than the
cursor."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .stopping.rest_of_file import RestOfFile

# a header for each keyword that opens a block, the check's probe
PROBES = {
    b"if": b"if x:", b"elif": b"elif x:", b"else": b"else:", b"for": b"for x in y:", b"while": b"while x:",
    b"with": b"with x:", b"try": b"try:", b"except": b"except:", b"finally": b"finally:", b"def": b"def f():",
    b"class": b"class C:", b"async": b"async def f():",
    # the file's next lines are the rest of a string whose first line was cut (a docstring's)
    b'"""': b'"""', b"'''": b"'''",
}
QUOTES = (b'"""', b"'''")


def needed_headers(rest: RestOfFile) -> tuple[bytes, ...]:
    """The keywords whose headers alone at the cursor keep the file valid, where the file is not
    valid without a completion and the cursor's line holds nothing else (empty: no steering)."""
    if rest.compat is None or not rest.line_blank or rest.keeps_valid(b""):
        return ()
    return tuple(k for k, probe in PROBES.items() if rest.keeps_valid(probe))


def line_start_headers(rest: RestOfFile, before: str) -> tuple[tuple[bytes, ...], tuple[int, ...]]:
    """At a line start of existing code that needs a header above it (the file is not valid
    without one: its block header was cut away), the keywords whose headers fit there and the
    indentations (columns after the cursor) at which they do: the answer's first line is such a
    header, written at the depth the existing line's block needs (the indentations of the lines
    above, and one level deeper). Empty: no steering."""
    if rest.compat is None or not rest.inserts_lines or not rest.line_blank or rest.keeps_valid(b""):
        return (), ()
    col = len(rest.follow.line_before.decode(errors="replace"))
    lines = [ln for ln in before.split("\n")[-STEER_LINES:] if ln.strip()]
    depths = {len(ln) - len(ln.lstrip(" ")) for ln in lines} | {col}
    unit = min((d for d in depths if d), default=4)
    depths |= {d + unit for d in depths}  # a block's first line (the cut header's may be one)
    keywords, widths = set(), []
    for w in sorted(depths):
        if w < col:
            continue
        fits = [k for k, probe in PROBES.items() if rest.keeps_valid(b" " * (w - col) + probe)]
        if fits:
            keywords.update(fits)
            widths.append(w - col)
    return tuple(k for k in PROBES if k in keywords), tuple(widths)


STEER_LINES = 50  # the lines above the cursor whose indentations are tried for a header


def starts_with_keyword(token: bytes, keyword: bytes) -> bool:
    """Whether `token` spells `keyword` as a whole word at its start (after blanks; a string
    opener's text may follow it in the token)."""
    s = token.lstrip(b" \t")
    rest = s[len(keyword) : len(keyword) + 1]
    return s.startswith(keyword) and (keyword in QUOTES or not (rest.isalnum() or rest == b"_"))


class HeaderStarts:
    """The tokens that start each keyword's header, as masks over the vocabulary (built once
    per keyword)."""

    def __init__(self, token_bytes: Sequence[bytes]) -> None:
        self.token_bytes = token_bytes
        self._masks: dict[bytes, np.ndarray] = {}

    def steer(self, keywords: Sequence[bytes], widths: Sequence[int] = ()):
        """What the decoding loop's steered steps allow (None: no keywords): given the healed
        bytes still to re-create (`room`) and the bytes written after them (`written`), the
        tokens that start a header of one of `keywords` and the blank ones that fit in that room
        (the newline and indentation before the header, never deeper); with `widths`, the
        header at one of those indentations after the cursor (the blanks that lead to one)."""
        if not keywords:
            return None
        headers = np.zeros(len(self.token_bytes), dtype=bool)
        for k in keywords:
            m = self._masks.get(k)
            if m is None:
                m = self._masks[k] = np.array([starts_with_keyword(b, k) for b in self.token_bytes], dtype=bool)
            headers |= m
        blank = self._blank()
        lengths = self._lengths()
        if not widths:
            return lambda room, written: headers | (blank & (lengths <= room))
        lead, spaces = self._lead()
        wanted = np.array(sorted(widths))

        def allowed(room: int, written: int) -> np.ndarray:
            at = max(written, 0)
            indented = np.isin(at + lead, wanted)
            # blanks up to a column before a wanted one (the header's word carries the last space,
            # as tokenizers spell ` if`); the healed newline and the indentation may come in one token
            if written < 0:  # still re-creating the healed newline
                return (headers & indented) | (blank & (lengths <= room + wanted[-1] - 1))
            return (headers & indented) | (spaces & (at + lengths <= wanted[-1] - 1))

        return allowed

    def _lead(self) -> tuple[np.ndarray, np.ndarray]:
        """Each token's leading spaces and tabs, and whether it is spaces and tabs only."""
        lead = self._masks.get(b"lead")
        if lead is None:
            lead = self._masks[b"lead"] = np.array([len(b) - len(b.lstrip(b" \t")) for b in self.token_bytes])
            self._masks[b"spaces"] = np.array([bool(b) and not b.strip(b" \t") for b in self.token_bytes])
        return lead, self._masks[b"spaces"]

    def _blank(self) -> np.ndarray:
        m = self._masks.get(b"")
        if m is None:
            m = self._masks[b""] = np.array([not b.strip() and b != b"" for b in self.token_bytes], dtype=bool)
        return m

    def _lengths(self) -> np.ndarray:
        m = self._masks.get(b"len")
        if m is None:
            m = self._masks[b"len"] = np.array([len(b) for b in self.token_bytes])
        return m
