"""Byte-level finite automata: the shared machinery under every lexer automaton.

Terminals are matched on UTF-8 bytes, never on decoded characters, because a model's tokens
are byte strings that may end in the middle of a character. This module holds:

- `ByteNFA`: a builder with byte-range edges and epsilon edges;
- `ByteDFA`: an immutable deterministic automaton, `table[state, byte] -> state` (-1 = dead);
- `determinize` (subset construction) and `minimize` (Moore partition refinement, numpy);
- `utf8_byte_ranges`: code point ranges -> sequences of byte ranges (the UTF-8 encoding of a
  character class, so that a class like "any character but a newline" accepts exactly the
  valid UTF-8 encodings of its characters and nothing else);
- `dfa_from_fsm`: the conversion of an `interegular` character automaton into a `ByteDFA`.

Why hand-written: interegular and pyformlang work on characters (or Python objects) and have no
byte-level, table-driven DFA; a numpy table is what the lexer and the mask store index into.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Iterable, Sequence

import numpy as np

DEAD = -1
MAX_UNICODE = 0x10FFFF
SURROGATES = (0xD800, 0xDFFF)

# (first code point, last code point, number of bytes) of each UTF-8 encoding length
_UTF8_LENGTHS = ((0x0, 0x7F, 1), (0x80, 0x7FF, 2), (0x800, 0xFFFF, 3), (0x10000, 0x10FFFF, 4))


class ByteNFA:
    """A nondeterministic automaton over bytes under construction.

    States are ints; `edges[s]` lists `(lo, hi, t)` (bytes lo..hi lead to t) and `eps[s]` the
    epsilon successors. `accepting` holds the final states.
    """

    def __init__(self) -> None:
        self.edges: list[list[tuple[int, int, int]]] = []
        self.eps: list[list[int]] = []
        self.accepting: set[int] = set()

    def add_state(self, accepting: bool = False) -> int:
        self.edges.append([])
        self.eps.append([])
        if accepting:
            self.accepting.add(len(self.edges) - 1)
        return len(self.edges) - 1

    def add_edge(self, src: int, lo: int, hi: int, dst: int) -> None:
        self.edges[src].append((lo, hi, dst))

    def add_eps(self, src: int, dst: int) -> None:
        self.eps[src].append(dst)

    def add_bytes(self, src: int, data: bytes, dst: int | None = None) -> int:
        """A chain spelling `data` from `src`; returns its last state (`dst` if given)."""
        cur = src
        for i, b in enumerate(data):
            nxt = dst if (dst is not None and i == len(data) - 1) else self.add_state()
            self.add_edge(cur, b, b, nxt)
            cur = nxt
        return cur

    def add_codepoints(self, src: int, ranges: Iterable[tuple[int, int]], dst: int) -> None:
        """Edges from `src` to `dst` spelling, in UTF-8, any code point of `ranges`."""
        for seq in utf8_byte_ranges(ranges):
            cur = src
            for i, (lo, hi) in enumerate(seq):
                nxt = dst if i == len(seq) - 1 else self.add_state()
                self.add_edge(cur, lo, hi, nxt)
                cur = nxt

    def closure(self, states: Iterable[int]) -> frozenset[int]:
        stack = list(states)
        seen = set(stack)
        while stack:
            s = stack.pop()
            for t in self.eps[s]:
                if t not in seen:
                    seen.add(t)
                    stack.append(t)
        return frozenset(seen)


@dataclass(frozen=True)
class ByteDFA:
    """A deterministic automaton over bytes. State 0 is the start; -1 is the dead state."""

    table: np.ndarray  # (n_states, 256) int32
    accepting: np.ndarray  # (n_states,) bool

    @property
    def n_states(self) -> int:
        return int(self.table.shape[0])

    def run(self, data: bytes, state: int = 0) -> int:
        table = self.table
        for b in data:
            state = int(table[state, b])
            if state < 0:
                return DEAD
        return state

    def matches(self, data: bytes) -> bool:
        s = self.run(data)
        return s >= 0 and bool(self.accepting[s])

    def live_states(self) -> np.ndarray:
        """States from which an accepting state can still be reached (co-accessible)."""
        n = self.n_states
        live = self.accepting.copy()
        preds: list[set[int]] = [set() for _ in range(n)]
        for s in range(n):
            for t in set(self.table[s].tolist()):
                if t >= 0:
                    preds[t].add(s)
        stack = [s for s in range(n) if live[s]]
        while stack:
            t = stack.pop()
            for s in preds[t]:
                if not live[s]:
                    live[s] = True
                    stack.append(s)
        return live


def determinize(nfa: ByteNFA, start: int = 0) -> ByteDFA:
    """Subset construction; the result keeps only live states (dead ends become -1)."""
    start_set = nfa.closure([start])
    index = {start_set: 0}
    order = [start_set]
    rows: list[np.ndarray] = []
    i = 0
    while i < len(order):
        cur = order[i]
        i += 1
        targets: list[set[int]] = [set() for _ in range(256)]
        for s in cur:
            for lo, hi, t in nfa.edges[s]:
                for b in range(lo, hi + 1):
                    targets[b].add(t)
        row = np.full(256, DEAD, dtype=np.int32)
        cache: dict[frozenset[int], int] = {}
        for b in range(256):
            if not targets[b]:
                continue
            key = frozenset(targets[b])
            if key not in cache:
                nxt = nfa.closure(key)
                if nxt not in index:
                    index[nxt] = len(order)
                    order.append(nxt)
                cache[key] = index[nxt]
            row[b] = cache[key]
        rows.append(row)
    table = np.stack(rows)
    accepting = np.array([bool(s & nfa.accepting) for s in order])
    return trim(ByteDFA(table, accepting))


def trim(dfa: ByteDFA) -> ByteDFA:
    """Remove states that can't reach acceptance (their edges become dead)."""
    live = dfa.live_states()
    if not live[0]:
        return ByteDFA(np.full((1, 256), DEAD, dtype=np.int32), np.zeros(1, dtype=bool))
    if live.all():
        return dfa
    keep = np.flatnonzero(live)
    remap = np.full(dfa.n_states + 1, DEAD, dtype=np.int32)
    remap[keep] = np.arange(len(keep), dtype=np.int32)
    table = remap[dfa.table[keep]]  # -1 indexes the last slot, which is DEAD
    return ByteDFA(table, dfa.accepting[keep])


