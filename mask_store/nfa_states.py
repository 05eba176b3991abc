"""The store's NFA states: the lexer configurations (X, d) merged where a token can't tell them apart.

A configuration (X, d) is inside a lexeme that will be terminal X, the lexer automaton in state
d. Whatever a token does from (X, d) depends on d only through the lexer *seen from X*: each
byte keeps the lexeme with X still possible (to another such state), keeps it with X no longer
possible (the token is then rejected for X: X can't be accepted later), or ends it (then X must
be accepted, and the rest of the token is lexed from the start state, whatever d was). That
automaton, minimized (`terminal_classes`), puts states with the same rows for every token in
one class, and their successors are in one class again: the store keeps one q per class, with
rows built from one state of it (`NfaStates.q_state`, the representative, which the matcher
walks from), and maps every (X, d) to its q. The masks are the same by construction;
`mask-store verify --compare-full` against a store built with `merge=False` checks it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from grammar_tools.lexing.lexer_automaton import LexerAutomaton

_ENDS, _LEAVES = -1, -2  # a byte ends the lexeme / keeps it, with X no longer possible


def terminal_classes(lexer: LexerAutomaton, x: int) -> dict[int, int]:
    """Lexer state -> class, over the states where X is possible: Moore's partition
    refinement of the lexer automaton seen from X (the module doc)."""
    states = [d for d in range(lexer.n_states) if lexer.possible[d] >> x & 1]
    index = {d: i for i, d in enumerate(states)}
    table = lexer.table[states]
    succ = np.where(table < 0, _ENDS, _LEAVES)
    for i, row in enumerate(table.tolist()):
        for b, e in enumerate(row):
            if e >= 0 and lexer.possible[e] >> x & 1:
                succ[i, b] = index[e]
    cls = np.array([lexer.accepting[d] >> x & 1 for d in states], dtype=np.int64)
    n = len(set(cls.tolist()))
    while True:
        seen: dict = {}
        view = np.where(succ >= 0, cls[np.clip(succ, 0, None)], succ)
        new = np.array([seen.setdefault((int(c), r.tobytes()), len(seen)) for c, r in zip(cls, view)])
        if len(seen) == n:
            return dict(zip(states, new.tolist()))
        cls, n = new, len(seen)


@dataclass(frozen=True)
class NfaStates:
    """The store's states q and the configurations (X, d) that map to each.

    q_term, q_state: (Q,) the terminal and the representative lexer state of q (the smallest d
    of its class); pair_term, pair_state, pair_q: (P,) every configuration (X, d), d not the
    start state, and its q (P == Q when nothing merges)."""

    q_term: np.ndarray
    q_state: np.ndarray
    pair_term: np.ndarray
    pair_state: np.ndarray
    pair_q: np.ndarray

    @classmethod
    def of(cls, lexer: LexerAutomaton, merge: bool = True) -> NfaStates:
        """The states of `lexer`, in the order (d, X) of their representatives; `merge`:
        False keeps one q per configuration (the store before the merge, to compare with)."""
        classes = {}
        if merge:
            terms = sorted({x for d in range(1, lexer.n_states) for x in lexer.possible_ids[d]})
            classes = {x: terminal_classes(lexer, x) for x in terms}
        rep: dict[tuple[int, int], int] = {}  # (X, class) -> q
        q_list: list[tuple[int, int]] = []
        pairs: list[tuple[int, int, int]] = []
        for d in range(1, lexer.n_states):
            for x in lexer.possible_ids[d]:
                key = (x, classes[x][d]) if merge else (x, d)
                q = rep.get(key)
                if q is None:
                    q = rep[key] = len(q_list)
                    q_list.append((x, d))
                pairs.append((x, d, q))
        p = np.array(pairs, dtype=np.int32).reshape(-1, 3)
        qs = np.array(q_list, dtype=np.int32).reshape(-1, 2)
        return cls(qs[:, 0].copy(), qs[:, 1].copy(), p[:, 0].copy(), p[:, 1].copy(), p[:, 2].copy())

    @property
    def merged(self) -> bool:
        return self.pair_q.shape[0] != self.q_term.shape[0]

    def index(self) -> dict[tuple[int, int], int]:
        """(X, d) -> q."""
        return {(x, d): q for x, d, q in zip(self.pair_term.tolist(), self.pair_state.tolist(), self.pair_q.tolist())}
