"""The follow graph: which terminal can directly follow which, read from the grammar's rules.

Terminal b can follow terminal a (some sentence of the language has `a b` as a substring) iff
some rule `A -> ... Y ... Z ...` has only nullable symbols between Y and Z, a among the last
terminals Y can derive and b among the first terminals Z can derive. Computed on the reduced
grammar (generating and reachable symbols only), this is exact for pairs. Seed figure 2 is
this graph for S ::= aSb | ε.

`possible(context, seq)` extends it to a whole sequence in a context (see `contexts`): False
means some adjacent pair can never occur, so the sequence is never legal there. It is the
cheap, exact-for-pairs filter that the mask store streamlining applies first.
"""

from __future__ import annotations

import functools

from .contexts import AFTER, Context, Layout
from ..grammar import Grammar
from ..lexing.lexer_automaton import bit_indices


class FollowGraph:
    def __init__(self, grammar: Grammar) -> None:
        self.grammar = grammar
        self.layout = Layout.of(grammar)
        self._possible_memo: dict = {}
        tid = grammar.term_id
        terms = set(grammar.terminals)
        rules = [r for r in grammar.rules]
        generating = set(terms)
        changed = True
        while changed:
            changed = False
            for r in rules:
                if r.lhs not in generating and all(s in generating for s in r.rhs):
                    generating.add(r.lhs)
                    changed = True
        rules = [r for r in rules if r.lhs in generating and all(s in generating for s in r.rhs)]
        start = next((r.lhs for r in rules if r.lhs.startswith("$root")), grammar.start)
        reachable = {start}
        changed = True
        while changed:
            changed = False
            for r in rules:
                if r.lhs in reachable:
                    for s in r.rhs:
                        if s not in reachable:
                            reachable.add(s)
                            changed = True
        rules = [r for r in rules if r.lhs in reachable]
        self.rules = rules

        nullable: set[str] = set()
        changed = True
        while changed:
            changed = False
            for r in rules:
                if r.lhs not in nullable and all(s in nullable for s in r.rhs):
                    nullable.add(r.lhs)
                    changed = True
        first: dict[str, int] = {t: 1 << tid[t] for t in terms}
        last: dict[str, int] = dict(first)
        for r in rules:
            first.setdefault(r.lhs, 0)
            last.setdefault(r.lhs, 0)
        changed = True
        while changed:
            changed = False
            for r in rules:
                f = first[r.lhs]
                for s in r.rhs:
                    f |= first[s]
                    if s not in nullable:
                        break
                la = last[r.lhs]
                for s in reversed(r.rhs):
                    la |= last[s]
                    if s not in nullable:
                        break
                if f != first[r.lhs] or la != last[r.lhs]:
                    first[r.lhs], last[r.lhs] = f, la
                    changed = True
        self.nullable = frozenset(nullable)
        self.first = first
        self.last = last
        succ = [0] * grammar.n_terminals
        for r in rules:
            rhs = r.rhs
            for i, y in enumerate(rhs):
                ly = last[y]
                if not ly:
                    continue
                fz = 0
                for z in rhs[i + 1 :]:
                    fz |= first[z]
                    if z not in nullable:
                        break
                if fz:
                    for a in bit_indices(ly):
                        succ[a] |= fz
        self.succ = succ
        # the terminals of some sentence: those of the reduced rules
        self.used = 0
        for r in rules:
            for s in r.rhs:
                if s in terms:
                    self.used |= 1 << tid[s]

    # ---------------------------------------------------------------- queries

    def can_follow(self, a: int, b: int) -> bool:
        return bool(self.succ[a] >> b & 1)

    def successors(self, a: int) -> list[int]:
        return list(bit_indices(self.succ[a]))

    def edges(self) -> int:
        return sum(bin(m).count("1") for m in self.succ)

    def possible(self, context: Context, seq: tuple[int, ...]) -> bool:
        """False if `seq` can never follow `context`: an adjacent pair never occurs in any
        sentence, whichever way its newlines and indentations are read."""
        key = (context, tuple(seq))
        hit = self._possible_memo.get(key)
        if hit is None:
            hit = self._possible_memo[key] = self._possible(*key)
        return hit

    def _possible(self, context: Context, seq: tuple[int, ...]) -> bool:
        lay = self.layout
        # the set of terminals that may have been fed last; None: unknown (anything)
        if context.kind == AFTER:
            lasts = {context.terminal}
        elif context.kind == "any":
            lasts = {None}
        elif context.kind == "newline":
            lasts = {lay.newline, None}
        else:
            lasts = {lay.newline, lay.indent, lay.dedent, None}
        for e in seq:
            new: set = set()
            if lay.is_indentation(e):
                new |= lasts  # no change of level (or inside brackets)
                for t in (lay.indent, lay.dedent):
                    if self._step(lasts, t):
                        new.add(t)
            else:
                if e == lay.newline:
                    new |= lasts  # dropped inside brackets
                if self._step(lasts, e):
                    new.add(e)
            if not new:
                return False
            lasts = new
        return True

    def _step(self, lasts, t: int) -> bool:
        if t < 0:
            return False
        for a in lasts:
            if a is None:
                if self.used >> t & 1:
                    return True
            elif self.succ[a] >> t & 1:
                return True
        return False


@functools.lru_cache(maxsize=4)
def follow_graph(grammar: Grammar) -> FollowGraph:
    return FollowGraph(grammar)
