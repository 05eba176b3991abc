"""Runs of unary operators (`- - - -`): the matcher walks them without parser checks
(`mask_store.operator_runs`, in `mask_walk`), and its masks are those of checking every row on its own."""

from __future__ import annotations

import pytest

from grammar_tools.parsing.lookahead import accepted, accepted_among, feed_all
from mask_store.mask_walk import collect, top_accepted
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
            if not accepted(rec, p) >> e & 1:
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
        assert len({accepted(recognizer, n) for n in nodes[4:]}) == 1


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
    for group, node, width in _walks(comp, m):
        got: list[int] = []
        collect(comp, group, node, width, got)
        assert sorted(got) == _reference(comp, group, node, width)
        s = comp.store
        rows = range(int(s.group_start[group]), int(s.group_start[group + 1]))
        runs = max([runs] + [s.row_seq(r).count(minus) for r in rows])
    assert runs >= 4  # rows with runs of `-` were walked (tokens such as `----`)


def _walks(comp, m):
    """(group, node, width) of each walk a mask of the matcher `m` makes: its configurations'
    groups, and their boundary groups (after a newline, from its indentation as typed)."""
    for c in m.configs:
        if comp.q_group[c.q] >= 0:
            yield comp.q_group[c.q], c.node, c.width
        b = comp.q_boundary[c.q]
        if b < 0:
            continue
        node = c.node
        if comp.q_term[c.q] == comp.NL and node.depth == 0:
            node = comp.recognizer.feed_indentation(node, *(c.width or (0, 0)))
        if node is not None:
            yield b, node, None


# blocks, dedents, brackets across lines and comprehensions (whose operator runs are walked once
# `await` is settled there: `operator_runs._scope_settled`)
_BLOCKS = [
    "def f():\n    if a:\n        x = 1\n    ",
    "def f():\n    if a:\n        x = 1\n",
    "class A:\n    def f(self):\n        return (a,\n                b",
    "x = [v for v in - - -",
    "x = [v for v in w if - - -",
    "async def f():\n    return [a async for a in b if - - -",
    "x = {k: - - v for k, v in",
    "for a in b:\n    y = (- - -\n",
]


@pytest.mark.parametrize("prefix", _BLOCKS)
def test_walk_gives_the_rows_each_checked_alone_in_blocks_and_comprehensions(compiled_full, prefix):
    comp, _ = compiled_full
    m = GrammarMatcher.from_prefix(comp, prefix)
    assert m.configs
    for group, node, width in _walks(comp, m):
        got: list[int] = []
        collect(comp, group, node, width, got)
        assert sorted(got) == _reference(comp, group, node, width), (prefix, group)


def test_runs_in_a_comprehension_are_cycles_once_await_is_settled(recognizer):
    g = recognizer.grammar
    t = g.term_id
    table = cycles(recognizer)
    n = recognizer.initial()
    for name in ("NAME", "EQUAL", "LSQB", "NAME", "FOR", "NAME", "IN", "NAME", "IF"):
        n = recognizer.feed(n, t[name])
    nodes = [n]
    for _ in range(8):
        nodes.append(recognizer.feed(nodes[-1], t["MINUS"]))
    pairs = list(zip(nodes[2:], nodes[3:]))
    assert not any(in_cycle(table, a, b, t["MINUS"]) for a, b in pairs)  # without the recognizer: no
    found = [in_cycle(table, a, b, t["MINUS"], recognizer) for a, b in pairs]
    assert any(found)
    first = found.index(True)
    # what the cycle promises, `await` included: the same terminals after every further `-`
    assert len({accepted(recognizer, b) for _, b in pairs[first:]}) == 1


def _prefix_nodes(rec, lexer, text: bytes):
    """Parser nodes at every cut of `text`, and the nodes one accepted terminal after each."""
    from grammar_tools.parsing.incremental import PrefixParser

    parser = PrefixParser(rec, lexer)
    out = []
    for end in range(1, len(text) + 1):
        try:
            st = parser.parse(text[:end])
        except Exception:  # a cut inside a lexeme the parser can't hold back: not a stack to test
            continue
        for node in st.configs:
            out.append(node)
            acc = accepted_among(rec, node, -1)
            for e in range(rec.n_terminals):
                if acc >> e & 1 and e != rec.END:
                    n2 = rec.feed(node, e)
                    if n2 is not None and n2 is not node:
                        out.append(n2)
    return out


_CODE = b'''async def f(a, *b):
    if a:
        x = [v - - w async for v in b if await v]
        return (x,
                {k: ~k for k in b})
    else:
        del a[0], b
    with (open(a) as f, g):
        pass
'''


@pytest.mark.parametrize("version", [(3, 10), (3, 14)])
def test_top_accepted_is_accepted(lexer, version):
    """The sets memoized by the top two nodes are those of the whole stack, at every cut of
    code with blocks, brackets, comprehensions and targets, one memo for all (3.10: the flows
    of asynchronous comprehensions are tracked)."""
    from grammar_tools.parsing.recognizer import Node, Recognizer

    rec = Recognizer(python_version=version)
    memo: dict = {}
    nodes = _prefix_nodes(rec, lexer, _CODE)
    assert len(nodes) > 500
    for node in nodes:
        fresh = Node(node.state, node.parent, node.attr, node.ctx, node.depth, node.indent)
        assert top_accepted(rec, fresh, memo) == accepted_among(rec, node, -1), node
    kinds = {v >= 0 for v in memo.values()}
    assert kinds == {True, False}  # sets from the top two nodes, and sets that read deeper


def _feed_by_steps(rec, node, t):
    """`Recognizer.feed` as the LR parse does it, one reduction at a time (no unit chains)."""
    from grammar_tools.parsing.recognizer import ACCEPTED

    while True:
        a = rec.action[node.state].get(t)
        if a is None:
            return ACCEPTED if (t == rec.END and node.state == rec.end_state) else None
        gd = rec.guard.get(node.state * 1024 + t)
        if gd is not None and not rec._check(gd[0], gd[1], node):
            return None
        if a >= 0:
            return rec._shift(node, a, t)
        node = rec._reduce(node, ~a)


def _same(a, b) -> bool:
    return a is b if a is None or b is None else a.key() == b.key()


@pytest.mark.parametrize("version", [(3, 10), (3, 14)])
def test_feed_and_feed_all_are_the_parse_one_reduction_at_a_time(lexer, version):
    """`feed`'s unit chains (one node for a run of attribute-passing one-symbol reductions) and
    `feed_all`'s shared reductions give the nodes of reducing step by step, for every terminal
    after every cut of the code (3.10: the flows are tracked, no unit chains)."""
    from grammar_tools.parsing.recognizer import Recognizer

    rec = Recognizer(python_version=version)
    nodes = _prefix_nodes(rec, lexer, _CODE)
    terminals = list(range(rec.n_terminals))
    fed = 0
    for node in nodes:
        together: dict = {}
        feed_all(rec, node, terminals, together)
        assert set(together) == set(terminals)
        for t in terminals:
            want = _feed_by_steps(rec, node, t)
            assert _same(rec.feed(node, t), want), (node, t)
            assert _same(together[t], want), (node, t)
            fed += want is not None
    assert fed > 1000
    if version >= (3, 11):
        assert rec._chains and any(f >= 0 for f in rec._chains.values())  # chains were taken