def minimize(dfa: ByteDFA, classes: Sequence[int] | None = None) -> ByteDFA:
    """Moore minimization. `classes[s]` gives an initial partition (default: accepting or not),
    so that automata with several kinds of acceptance keep them apart."""
    n = dfa.n_states
    init = np.asarray(classes if classes is not None else dfa.accepting.astype(np.int64))
    _, block = np.unique(init, return_inverse=True)
    block = block.reshape(-1).astype(np.int64)
    # bytes that every state treats alike need one column only
    _, byte_rep = np.unique(dfa.table.T, axis=0, return_index=True)
    columns = dfa.table[:, np.sort(byte_rep)]
    while True:
        succ = np.where(columns >= 0, block[np.maximum(columns, 0)], -1)
        sig = np.ascontiguousarray(np.concatenate([block[:, None], succ], axis=1))
        ids: dict[bytes, int] = {}
        new_block = np.fromiter(
            (ids.setdefault(row.tobytes(), len(ids)) for row in sig), dtype=np.int64, count=n
        )
        if len(ids) == block.max() + 1:
            break
        block = new_block
    # renumber so that the start state's block is 0, in first-seen order
    order: dict[int, int] = {}
    for s in [0, *range(n)]:
        order.setdefault(int(block[s]), len(order))
    new_of = np.array([order[int(b)] for b in block], dtype=np.int32)
    m = len(order)
    table = np.full((m, 256), DEAD, dtype=np.int32)
    accepting = np.zeros(m, dtype=bool)
    for s in range(n):
        b = new_of[s]
        row = dfa.table[s]
        table[b] = np.where(row >= 0, new_of[np.maximum(row, 0)], DEAD)
        accepting[b] = dfa.accepting[s]
    return ByteDFA(table, accepting)


def literal_dfa(data: bytes) -> ByteDFA:
    nfa = ByteNFA()
    s = nfa.add_state()
    end = nfa.add_bytes(s, data)
    nfa.accepting.add(end)
    return determinize(nfa)


# ---------------------------------------------------------------- UTF-8


