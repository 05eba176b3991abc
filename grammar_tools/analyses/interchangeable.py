"""Interchangeable terminals: terminals that can replace each other anywhere, found from the rules.

Terminals a and b are interchangeable when every rule with a at some position has a twin rule
with b at that position (same left side, the rest unchanged), and vice versa. Then replacing
any one occurrence of a by b (or b by a) in any sentence gives a sentence, so a terminal
sequence is legal after a prefix exactly when its image with a and b exchanged (anywhere) is:
the mask store can keep one row for both. `!_add_op: "+" | "-"` makes PLUS and MINUS candidates;
the seed finds 7 groups (35 terminals) in lark's Python grammar.

Found purely from the rules: the classes are those of equal *contexts*, a terminal's context
being the set of (rule left side, right side with a hole where the terminal was).

The recognizer runs more than the grammar (the guards of `guards.py`: assignment targets,
`return` outside a function...). `verify_in_tables` checks, on the LALR table and the guard
tables, that the parser treats a and b alike in every state (a bisimulation of the states that
a and b lead to), so that the streamlined mask store stays exact with the guards on.
"""

from __future__ import annotations

import functools
from collections import defaultdict

from ..grammar import BRACKET_CLOSE, BRACKET_OPEN, DEDENT, END, INDENT, NEWLINE, Grammar

HOLE = "\x00"
# terminals that the recognizer treats by name (layout, brackets, the with-statement colon)
_SPECIAL = {END, NEWLINE, INDENT, DEDENT, "COLON", "ASYNC", "WITH", *BRACKET_OPEN, *BRACKET_CLOSE}


def terminal_contexts(grammar: Grammar) -> dict[str, frozenset]:
    """For each terminal that occurs in a rule: its set of (lhs, rhs with a hole)."""
    terms = set(grammar.terminals)
    out: dict[str, set] = defaultdict(set)
    for r in grammar.rules:
        for i, s in enumerate(r.rhs):
            if s in terms:
                out[s].add((r.lhs, r.rhs[:i] + (HOLE,) + r.rhs[i + 1 :]))
    return {t: frozenset(c) for t, c in out.items()}


def interchangeable_classes(grammar: Grammar) -> list[tuple[str, ...]]:
    """The classes of two or more interchangeable terminals, each sorted, largest first."""
    by_ctx: dict[frozenset, list[str]] = defaultdict(list)
    for t, ctx in terminal_contexts(grammar).items():
        by_ctx[ctx].append(t)
    classes = [tuple(sorted(ts)) for ts in by_ctx.values() if len(ts) > 1]
    return sorted(classes, key=lambda c: (-len(c), c))


def are_interchangeable(grammar: Grammar, a: str, b: str) -> bool:
    ctx = terminal_contexts(grammar)
    return a == b or (a in ctx and ctx.get(a) == ctx.get(b))


def verify_in_tables(grammar: Grammar, guard_tables, a: str, b: str) -> bool:
    """Whether the recognizer (LALR table plus guards) treats terminals a and b alike: in every
    state their actions agree (the same reduction, or shifts into twin states), and twin states
    agree on every action, goto, guard and context effect."""
    if a in _SPECIAL or b in _SPECIAL:
        return False
    tid = grammar.term_id
    ia, ib = tid[a], tid[b]
    swap = {a: b, b: a}
    rules = grammar.rules
    kinds, consts = guard_tables.rule_kind, guard_tables.rule_const
    guards, removed = guard_tables.guards, guard_tables.removed
    accessing = guard_tables.accessing
    with_colon = guard_tables.with_colon_states
    effects = guard_tables.ctx_effect

    def twin_rules(r1: int, r2: int) -> bool:
        if r1 == r2:
            return True
        x, y = rules[r1], rules[r2]
        if x.lhs != y.lhs or len(x.rhs) != len(y.rhs) or kinds[r1] != kinds[r2] or consts[r1] != consts[r2]:
            return False
        return all(p == q or swap.get(p) == q for p, q in zip(x.rhs, y.rhs))

    pending: list[tuple[int, int]] = []
    seen: set[tuple[int, int]] = set()

    def same_action(s1: int, t1: int, s2: int, t2: int) -> bool:
        x, y = grammar.action[s1].get(t1), grammar.action[s2].get(t2)
        if guards.get((s1, t1)) != guards.get((s2, t2)):
            return False
        if ((s1, t1) in removed) != ((s2, t2) in removed):
            return False
        if x is None or y is None:
            return x is None and y is None
        if (x >= 0) != (y >= 0):
            return False
        if x < 0:
            return twin_rules(~x, ~y)
        if x != y and (x, y) not in seen:
            seen.add((x, y))
            pending.append((x, y))
        return True

    for s in range(grammar.n_states):
        if not same_action(s, ia, s, ib):
            return False
    while pending:
        s1, s2 = pending.pop()
        acc1, acc2 = accessing[s1], accessing[s2]
        if acc1 != acc2 and swap.get(acc1) != acc2:
            return False
        if effects[s1] != effects[s2] or (s1 in with_colon) != (s2 in with_colon):
            return False
        if set(grammar.action[s1]) != set(grammar.action[s2]):
            return False
        for t in grammar.action[s1]:
            if not same_action(s1, t, s2, t):
                return False
        g1, g2 = grammar.goto[s1], grammar.goto[s2]
        if set(g1) != set(g2):
            return False
        for nt, n1 in g1.items():
            n2 = g2[nt]
            if n1 != n2 and (n1, n2) not in seen:
                seen.add((n1, n2))
                pending.append((n1, n2))
    return True


@functools.lru_cache(maxsize=4)
def recognizer_classes(grammar: Grammar) -> tuple[tuple[str, ...], ...]:
    """The interchangeable classes, split where the recognizer's guards tell members apart."""
    from ..parsing.guards import build_guard_tables

    # the oldest Python version removes the most (PEP 695): the strictest check
    gt = build_guard_tables(grammar, (3, 0))
    out = []
    for cls in interchangeable_classes(grammar):
        rest = list(cls)
        while rest:
            head = rest[0]
            same = [t for t in rest if t == head or verify_in_tables(grammar, gt, head, t)]
            if len(same) > 1:
                out.append(tuple(same))
            rest = [t for t in rest if t not in same]
    return tuple(out)


def canonical_map(grammar: Grammar, classes) -> dict[int, int]:
    """Terminal id -> the id of its class's first member (only for members of a class)."""
    tid = grammar.term_id
    out = {}
    for cls in classes:
        rep = tid[cls[0]]
        for t in cls:
            out[tid[t]] = rep
    return out
