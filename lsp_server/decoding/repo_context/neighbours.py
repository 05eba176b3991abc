"""Neighbouring code: the chunks of other documents most like the code at the cursor.

Copilot's "neighbouring tabs" and Continue's and Tabby's snippets rank fixed windows of the other
open files by the Jaccard similarity of their identifier sets with the text around the cursor;
so does this (BM25 weighs rare names up, but over a dozen open files there is too little text for
its document frequencies to mean much, and Jaccard needs no state). Windows are `CHUNK_LINES`
lines long and start every `CHUNK_STEP` lines from the top of the file, so a chunk's text (and
the prompt's tokens for it) does not move while lines elsewhere in its file change.
"""

from __future__ import annotations

import functools
import keyword
import re
from dataclasses import dataclass

CHUNK_LINES = 16  # ~120 tokens of code: two chunks and a few stubs fill a 256-token block
CHUNK_STEP = 8
MIN_SCORE = 0.10  # below this the chunk shares little but common names (`self`, `i`, `x`)
_IDENTIFIER = re.compile(r"[^\W\d]\w*")
_COMMON = frozenset(keyword.kwlist) | frozenset(keyword.softkwlist) | {"self", "cls", "None", "True", "False"}


def identifiers(text: str) -> frozenset[str]:
    """The identifier tokens of `text`, keywords and `self`/`cls` left out (they say nothing of what code is about)."""
    return frozenset(_IDENTIFIER.findall(text)) - _COMMON


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 0.0


@dataclass(frozen=True)
class Chunk:
    name: str  # the document, as the prompt names it
    line: int  # its first line (0-based)
    text: str
    names: frozenset[str]


@functools.lru_cache(maxsize=64)
def chunks(name: str, text: str) -> tuple[Chunk, ...]:
    """The windows of a document (cached per text: the other documents rarely change while the
    user works in one)."""
    lines = text.split("\n")
    out = []
    for start in range(0, max(len(lines) - CHUNK_STEP, 1), CHUNK_STEP):
        body = "\n".join(lines[start : start + CHUNK_LINES]).strip("\n")
        if body.strip():
            out.append(Chunk(name, start, body + "\n", identifiers(body)))
    return tuple(out)


def nearest(query: str, documents: list[tuple[str, str]], k: int = 2, min_score: float = MIN_SCORE,
            exclude: str = "") -> list[Chunk]:
    """The `k` chunks of `documents` ((name, text) pairs) most similar to `query`, best first, no
    two overlapping, none that `exclude` (the document itself) holds word for word (a copy says
    nothing new); ties broken by name and line, so the same inputs give the same chunks."""
    wanted = identifiers(query)
    if not wanted:
        return []
    scored = sorted(((jaccard(wanted, c.names), c) for name, text in documents for c in chunks(name, text)),
                    key=lambda sc: (-sc[0], sc[1].name, sc[1].line))
    picked: list[Chunk] = []
    for score, c in scored:
        if score < min_score or len(picked) == k:
            break
        if any(p.name == c.name and abs(p.line - c.line) < CHUNK_LINES for p in picked) or c.text in exclude:
            continue
        picked.append(c)
    return picked
