"""What a token does to the lexer: the token-level view of the lexer automaton.

A lexer configuration is `(X, d)`: inside a lexeme that will be terminal `X`, the lexer
automaton in state `d` (the seed's NFA state, refined by the determinized lexer so that the
longest-match rule is exact). Reading a token's bytes from `d`:

- the current lexeme may simply grow (`X` must stay possible);
- or it ends at some byte of the token (`X` must be accepted there), and the rest of the token
  is lexed from the start state: zero or more complete lexemes, then one open lexeme.

Terminals are *announced* when their lexeme starts: the open lexeme at the end of a token
contributes the terminal it will become (one row per choice), complete lexemes contribute theirs
(a newline also contributes its indentation, `Indent`), ignored ones (spaces, comments)
contribute nothing. The announced sequence `S` is what the parser must accept; this module
computes it, vectorized, for the whole vocabulary (`first_lexeme`, used by the builder: the
first lexeme of `LexerAutomaton.lexemes` for all tokens at once, with numpy); the matcher reads
one token at run time by the same rules (`matcher.walk`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from grammar_tools.parsing.incremental import indent_width

from . import bits


@dataclass(frozen=True)
class Indent:
    """The indentation of the line after a newline that completes inside a token.

    `relative`: the token only added `ws` (spaces and tabs) to a newline already open, so the
    width is the open width plus `ws`; otherwise `ws` is the whole indentation."""

    relative: bool
    ws: bytes

    def width(self, start: tuple[int, int] | None) -> tuple[int, int]:
        return indent_width(self.ws, start if self.relative else None)


def indent_of(lexeme_part: bytes, relative_ok: bool) -> Indent:
    """The indentation that a newline lexeme's bytes (as far as a token goes) set."""
    i = lexeme_part.rfind(b"\n")
    if i >= 0:
        return Indent(False, lexeme_part[i + 1 :].replace(b"\r", b""))
    return Indent(relative_ok, lexeme_part)


# ---------------------------------------------------------------- vocabulary-wide


@dataclass(frozen=True)
class TokenMatrix:
    """The usable tokens (non-special, non-empty) as a padded byte matrix, for vectorized walks.

    `ids` ascending. The matrix holds them by first byte (`order`, `first_start`): a lexer
    state's walk starts with the tokens whose first byte it takes, a slice per byte, and reads
    them column by column (`columns`, byte position major, so one position of many tokens is
    contiguous). Nothing is copied per state: at 151k tokens a copy of the matrix per lexer
    state was half the full build's time."""

    ids: np.ndarray  # (n,) int64 token ids, ascending
    order: np.ndarray  # (n,) int64: column k of `columns` is token ids[order[k]]
    columns: np.ndarray  # (L, n) uint8, padded with 0
    lengths: np.ndarray  # (n,) int32, in the columns' order
    first_start: np.ndarray  # (257,) int64: columns first_start[b]:first_start[b + 1] start with byte b
    tail_sets: np.ndarray  # (n, 4) uint64, in the columns' order: the bytes after each token's first, as bits
    first_bytes: np.ndarray  # (n,) int64, in the ids' order: each token's first byte

    @property
    def max_length(self) -> int:
        return int(self.columns.shape[0])

    @classmethod
    def from_vocab(cls, token_bytes, special) -> TokenMatrix:
        ids = np.array([i for i, b in enumerate(token_bytes) if b and i not in special], dtype=np.int64)
        first = np.array([token_bytes[i][0] for i in ids.tolist()], dtype=np.int64)
        order = np.argsort(first, kind="stable")
        L = max((len(token_bytes[i]) for i in ids.tolist()), default=1)
        data = np.zeros((len(ids), L), dtype=np.uint8)
        lengths = np.zeros(len(ids), dtype=np.int32)
        for k, i in enumerate(ids[order].tolist()):
            b = token_bytes[i]
            data[k, : len(b)] = np.frombuffer(b, dtype=np.uint8)
            lengths[k] = len(b)
        first_start = np.concatenate(([0], np.cumsum(np.bincount(first, minlength=256)))).astype(np.int64)
        held = np.zeros((len(ids), 256), dtype=bool)
        k, at = np.nonzero((np.arange(L)[None, :] < lengths[:, None]) & (np.arange(L)[None, :] > 0))
        held[k, data[k, at]] = True  # the real bytes after the first, not the padding
        tail_sets = bits.pack(held)
        return cls(ids, order, np.ascontiguousarray(data.T), lengths, first_start, tail_sets, first)


_MANY_TOKENS = 20_000  # below it, the test of `staying` costs more than the walk it saves


