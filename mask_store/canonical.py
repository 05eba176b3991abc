"""Canonical tokenization: only the token sequences the tokenizer itself would produce (seed 003).

A constraint can lead a model into spellings its tokenizer never produces (`ret` + `urn` for
`return`, `\\n` + ` ` + `   return` for an indented line): the model never saw them in training,
they skew its distribution and slow decoding. `CanonicalPairs` says, after a token, which next
tokens keep the sequence canonical; the matcher ANDs it with the grammar's mask.

Why pairs suffice, for byte-level BPE with GPT-2's pre-tokenizer (`junction`, below):
the encoding cuts the text into pre-tokens and runs BPE inside each one; within a pre-token, a
sequence is BPE's output iff each adjacent pair is (the merges that build a token only see its
own bytes, and a pair is canonical iff no merge across its junction fires first). The pair
verdict is exact except where the pre-token cut depends on text outside the pair; there the
state carries one more fact (`Continuation`):
- `'` followed by `s`/`t`/`re`/...: a contraction only where `'` starts a match, not inside a
  run of punctuation (`('` + `s`): the state remembers that `'` continued a run;
- a whitespace token followed by a single whitespace character that would merge with it
  (`\\n` + `\\n`, `\\n   ` + ` `): canonical only if the next token starts with a
  non-space, which gives that last character away (`\\n\\nx` is `\\n` + `\\n` + `x`): allowed,
  and the state then requires a non-space.
What is not exact, on the permissive side only (allowed though perhaps not canonical): a
junction beside a multi-byte character that the pair does not complete (its class is unknown),
and added non-special tokens. Nothing canonical is ever masked (the stdlib walk checks it).

The merge check, from the merge ranks (no pair is encoded): BPE applies merges in rank order
(each merge ranks after the ones that made its two parts; checked at build), leftmost first on
ties. While a and b are built, the token at a's right edge runs through a's *right spine* (a,
its right part, that part's right part, ... down to a byte), each alive from the merge that made
it until the merge that joins it to its left neighbour; b's left edge runs through its *left
spine* likewise. The pair is not canonical iff some merge (x, y) has x on a's right spine and y
on b's left spine, both alive at its rank (x strictly: a merge inside a at the same rank is to
the left and goes first; y not: the junction is left of a merge inside b). For a given a, the
bs it excludes are, per such merge, a prefix of the tokens whose left spine holds y sorted by
when y dies in them: a row is a union of slices, computed on first use (p50 0.05 ms) and kept
in an LRU. The tables (spines, indexes, the classes of every token's edges) are built in about
a second from `tokenizer.json` and cached as .npz, keyed by the tokenizer and the code
(`canonical_tables.py`, which also says how the junction table `junction` follows from GPT-2's
regex). Here is what a request reads: the states, the junction table and the rows.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from . import bits

ROW_CACHE = 1024  # rows kept, in bits (6 KB each for 49,152 tokens; 49 KB as booleans)


def unpack_row(packed: np.ndarray, count: int) -> np.ndarray:
    """(count,) bool, read-only, from `bits.pack`'s words: the masks memoized across requests are
    kept in bits (here and in `compiled.CompiledGrammar`)."""
    row = bits.unpack(packed, count)
    row.setflags(write=False)
    return row


class Continuation(IntEnum):
    """What the state knows beyond its last token."""

    OFF = 0  # no filtering (canonical tokenization turned off)
    START = 1  # no token before: anything may come
    FREE = 2  # the last token's own kind decides
    IN_PUNCT_RUN = 3  # the last token is `'` inside a run of punctuation (no contraction)
    ENDS_WHITESPACE_RUN = 4  # the last token must end its whitespace run: a non-space next


@dataclass(frozen=True)
class CanonicalState:
    last: int  # the last token (-1: none)
    continuation: Continuation
    active: bool = field(init=False)  # not OFF: the masks are filtered (read on every step: a field)

    def __post_init__(self) -> None:
        object.__setattr__(self, "active", self.continuation is not Continuation.OFF)


OFF = CanonicalState(-1, Continuation.OFF)
START = CanonicalState(-1, Continuation.START)


class RunKind(IntEnum):
    """What a token's text ends with, as the junction sees it (the token on the left)."""

    LETTERS = 0  # [ ]letters
    DIGITS = 1  # [ ]digits
    PUNCT = 2  # [ ]punctuation (an apostrophe inside a run of punctuation included)
    APOSTROPHE = 3  # `'` starting a match: a contraction may follow
    CONTRACTION = 4  # 's 't 're 've 'm 'll 'd
    SPACE = 5  # a single space: joins the run after it
    WHITESPACE_CHAR = 6  # one whitespace character other than a space
    WHITESPACE_RUN = 7  # two or more whitespace characters
    OPEN_CHAR = 8  # ends inside a multi-byte character
    UNKNOWN = 9  # ends with a character whose first byte is in an earlier token