def _split_ranges(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Normalize code point ranges: sorted, merged, surrogates removed."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        lo, hi = max(lo, 0), min(hi, MAX_UNICODE)
        if lo > hi:
            continue
        pieces = [(lo, hi)]
        s_lo, s_hi = SURROGATES
        if lo <= s_hi and hi >= s_lo:
            pieces = [(lo, s_lo - 1), (s_hi + 1, hi)]
        for a, b in pieces:
            if a > b:
                continue
            if out and a <= out[-1][1] + 1:
                out[-1] = (out[-1][0], max(out[-1][1], b))
            else:
                out.append((a, b))
    return out


def _encode(cp: int, n: int) -> list[int]:
    if n == 1:
        return [cp]
    out = []
    for _ in range(n - 1):
        out.append(0x80 | (cp & 0x3F))
        cp >>= 6
    lead = {2: 0xC0, 3: 0xE0, 4: 0xF0}[n]
    out.append(lead | cp)
    return out[::-1]


def _ranges_same_length(lo: int, hi: int, n: int) -> list[list[tuple[int, int]]]:
    """Byte-range sequences for code points lo..hi, all of UTF-8 length n."""
    if n == 1:
        return [[(lo, hi)]]
    # split so that each piece differs only in a suffix of full continuation ranges
    for i in range(1, n):
        m = (1 << (6 * i)) - 1
        if lo & ~m != hi & ~m:
            if lo & m != 0:
                return _ranges_same_length(lo, lo | m, n) + _ranges_same_length((lo | m) + 1, hi, n)
            if hi & m != m:
                return _ranges_same_length(lo, (hi & ~m) - 1, n) + _ranges_same_length(hi & ~m, hi, n)
    a, b = _encode(lo, n), _encode(hi, n)
    return [[(a[k], b[k]) for k in range(n)]]


def utf8_byte_ranges(ranges: Iterable[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """The UTF-8 encodings of the code points in `ranges`, as sequences of byte ranges.

    Every byte string accepted by one of the sequences is the valid UTF-8 encoding of one code
    point of `ranges` (surrogates are never valid), and every such encoding is accepted.
    """
    out: list[list[tuple[int, int]]] = []
    for lo, hi in _split_ranges(ranges):
        for a, b, n in _UTF8_LENGTHS:
            x, y = max(lo, a), min(hi, b)
            if x <= y:
                out.extend(_ranges_same_length(x, y, n))
    return out


def codepoint_ranges(predicate, lo: int = 0, hi: int = MAX_UNICODE) -> list[tuple[int, int]]:
    """Maximal ranges of code points in lo..hi for which `predicate(chr(cp))` holds (never the
    surrogates). The predicate is mapped over every code point at C speed and the ranges read
    off with numpy: a loop per code point cost the cold lexer build ~1 s."""
    ok = np.fromiter(map(predicate, map(chr, range(lo, hi + 1))), dtype=bool, count=hi - lo + 1)
    ok[max(SURROGATES[0], lo) - lo : max(min(SURROGATES[1], hi) + 1 - lo, 0)] = False
    edges = np.flatnonzero(np.diff(np.concatenate(([False], ok, [False])).astype(np.int8)))
    return [(lo + a, lo + b - 1) for a, b in zip(edges[::2].tolist(), edges[1::2].tolist())]


def complement_ranges(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out = []
    nxt = 0
    for lo, hi in _split_ranges(ranges):
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX_UNICODE:
        out.append((nxt, MAX_UNICODE))
    return _split_ranges(out)


def chars_to_ranges(chars: Iterable[str]) -> list[tuple[int, int]]:
    return _split_ranges((ord(c), ord(c)) for c in chars)


# ---------------------------------------------------------------- interegular


def dfa_from_fsm(fsm) -> ByteDFA:
    """Convert an interegular character FSM into a minimal `ByteDFA` over UTF-8 bytes."""
    from interegular.fsm import anything_else

    explicit = [c for c in fsm.alphabet.keys() if c is not anything_else]
    explicit_ranges = chars_to_ranges(explicit)
    class_ranges: dict[int, list[tuple[int, int]]] = {}
    for sym, chars in fsm.alphabet.by_transition.items():
        rs: list[tuple[int, int]] = []
        for c in chars:
            if c is anything_else:
                rs.extend(complement_ranges(explicit_ranges))
            else:
                rs.append((ord(c), ord(c)))
        class_ranges[sym] = _split_ranges(rs)

    nfa = ByteNFA()
    ids = {s: nfa.add_state(s in fsm.finals) for s in fsm.states}
    for s, trans in fsm.map.items():
        for sym, t in trans.items():
            nfa.add_codepoints(ids[s], class_ranges[sym], ids[t])
    start = ids[fsm.initial]
    return minimize(determinize(nfa, start))


def dfa_from_regex(pattern: str) -> ByteDFA:
    import interegular

    return dfa_from_fsm(interegular.parse_pattern(pattern).to_fsm())
