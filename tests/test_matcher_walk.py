"""Runs of unary operators (`- - - -`): the matcher walks them without parser checks
(`mask_store.operator_runs`), and its masks are those of checking every row on its own."""

from __future__ import annotations

import pytest

from mask_store.matcher import GrammarMatcher
from mask_store.operator_runs import cycles, in_cycle


def _row_accepted(comp, node, seq, width) -> bool:
    """One row checked on its own, element by element, as the matcher decides a row: the last
    terminal by what the parser accepts, the others fed; newlines and indentation inside
    brackets are nothing."""
    rec, T, NL = comp.recognizer, comp.T, comp.NL
    p = node
    for i, e in enumerate(seq):
        if e < T:
            if e == NL and p.depth:
                continue
            if not rec.accepted(p) >> e & 1:
                return False
            if i == len(seq) - 1:
                return True
            p = rec.feed(p, e)
        else:
            if p.depth:
                continue
            col, alt = comp.store.indents[e - T].width(width)
            p = rec.feed_indentation(p, col, alt)
        if p is None:
            return False
    return True


def _reference(comp, group, node, width) -> list[int]:
    s = comp.store
    lo, hi = int(s.group_start[group]), int(s.group_start[group + 1])
    return sorted(int(s.row_mask[r]) for r in range(lo, hi) if _row_accepted(comp, node, s.row_seq(r), width))


def test_unary_operators_make_cycles(recognizer):
    g = recognizer.grammar
    table = cycles(recognizer)
    assert {g.terminals[e] for _, e in table} >= {"MINUS", "PLUS", "TILDE"}
    for op in ("MINUS", "PLUS", "TILDE"):
        e = g.term_id[op]
        nodes = [recognizer.feed(recognizer.initial(), g.term_id["NAME"])]
        nodes.append(recognizer.feed(nodes[-1], g.term_id["EQUAL"]))
        for _ in range(8):
            nodes.append(recognizer.feed(nodes[-1], e))
        found = [in_cycle(table, a, b, e) for a, b in zip(nodes[2:], nodes[3:])]
        assert found[0] is False and all(found[1:]), op  # `x = -` then `-`: from the second on
        # what the cycle promises: the same terminals after every further operator
        assert len({recognizer.accepted(n) for n in nodes[4:]}) == 1


def test_no_cycle_where_brackets_or_other_terminals_part_them(recognizer):
    g = recognizer.grammar
    table = cycles(recognizer)
    t = g.term_id
    n = recognizer.feed(recognizer.initial(), t["NAME"])
    a = recognizer.feed(n, t["MINUS"])
    b = recognizer.feed(a, t["LPAR"])
    assert not in_cycle(table, a, b, t["LPAR"])
    c = recognizer.feed(b, t["MINUS"])
    assert not in_cycle(table, b, c, t["MINUS"])  # a `(` between: not the same nodes


@pytest.mark.parametrize("prefix", [
    "x = a", "f(a", "x = [a, b", "x = a - -", "y = {1: ~ ~", "if a", "def f():\n    return (a + +",
    "print(a -", "x = a\n",
])
def test_walk_gives_the_rows_each_checked_alone(compiled_full, prefix):
    comp, _ = compiled_full
    m = GrammarMatcher.from_prefix(comp, prefix)
    assert m.configs
    g = comp.recognizer.grammar
    minus = g.term_id["MINUS"]
    runs = 0
    for c in m.configs:
        for group, width in ((comp.q_group[c.q], c.width), (comp.q_boundary[c.q], None)):
            if group < 0:
                continue
            got: list[int] = []
            comp.collect(group, c.node, width, got)
            assert sorted(got) == _reference(comp, group, c.node, width)
            s = comp.store
            rows = range(int(s.group_start[group]), int(s.group_start[group + 1]))
            runs = max([runs] + [s.row_seq(r).count(minus) for r in rows])
    assert runs >= 4  # rows with runs of `-` were walked (tokens such as `----`)
