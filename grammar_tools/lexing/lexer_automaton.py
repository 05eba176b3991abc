"""The lexer automaton: every terminal DFA joined behind one start state, then determinized.

The seed design joins the terminal DFAs by epsilon edges into a lexer NFA. We determinize that
NFA (subset construction over the per-terminal states) and minimize it while keeping, for each
state, which terminals it accepts. A state of the result is the lexer's position inside the
current lexeme, with the set of terminals the lexeme may still turn into (`possible`) and those
it would be if it ended here (`accepting`).

Lexing follows CPython's tokenizer: longest match over all terminals, decided one byte ahead.
A lexeme ends where the next byte can't extend it (`step(state, byte) == DEAD`); it must then be
in an accepting state, else the text is a lexical error. Keywords win over NAME, except the soft
keywords (`match`, `case`, `type`), where both stay and the parser decides.

The automaton is cached as `.npz` keyed by the grammar hash, the source of this code and what it
imports (`cache.source_hash`), and interegular's version.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import cache
from . import terminal_automata
from .byte_automaton import DEAD, ByteDFA, minimize
from ..grammar import BRACKET_CLOSE, BRACKET_OPEN, NEWLINE, SOFT_KEYWORDS, Grammar, load_grammar

START = 0


class LexError(ValueError):
    """The text can't be split into terminals at `pos` (a byte offset)."""

    def __init__(self, pos: int, message: str = "invalid token") -> None:
        super().__init__(f"{message} at byte {pos}")
        self.pos = pos


@dataclass(eq=False)
class LexerAutomaton:
    grammar: Grammar
    table: np.ndarray  # (n_states, 256) int32, DEAD = -1
    accepting: list[int]  # per state: bitset of terminal ids it accepts
    possible: list[int]  # per state: bitset of terminal ids still reachable
    rows: list[list[int]] = field(repr=False)  # `table` as lists, for fast stepping

    @property
    def n_states(self) -> int:
        return int(self.table.shape[0])

    @functools.cached_property
    def hash(self) -> str:
        """Hash of the grammar and of the automaton itself: what a mask store depends on."""
        acc = np.array(self.accepting, dtype=object).astype(str)
        return cache.content_hash(self.grammar.hash, self.table.tobytes(), "|".join(acc))

    @functools.cached_property
    def newline_state(self) -> int:
        """The state after a newline: a document starts here, as if after a virtual newline,
        so that leading blank lines, comments and indentation lex as in CPython."""
        return self.rows[START][0x0A]

    @functools.cached_property
    def accepting_ids(self) -> list[tuple[int, ...]]:
        return [bit_indices(m) for m in self.accepting]

    @functools.cached_property
    def possible_ids(self) -> list[tuple[int, ...]]:
        return [bit_indices(m) for m in self.possible]

    @functools.cached_property
    def grows(self) -> list[bool]:
        """Per state: whether some byte takes the lexeme further (False: it has ended)."""
        return (self.table >= 0).any(axis=1).tolist()

    @functools.cached_property
    def newline_id(self) -> int:
        return self.grammar.term_id[NEWLINE]

    def step(self, state: int, byte: int) -> int:
        return self.rows[state][byte]

    def run(self, data: bytes, state: int = START) -> int:
        """The state after `data` read as one lexeme (DEAD if it can't be one)."""
        try:
            _, stop, state = next(self.lexemes(data, state))
        except LexError:
            return DEAD
        return state if stop == len(data) else DEAD

    def lexemes(self, data: bytes, state: int | None = None, pos: int = 0, end: int | None = None):
        """Split `data[pos:end]` into lexemes by longest match, starting inside a lexeme in
        `state` (default: a fresh document, after the virtual newline); each lexeme after the
        first starts in `START`. The one lexing loop: every reader lexes with it (one lexeme:
        `next(lexemes(...))`).

        Yields each lexeme as `(start, stop, lexer_state)`: the complete ones (`stop < end`:
        the byte at `stop` can't extend them), then last the open one (`stop == end`: more
        text may extend it), so a reader tells the open lexeme by `stop == end`. Raises
        `LexError` at the first byte that no terminal can take (a lexeme that can't grow and
        isn't accepted there).
        """
        rows = self.rows
        accepting = self.accepting
        row0 = rows[START]
        if state is None:
            state = self.newline_state
        end = len(data) if end is None else end
        start = pos
        for i in range(pos, end):
            nxt = rows[state][data[i]]
            if nxt >= 0:
                state = nxt
                continue
            if not accepting[state]:
                raise LexError(i)
            yield start, i, state
            start = i
            state = row0[data[i]]
            if state < 0:
                raise LexError(i)
        yield start, end, state

    def lex(self, data: bytes, state: int | None = None, pos: int = 0, end: int | None = None):
        """`lexemes` as lists: returns `(lexemes, state, start)`, the completed lexemes as
        `(start, end, lexer_state)` and the open lexeme's state and start."""
        out = list(self.lexemes(data, state, pos, end))
        start, _, state = out.pop()
        return out, state, start

    def brackets_stay_open(self, data: bytes, pos: int, depth: int) -> bool:
        """Whether `depth` brackets open at `pos` (a lexeme start) are still open at the end of
        `data`: its lexemes from `pos` on, brackets counted (False where the text does not lex)."""
        tid = self.grammar.term_id
        opens = {tid[n] for n in BRACKET_OPEN}
        closes = {tid[n] for n in BRACKET_CLOSE}
        accepting = self.accepting_ids
        try:
            for _, _, state in self.lexemes(data, START, pos, len(data)):
                terms = accepting[state]
                if not opens.isdisjoint(terms):
                    depth += 1
                elif not closes.isdisjoint(terms):
                    depth -= 1
                    if depth <= 0:
                        return False
        except LexError:
            return False
        return depth > 0


