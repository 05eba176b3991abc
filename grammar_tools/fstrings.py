"""The kinds of f-string and t-string literals: what changes how their literal text is read.

A kind is the quote, one or three of them, raw or not (8 kinds; f and t share them). The
version table (`versions`) names the rules and terminals of each kind.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    """How the literal text of an f-string or t-string is read."""

    quote: int  # ord("'") or ord('"')
    triple: bool
    raw: bool

    @property
    def name(self) -> str:
        return ("R" if self.raw else "") + ("SQ" if self.quote == ord("'") else "DQ") + ("3" if self.triple else "")

    @property
    def delimiter(self) -> bytes:
        return bytes([self.quote]) * (3 if self.triple else 1)


KINDS: tuple[Kind, ...] = tuple(
    Kind(q, triple, raw) for raw in (False, True) for triple in (False, True) for q in (ord('"'), ord("'"))
)
