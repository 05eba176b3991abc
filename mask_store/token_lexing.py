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
computes it for one token (`walk`, used by the matcher at run time) and, vectorized, for the
whole vocabulary (`first_lexeme`, used by the builder: the first lexeme of
`LexerAutomaton.lexemes` for all tokens at once, with numpy). Both follow the same rules.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from grammar_tools.parsing.indentation import indent_width
from grammar_tools.lexing.lexer_automaton import LexError, LexerAutomaton


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


def extend_width(width: tuple[int, int] | None, part: bytes) -> tuple[int, int]:
    """The open newline's width after more of its bytes."""
    return indent_of(part, True).width(width)


@dataclass(frozen=True)
class TokenWalk:
    """A token read from lexer state `d`.

    first_end: offset where the current lexeme ends (None: it grows through the whole token);
    first_state: the lexer state there (or at the token's end if it doesn't end);
    lexemes: the complete lexemes after it, as (start, end, state);
    final_start, final_state: the open lexeme at the token's end (if first_end is not None)."""

    first_end: int | None
    first_state: int
    lexemes: tuple[tuple[int, int, int], ...]
    final_start: int
    final_state: int


def walk(lexer: LexerAutomaton, d: int, data: bytes) -> TokenWalk | None:
    """Read `data` from state `d` (`LexerAutomaton.lexemes`); None if the lexer dies (a
    lexical error)."""
    lexemes = lexer.lexemes(data, d)
    try:
        _, first_end, first_state = next(lexemes)
        if first_end == len(data):  # the lexeme grows through the whole token
            return TokenWalk(None, first_state, (), 0, first_state)
        rest = tuple(lexemes)
    except LexError:
        return None
    final_start, _, final_state = rest[-1]
    return TokenWalk(first_end, first_state, rest[:-1], final_start, final_state)


# ---------------------------------------------------------------- vocabulary-wide


@dataclass
class TokenMatrix:
    """The vocabulary as a padded byte matrix, for vectorized walks."""

    data: np.ndarray  # (V, L) uint8, padded with 0
    lengths: np.ndarray  # (V,) int32
    usable: np.ndarray  # (V,) bool: non-special, non-empty

    @classmethod
    def from_vocab(cls, token_bytes, special) -> TokenMatrix:
        V = len(token_bytes)
        L = max(len(b) for b in token_bytes)
        data = np.zeros((V, max(L, 1)), dtype=np.uint8)
        lengths = np.zeros(V, dtype=np.int32)
        usable = np.zeros(V, dtype=bool)
        for i, b in enumerate(token_bytes):
            data[i, : len(b)] = np.frombuffer(b, dtype=np.uint8)
            lengths[i] = len(b)
            usable[i] = bool(b) and i not in special
        return cls(data, lengths, usable)


def first_lexeme(table: np.ndarray, tokens: TokenMatrix, d: int, ids: np.ndarray):
    """For tokens `ids` read from state `d`: where the current lexeme ends and in which state.

    Returns (end, state): end[k] is the offset of the first byte that the lexeme can't take
    (-1 if it takes the whole token, then state[k] is the state at the token's end), and
    state[k] the lexer state before that byte; -2 in `end` marks tokens that die (a byte the
    lexeme can't take where it can't end is left to the caller: state says where)."""
    n = len(ids)
    end = np.full(n, -1, dtype=np.int32)
    cur = np.full(n, d, dtype=np.int32)
    active = np.arange(n)
    lengths = tokens.lengths[ids]
    data = tokens.data[ids]
    pos = 0
    L = data.shape[1]
    while active.size and pos < L:
        active = active[lengths[active] > pos]
        if not active.size:
            break
        nxt = table[cur[active], data[active, pos]]
        stop = nxt < 0
        if stop.any():
            end[active[stop]] = pos
            active = active[~stop]
            nxt = nxt[~stop]
        cur[active] = nxt
        pos += 1
    return end, cur