WHITESPACE_KINDS = (RunKind.SPACE, RunKind.WHITESPACE_CHAR, RunKind.WHITESPACE_RUN)


class Head(IntEnum):
    """How a token's text starts, as the junction sees it (the token on the right)."""

    LETTER = 0
    DIGIT = 1
    PUNCT = 2
    APOSTROPHE_RUN = 3  # `'` then punctuation or nothing
    CONTRACTION = 4  # the whole token is a contraction
    SPACE_RUN = 5  # a space, then a letter, digit or punctuation run
    WHITESPACE = 6  # whitespace only
    CONTINUATION = 7  # starts inside a multi-byte character
    UNKNOWN = 8  # starts with a character the token does not complete


class Contraction(IntEnum):
    """For a token starting with a letter: what `'` before it would make."""

    NONE = 0  # `'` + r: no contraction
    EXACT = 1  # `'` + s, re, ...: the token completes a contraction
    LONGER = 2  # `'` + self: the contraction `'s` ends inside the token


class Junction(IntEnum):
    BOUNDARY = 0
    JOINED = 1
    STRADDLE = 2
    INVALID = 3  # not UTF-8: never in a tokenizer's output
    UNKNOWN = 4


B, J, S = Junction.BOUNDARY, Junction.JOINED, Junction.STRADDLE
# columns: LETTER DIGIT PUNCT APOSTROPHE_RUN CONTRACTION SPACE_RUN WHITESPACE (valid UTF-8 heads)
_TABLE = {
    RunKind.LETTERS: (J, B, B, B, B, B, B),
    RunKind.DIGITS: (B, J, B, B, B, B, B),
    RunKind.PUNCT: (B, B, J, J, S, B, B),
    RunKind.APOSTROPHE: (None, B, J, J, S, B, B),  # LETTER: by `Contraction`
    RunKind.CONTRACTION: (B, B, B, B, B, B, B),
    RunKind.SPACE: (J, J, J, J, S, B, J),
    RunKind.WHITESPACE_CHAR: (B, B, B, B, B, B, J),
    RunKind.WHITESPACE_RUN: (S, S, S, S, S, B, J),
}


def junction(kind: RunKind, h: Head, c: Contraction = Contraction.NONE, digits_isolated: bool = False) -> Junction:
    """How the pre-tokenizer cuts the text of a token of kind `kind` followed by one that
    starts as `h` (see the module docstring); `digits_isolated`: every digit is cut alone first
    (StarCoder's pre-tokenizer)."""
    if digits_isolated and (kind is RunKind.DIGITS or h is Head.DIGIT):
        return B
    if kind is RunKind.OPEN_CHAR:
        return J if h is Head.CONTINUATION else Junction.INVALID
    if h is Head.CONTINUATION:
        return J if kind is RunKind.UNKNOWN else Junction.INVALID
    if kind is RunKind.UNKNOWN or h is Head.UNKNOWN:
        return Junction.UNKNOWN
    if kind is RunKind.APOSTROPHE and h is Head.LETTER:
        return (B, J, S)[c]
    return _TABLE[kind][h]


@dataclass(frozen=True, eq=False)
class CanonicalTables:
    """Everything the rows are computed from (all int/bool arrays: stored as .npz)."""

    kind: np.ndarray  # (V,) int8 RunKind of each token on the left of a junction
    head: np.ndarray  # (V,) int8 Head of each token on the right
    contraction: np.ndarray  # (V,) int8 Contraction
    single_space: np.ndarray  # (V,) bool: one whitespace character
    free: np.ndarray  # (V,) bool: special and added tokens: left alone, before and after
    reachable: np.ndarray  # (V,) bool: the tokenizer produces it for its own text
    birth: np.ndarray  # (V,) int32 rank of the merge that makes the token (-1: a byte)
    left: np.ndarray  # (V,) int32 its left part (-1: a byte)
    right: np.ndarray  # (V,) int32 its right part
    spine_start: np.ndarray  # (V+1,) int64: tokens whose left spine holds y, by y
    spine_token: np.ndarray  # int32 those tokens, latest death of y first
    spine_death: np.ndarray  # int32 the rank at which y is merged into its parent there
    merge_start: np.ndarray  # (V+1,) int64: merges (x, y) by x
    merge_right: np.ndarray  # int32 y
    merge_rank: np.ndarray  # int32 rank, ascending within x
    digits_isolated: np.ndarray  # () bool: every digit is a piece of its own first (StarCoder's pre-tokenizer)

    FIELDS = ("kind", "head", "contraction", "single_space", "free", "reachable", "birth", "left", "right",
              "spine_start", "spine_token", "spine_death", "merge_start", "merge_right", "merge_rank",
              "digits_isolated")

    @property
    def size(self) -> int:
        return int(self.kind.shape[0])