@dataclass(frozen=True)
class StayingBytes:
    """Per lexer state, the bytes that keep it in that state, as bits (`sets[of_state[d]]`: a few
    dozen distinct sets over thousands of states, 34 for Python's 2,716), and per first byte and
    set, which tokens of `tokens` with that first byte leave the set after it: the ones a walk
    must read (`walked`, computed once per pair: testing every token for every lexer state was
    half of the full store's walk, 5.5 of 11.3 s CPU at 151k tokens)."""

    tokens: TokenMatrix
    sets: np.ndarray  # (k, 4) uint64, distinct
    of_state: np.ndarray  # (states,) int64: the state's set in `sets`
    _walked: dict[tuple[int, int], np.ndarray] = field(default_factory=dict, repr=False, compare=False)

    def walked(self, first: int, state: int) -> np.ndarray:
        """Offsets, within the tokens whose first byte is `first` (`tokens.first_start`), of
        those with a later byte that does not keep lexer state `state` where it is (int32,
        ascending)."""
        key = (first, int(self.of_state[state]))
        out = self._walked.get(key)
        if out is None:
            lo, hi = self.tokens.first_start[first], self.tokens.first_start[first + 1]
            leaving = (self.tokens.tail_sets[lo:hi] & ~self.sets[key[1]]).any(axis=1)
            out = self._walked[key] = np.flatnonzero(leaving).astype(np.int32)
        return out


def staying_bytes(table: np.ndarray, tokens: TokenMatrix) -> StayingBytes:
    """Per lexer state, the bytes that keep it in that state (`StayingBytes`)."""
    loops = table == np.arange(table.shape[0])[:, None]
    sets, of_state = np.unique(bits.pack(loops), axis=0, return_inverse=True)
    return StayingBytes(tokens, sets, of_state.reshape(-1).astype(np.int64))


def first_lexeme(table: np.ndarray, tokens: TokenMatrix, d: int, staying: StayingBytes | None = None):
    """The tokens whose first byte state `d` takes, and where their current lexeme ends.

    Returns (ids, end, state), ids ascending: end[k] is the offset of the first byte of token
    ids[k] that the lexeme can't take (-1 if it takes the whole token; then state[k] is the
    state at the token's end), state[k] the lexer state before that byte. Tokens whose first
    byte `d` can't take (their lexeme ends at offset 0) are left out: what they announce does
    not depend on d. Each token is read only while its lexeme lasts; with `staying`
    (`staying_bytes(table, tokens)`), not at all when its bytes after the first keep the lexer where the
    first led (inside strings and comments; 151k tokens: the walks 16.1 -> 12.5 s CPU).

    (A level-by-level walk of the vocabulary's trie reads a shared prefix once, 333k prefixes
    for Qwen's 976k token bytes, but its per-level bookkeeping in numpy made it no faster.)"""
    row = table[d]
    starts = tokens.first_start
    taken = np.flatnonzero(row >= 0).tolist()
    # in the ids' order: the state after each token's first byte (-1: d can't take it); a token
    # that is not walked further takes the whole token in that state (its bytes stay there)
    after_first = row[tokens.first_bytes]
    end = np.where(after_first >= 0, -1, 0).astype(np.int32)
    n = sum(int(starts[b + 1] - starts[b]) for b in taken)
    if staying is not None and n >= _MANY_TOKENS:
        # a token whose bytes after the first all keep the lexer in the state the first led to
        # (inside a string or a comment: most tokens) ends there, its lexeme going on: no walk.
        # The tokens of one first byte b all go to row[b] first: `staying` knows which leave it.
        parts = [staying.walked(b, int(row[b])) + starts[b] for b in taken]
    else:
        parts = [np.arange(starts[b], starts[b + 1]) for b in taken]
    walked = np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)  # columns
    # the walked tokens only, in the columns' order
    cur = row[tokens.columns[0, walked]].astype(np.int32)
    lengths = tokens.lengths[walked]
    stop_at = np.full(walked.size, -1, dtype=np.int32)
    active = np.arange(walked.size)
    pos = 1
    while active.size and pos < tokens.max_length:
        active = active[lengths[active] > pos]
        if not active.size:
            break
        nxt = table[cur[active], tokens.columns[pos, walked[active]]]
        stop = nxt < 0
        if stop.any():
            stop_at[active[stop]] = pos
            active = active[~stop]
            nxt = nxt[~stop]
        cur[active] = nxt
        pos += 1
    # back to the ids' order (0 in `end` marks the tokens left out)
    state = after_first.astype(np.int32)
    at = tokens.order[walked]
    end[at] = stop_at
    state[at] = cur
    sel = np.flatnonzero(end)
    return tokens.ids[sel], end[sel], state[sel]
