"""The vocabulary read once as identifier pieces, so that a decoding step finds the tokens that
keep an identifier on its way to a known name with dictionary look-ups instead of a pass over
every token.

An identifier byte is an ASCII letter, digit or `_`, or any byte >= 0x80 (identifiers may hold
non-ASCII letters; a partial UTF-8 token is taken as part of one). For each token:
- `lead`: the identifier bytes it starts with (after one leading space in `spaced_lead`);
- `starts_name[t]`: it starts a new identifier (a letter, `_` or >= 0x80 first), `spaced_start`
  the same after one space (`" foo"`, as byte-level BPE writes a name after an operator);
- `continues[t]`: its first byte may continue an open identifier (digits too);
- `reads_name[t]`: after a name at a statement's start, it ends the name and reads it (`(`,
  `.`, `[`, an operator, the line's end): anything that ends it but `=`, `:` and `,` (a target);
- `ends_with[lead]`: the tokens made of `lead` and then a byte that ends the identifier
  (`"path("`, `"path."`), `spaced_ends_with` the same after one space;
- `dotted_start[t]`: it writes a dot and then starts an identifier (`".find"`, `".f"`: byte-level
  BPE writes an attribute after its receiver's name so), `dotted_ends_with[lead]` the tokens made
  of a dot, `lead` and a byte that ends the identifier (`".get("`).
A token that starts with a string prefix and a quote (`f"`, `rb'`) writes a string, not a name.
"""

from __future__ import annotations

import re
from collections import defaultdict

import numpy as np

_LEAD = re.compile(rb"[A-Za-z0-9_\x80-\xff]*")
_STRING_PREFIX = re.compile(rb"(?i:[rbfut]|rb|br|fr|rf|tr|rt)['\"]")
_TARGET_END = re.compile(rb"[ \t]*(?:=(?!=)|:(?!=)|,)")  # after a name: it is assigned (`x =`, `x: int`, `x, y =`)


def is_name_start(byte: int) -> bool:
    return byte == 0x5F or 0x41 <= byte <= 0x5A or 0x61 <= byte <= 0x7A or byte >= 0x80


def is_name_byte(byte: int) -> bool:
    return is_name_start(byte) or 0x30 <= byte <= 0x39


class IdentifierTokens:
    """One vocabulary's tokens as identifier pieces (immutable once built; see the module)."""

    def __init__(self, token_bytes: list[bytes], by_bytes: dict[bytes, int], special: frozenset[int]) -> None:
        V = len(token_bytes)
        self.size = V
        self.by_bytes = by_bytes
        self.starts_name = np.zeros(V, dtype=bool)
        self.spaced_start = np.zeros(V, dtype=bool)
        self.continues = np.zeros(V, dtype=bool)
        self.dotted_start = np.zeros(V, dtype=bool)
        binds = np.zeros(V, dtype=bool)
        ends: dict[bytes, list[int]] = defaultdict(list)
        spaced: dict[bytes, list[int]] = defaultdict(list)
        dotted: dict[bytes, list[int]] = defaultdict(list)
        for t, b in enumerate(token_bytes):
            if not b or t in special or _STRING_PREFIX.match(b):
                continue
            self.continues[t] = is_name_byte(b[0])
            binds[t] = _TARGET_END.match(b) is not None
            self.starts_name[t] = is_name_start(b[0])
            lead = _LEAD.match(b).group()
            if lead and len(lead) < len(b):
                ends[lead].append(t)
            if len(b) > 1 and b[0] == 0x20 and is_name_start(b[1]) and not _STRING_PREFIX.match(b, 1):
                self.spaced_start[t] = True
                lead = _LEAD.match(b, 1).group()
                if 1 + len(lead) < len(b):
                    spaced[lead].append(t)
            if len(b) > 1 and b[0] == 0x2E and is_name_start(b[1]):
                self.dotted_start[t] = True
                lead = _LEAD.match(b, 1).group()
                if 1 + len(lead) < len(b):
                    dotted[lead].append(t)
        self.ends_with = {k: np.array(v, dtype=np.int64) for k, v in ends.items()}
        self.spaced_ends_with = {k: np.array(v, dtype=np.int64) for k, v in spaced.items()}
        self.dotted_ends_with = {k: np.array(v, dtype=np.int64) for k, v in dotted.items()}
        self.ends_name = ~self.continues  # a first byte that closes an open identifier
        self.ends_name[[t for t in special if t < V]] = False
        for t, b in enumerate(token_bytes):
            if not b or _STRING_PREFIX.match(b):
                self.ends_name[t] = False
        self.reads_name = self.ends_name & ~binds

    def toward(self, remainders: list[bytes], spaced: bool) -> np.ndarray:
        """The tokens that keep the identifier on the way to one of the names whose unwritten
        rest is in `remainders` (an empty rest: the name is written whole): a prefix of a rest,
        or a whole rest and then a byte that ends the name. `spaced`: also after one space."""
        out = np.zeros(self.size, dtype=bool)
        ids: list[int] = []
        get = self.by_bytes.get
        for rest in remainders:
            for k in range(1, len(rest) + 1):
                t = get(rest[:k])
                if t is not None:
                    ids.append(t)
                if spaced:
                    t = get(b" " + rest[:k])
                    if t is not None:
                        ids.append(t)
            if rest:
                hit = self.ends_with.get(rest)
                if hit is not None:
                    out[hit] = True
                if spaced:
                    hit = self.spaced_ends_with.get(rest)
                    if hit is not None:
                        out[hit] = True
            else:
                out |= self.ends_name
        if ids:
            out[np.array(ids, dtype=np.int64)] = True
        return out

    def toward_dotted(self, names: list[bytes]) -> np.ndarray:
        """The tokens that write a dot and then keep on the way to one of `names` (attributes,
        after their receiver's name): the bare dot, `"." + ` a prefix of a name, or a whole name
        and then a byte that ends it."""
        out = np.zeros(self.size, dtype=bool)
        get = self.by_bytes.get
        ids: list[int] = [get(b".")] if names and get(b".") is not None else []
        for name in names:
            for k in range(1, len(name) + 1):
                t = get(b"." + name[:k])
                if t is not None:
                    ids.append(t)
            hit = self.dotted_ends_with.get(name)
            if hit is not None:
                out[hit] = True
        if ids:
            out[np.array(ids, dtype=np.int64)] = True
        return out