# ---------------------------------------------------------------------------------- rows


class CanonicalPairs:
    """Which next tokens keep a token sequence canonical, from a `CanonicalState`. Immutable
    after construction; rows are computed on first use and kept (thread-safe)."""

    def __init__(self, tables: CanonicalTables, row_cache: int = ROW_CACHE) -> None:
        t = self.tables = tables
        self.V = t.size
        self.digits_isolated = bool(t.digits_isolated)
        self._never = int(t.birth.max()) + 2
        # the left-spine entries as one sorted key (y, then latest death first): the entries of y
        # alive at rank m are those with key <= y * span + (never - m), found for all y at once
        self._span = self._never + 1
        ys = np.repeat(np.arange(self.V, dtype=np.int64), np.diff(t.spine_start))
        self._spine_key = ys * self._span + (self._never - t.spine_death.astype(np.int64))
        ok = t.reachable | t.free
        # per left kind: the tokens allowed without a merge check, and the joined ones
        self._allow: dict[RunKind, np.ndarray] = {}
        self._joined: dict[RunKind, np.ndarray] = {}
        for k in RunKind:
            j = self.junctions(k)
            self._allow[k] = ok & (t.free | (j == Junction.BOUNDARY) | (j == Junction.UNKNOWN))
            self._joined[k] = ok & ~t.free & (j == Junction.JOINED)
        # what a whitespace run that must end may not be followed by: more whitespace, nor (digits
        # cut alone) a digit, before which the run ends with its piece, whole
        ending = [Head.SPACE_RUN, Head.WHITESPACE] + ([Head.DIGIT] if self.digits_isolated else [])
        self._starts_space = np.isin(t.head, ending)
        xs = np.repeat(np.arange(self.V), np.diff(t.merge_start)).tolist()
        self._rank = dict(zip(zip(xs, t.merge_right.tolist()), t.merge_rank.tolist()))
        self._anything = np.ones(self.V, dtype=bool)
        self._anything.setflags(write=False)
        self._row = functools.lru_cache(maxsize=row_cache)(self._packed_row)

    def junctions(self, k: RunKind) -> np.ndarray:
        """(V,) Junction of a token of kind `k` with every token."""
        t = self.tables
        table = np.zeros((len(Head), len(Contraction)), dtype=np.int8)
        for h in Head:
            for c in Contraction:
                table[h, c] = junction(k, h, c, self.digits_isolated)
        return table[t.head, t.contraction]

    # ------------------------------------------------------------------ the merge check

    def _right_spine(self, a: int):
        t, death = self.tables, self._never
        while a >= 0:
            yield a, death
            death, a = int(t.birth[a]), int(t.right[a])

    def conflicts(self, a: int) -> np.ndarray:
        """(V,) bool: the tokens b for which a merge across a|b fires before a and b are built
        (read as one pre-token)."""
        t = self.tables
        out = np.zeros(self.V, dtype=bool)
        ys, ms = [], []
        for x, death in self._right_spine(a):
            lo, hi = int(t.merge_start[x]), int(t.merge_start[x + 1])
            k = lo + int(np.searchsorted(t.merge_rank[lo:hi], death))  # merges before x dies
            ys.append(t.merge_right[lo:k])
            ms.append(t.merge_rank[lo:k])
        y = np.concatenate(ys).astype(np.int64)
        if not y.size:
            return out
        start = t.spine_start[y]
        end = np.searchsorted(self._spine_key, y * self._span + (self._never - np.concatenate(ms)), side="right")
        n = end - start  # the tokens of y's list in which y is alive at the merge's rank: a prefix
        total = int(n.sum())
        if total:
            offsets = np.repeat(start - np.concatenate(([0], np.cumsum(n)[:-1])), n)
            out[t.spine_token[offsets + np.arange(total)]] = True
        return out

    def conflict(self, a: int, b: int) -> bool:
        """`conflicts(a)[b]`, for one pair: the spines against each other."""
        t = self.tables
        lspine = []
        y, death = b, self._never
        while y >= 0:
            lspine.append((y, death))
            death, y = int(t.birth[y]), int(t.left[y])
        for x, xdeath in self._right_spine(a):
            for y, ydeath in lspine:
                m = self._rank.get((x, y))
                if m is not None and m < xdeath and m <= ydeath:
                    return True
        return False

    # ------------------------------------------------------------------ states

    def _kind(self, state: CanonicalState) -> RunKind:
        if state.continuation is Continuation.IN_PUNCT_RUN:
            return RunKind.PUNCT
        return RunKind(int(self.tables.kind[state.last]))

    def _packed_row(self, last: int, kind: RunKind, ends_ws_run: bool) -> np.ndarray:
        """`_compute_row` in bits, (W,) uint64 words as the matcher's masks (what the row cache
        keeps; read-only)."""
        row = bits.pack(self._compute_row(last, kind, ends_ws_run))
        row.setflags(write=False)
        return row

    def _compute_row(self, last: int, kind: RunKind, ends_ws_run: bool) -> np.ndarray:
        joined = self._joined[kind]
        row = self._allow[kind] | (joined & ~self.conflicts(last))
        if kind in WHITESPACE_KINDS:
            row |= joined & self.tables.single_space  # allowed where the run ends after it
        if ends_ws_run:
            row &= ~self._starts_space
        row.setflags(write=False)
        return row

    def unconstrained(self, state: CanonicalState) -> bool:
        """Whether anything may follow (off, nothing before, or a token outside the rules)."""
        t = self.tables
        return (state.continuation in (Continuation.OFF, Continuation.START)
                or bool(t.free[state.last]) or not t.reachable[state.last])

    def allowed_after(self, state: CanonicalState) -> np.ndarray:
        """(V,) bool, read-only: the tokens that keep the sequence canonical after `state`
        (all of them where `unconstrained`)."""
        if self.unconstrained(state):
            return self._anything
        return unpack_row(self._row(state.last, self._kind(state), state.continuation is Continuation.ENDS_WHITESPACE_RUN),
                          self.V)

    def allowed_after_bits(self, state: CanonicalState) -> np.ndarray | None:
        """`allowed_after` in bits: (W,) uint64 words, read-only (`bits`' layout, as the
        matcher's masks); None where every token is allowed (`unconstrained`)."""
        if self.unconstrained(state):
            return None
        return self._row(state.last, self._kind(state), state.continuation is Continuation.ENDS_WHITESPACE_RUN)

    def after(self, state: CanonicalState, token: int) -> CanonicalState:
        """The state once `token` follows."""
        if state.continuation is Continuation.OFF:
            return state
        t = self.tables
        if not 0 <= token < self.V:
            raise ValueError(f"token id {token} outside the vocabulary ({self.V})")
        if t.free[token]:
            return START
        if self.unconstrained(state):
            return CanonicalState(token, Continuation.FREE)
        k = self._kind(state)
        j = junction(k, Head(int(t.head[token])), Contraction(int(t.contraction[token])), self.digits_isolated)
        if j is Junction.JOINED and t.kind[token] == RunKind.APOSTROPHE:
            return CanonicalState(token, Continuation.IN_PUNCT_RUN)
        if (j is Junction.JOINED and k in WHITESPACE_KINDS and t.single_space[token]
                and self.conflict(state.last, token)):
            return CanonicalState(token, Continuation.ENDS_WHITESPACE_RUN)
        return CanonicalState(token, Continuation.FREE)

    def state_after(self, ids, state: CanonicalState = START) -> CanonicalState:
        """The state after the token ids `ids` (the prompt before a completion)."""
        if state.continuation is Continuation.START:
            ids = list(ids)[-8:]  # the continuation depends on the last few tokens only
        for i in ids:
            state = self.after(state, int(i))
        return state

    def is_canonical(self, ids, whole_text: bool = False) -> bool:
        """Whether every step of `ids` is allowed (as the masks would have it); `whole_text`:
        the ids are all the text, so a whitespace run that had to end before a non-space
        ends at the end of the text instead (not canonical)."""
        state = START
        for i in ids:
            if not self.allowed_after(state)[int(i)]:
                return False
            state = self.after(state, int(i))
        return not whole_text or state.continuation is not Continuation.ENDS_WHITESPACE_RUN

    def row_cache_info(self):
        return self._row.cache_info()