def bit_indices(mask: int) -> tuple[int, ...]:
    """The positions of the set bits of `mask`, lowest first."""
    out = []
    i = 0
    while mask:
        if mask & 1:
            out.append(i)
        mask >>= 1
        i += 1
    return tuple(out)


def build_lexer_automaton(grammar: Grammar) -> LexerAutomaton:
    dfas = terminal_automata.terminal_dfas(grammar)
    names = sorted(dfas)
    tid = grammar.term_id
    ids = [tid[n] for n in names]
    tables = [dfas[n].table for n in names]
    finals = [dfas[n].accepting for n in names]
    name_idx = names.index("NAME")
    name_re = dfas["NAME"]
    # literal terminals spelled like a name: keywords; they win over NAME unless soft
    keyword_ids = {
        tid[n]
        for n, v in grammar.literal_terminals().items()
        if name_re.matches(v.encode()) and n not in SOFT_KEYWORDS
    }

    start_vec = tuple((k, 0) for k in range(len(names)))
    index = {start_vec: 0}
    order = [start_vec]
    rows = []
    i = 0
    while i < len(order):
        vec = order[i]
        i += 1
        row = np.full(256, DEAD, dtype=np.int32)
        # per byte, each terminal's next state (a list per byte: a few terminals at a time,
        # which plain lists step through faster than numpy calls per byte)
        columns = np.stack([tables[k][s] for k, s in vec]).T.tolist()  # 256 x len(vec)
        for b, col in enumerate(columns):
            alive = tuple((vec[j][0], n) for j, n in enumerate(col) if n >= 0)
            if not alive:
                continue
            if alive not in index:
                index[alive] = len(order)
                order.append(alive)
            row[b] = index[alive]
        rows.append(row)
    table = np.stack(rows)

    def accept_mask(vec) -> int:
        m = 0
        for k, s in vec:
            if finals[k][s]:
                m |= 1 << ids[k]
        if m & sum(1 << t for t in keyword_ids):
            m &= ~(1 << tid["NAME"])
        return m

    acc = [accept_mask(v) for v in order]
    labels = {m: j for j, m in enumerate(sorted(set(acc)))}
    dfa = minimize(ByteDFA(table, np.array([a != 0 for a in acc])), [labels[a] for a in acc])
    # carry the accept sets over to the minimized states
    inv = {j: m for m, j in labels.items()}
    new_acc = [0] * dfa.n_states
    mapping = _state_mapping(ByteDFA(table, np.array([a != 0 for a in acc])), dfa)
    for old, new in enumerate(mapping):
        if new >= 0:
            new_acc[new] = acc[old]
    del inv, name_idx
    return _finish(grammar, dfa.table, new_acc)


def _state_mapping(big: ByteDFA, small: ByteDFA) -> list[int]:
    """For each state of `big`, the equivalent state of its minimization `small` (by walking
    both in lockstep from their starts)."""
    mapping = [-1] * big.n_states
    mapping[0] = 0
    stack = [0]
    while stack:
        s = stack.pop()
        t = mapping[s]
        for b in range(256):
            s2 = int(big.table[s, b])
            if s2 >= 0 and mapping[s2] < 0:
                mapping[s2] = int(small.table[t, b])
                stack.append(s2)
    return mapping


def _finish(grammar: Grammar, table: np.ndarray, accepting: list[int]) -> LexerAutomaton:
    n = table.shape[0]
    possible = list(accepting)
    succ = [sorted({int(t) for t in table[s] if t >= 0}) for s in range(n)]
    changed = True
    while changed:
        changed = False
        for s in range(n):
            m = possible[s]
            for t in succ[s]:
                m |= possible[t]
            if m != possible[s]:
                possible[s] = m
                changed = True
    return LexerAutomaton(grammar, table, accepting, possible, table.tolist())


def _masks_to_bool(masks: list[int], width: int) -> np.ndarray:
    return np.array([[m >> t & 1 for t in range(width)] for m in masks], dtype=bool)


def _bool_to_masks(arr: np.ndarray) -> list[int]:
    weights = [1 << t for t in range(arr.shape[1])]
    return [sum(w for w, b in zip(weights, row) if b) for row in arr.tolist()]


def cache_path(grammar: Grammar) -> Path:
    """The cached automaton's file: keyed by the grammar, this code and what it imports, and
    interegular (which turns the regular expressions into automata)."""
    key = cache.content_hash(
        grammar.hash, cache.source_hash(sys.modules[__name__]), cache.library_versions("interegular")
    )
    return cache.cache_dir() / f"lexer-{key}.npz"


def load_lexer_automaton(grammar: Grammar | None = None) -> LexerAutomaton:
    """The grammar's lexer automaton (the default grammar's with None), one per grammar: the
    default asked for by None and by the grammar itself is the same automaton (two copies held
    ~18 MiB in the server, docs/memory.md)."""
    return _load_lexer_automaton(grammar or load_grammar())


@functools.lru_cache(maxsize=4)
def _load_lexer_automaton(grammar: Grammar) -> LexerAutomaton:
    path = cache_path(grammar)
    data = cache.read_npz(path)
    if data is not None:
        return _finish(grammar, data["table"], _bool_to_masks(data["accepting"]))
    lexer = build_lexer_automaton(grammar)
    cache.write_npz(
        path, table=lexer.table, accepting=_masks_to_bool(lexer.accepting, grammar.n_terminals)
    )
    return lexer
