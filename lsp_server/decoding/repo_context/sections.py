"""What a context block holds, packed within its share: the stubs of the definitions used in the
cursor's scope, the chunks of other documents most like that scope, and the region edited last
in another document, in that order, whole sections while they fit, the definitions cut to fit
(`block_sections`).

It runs in the lookup process (`lookup_process.py`) with the lookup itself: ranking the
neighbours is Python over every chunk of every open and recently closed document, and in the
server's process it would hold the interpreter lock the model's thread needs between layers.
"""

from __future__ import annotations

from .neighbours import CHUNK_STEP, chunks, nearest

NEIGHBOURS = 2  # chunks of other documents per block
EDITED = 1  # regions edited last in other documents, per block (the most recent documents first)
MIN_LINES = 2  # of a definitions section cut to fit: fewer say too little to be worth the block's start


def block_sections(definitions: list[tuple[str, str]], query: str, own_text: str,
                   others: list[tuple[str, str]], edited: list[tuple[str, str, int]],
                   limit: int) -> list[tuple[str, str, str]]:
    """(name, text, kind) of each section kept: `definitions` ((file's name, its stubs)), the
    NEIGHBOURS chunks of `others` ((name, text) of the other documents, open or recently closed)
    most like `query` (the cursor's scope), and the chunk around the last edit of EDITED of the
    `edited` documents ((name, text, 0-based line), the most recent first) that no neighbour
    holds already; whole sections while their texts fit in `limit` characters, a definitions
    section that does not fit cut to its first lines that do (`lines_within`)."""
    sections = [(name, stubs, "definitions") for name, stubs in definitions]
    picked = nearest(query, others, NEIGHBOURS, exclude=own_text)
    sections += [(c.name, c.text, "neighbour") for c in picked]
    sections += edited_sections(edited, picked, own_text)
    kept, used = [], 0
    for s in sections:
        text = s[1] if used + len(s[1]) <= limit or s[2] != "definitions" else lines_within(s[1], limit - used)
        if text and used + len(text) <= limit:
            kept.append((s[0], text, s[2]))
            used += len(text)
    return kept


def lines_within(text: str, room: int) -> str:
    """The first whole lines of `text` within `room` characters ("" when fewer than MIN_LINES
    fit): a file's stubs too long for the block keep their first definitions (the cursor's line
    names its own first) and a class its header and first members, where the whole section
    would be left out."""
    lines = text.split("\n")
    n, size = 0, 0
    while n < len(lines) and size + len(lines[n]) + 1 <= room:
        size += len(lines[n]) + 1
        n += 1
    return "\n".join(lines[:n]) + "\n" if n >= MIN_LINES else ""


def edited_sections(edited: list[tuple[str, str, int]], picked: list, own_text: str) -> list[tuple[str, str, str]]:
    """The chunk around the last edit of the first EDITED of `edited` documents (other than the
    document itself), unless a neighbour holds it already."""
    out: list[tuple[str, str, str]] = []
    for name, text, line in edited:
        if text == own_text or len(out) == EDITED:
            continue
        for c in chunks(name, text):
            if c.line <= line < c.line + CHUNK_STEP and not any(p.name == name and p.line == c.line for p in picked):
                if c.text not in own_text:
                    out.append((name, c.text, "edited"))
                break
    return out
