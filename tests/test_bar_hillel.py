"""The exact never-legal test's own fixpoint (`bar_hillel._intersection_empty`) gives pyformlang's
answer (`CFG.intersection` then `is_empty`, `bar_hillel.pyformlang_empty`) on every query tried:
every context and pair of terminals of two small grammars, and Python queries after a
newline with an indentation (the kind a cold 151k build asks) and after terminals."""

from __future__ import annotations

import itertools

import pytest

from grammar_tools.analyses import bar_hillel
from grammar_tools.analyses.contexts import ANY, AFTER_NEWLINE, after, parse_names
from grammar_tools.grammar import load_grammar

# a^n b^n, and two kinds of nested brackets
ANBN = 'start: A start B\n     |\nA: "a"\nB: "b"\n'
BRACKETS = """
start: item*
item: LPAR item* RPAR | LSQB item* RSQB | X
LPAR: "("
RPAR: ")"
LSQB: "["
RSQB: "]"
X: "x"
"""


@pytest.fixture(scope="module")
def python_grammar():
    return load_grammar()


@pytest.mark.parametrize("text", [ANBN, BRACKETS])
def test_small_grammars_agree_with_pyformlang(text):
    g = load_grammar(text, "start")
    terminals = bar_hillel.alphabet(g)
    answers = set()
    for ctx in [ANY] + [after(t) for t in terminals]:
        for n in (1, 2):
            for seq in itertools.product(terminals, repeat=n):
                ours = bar_hillel.bar_hillel_empty(g, ctx, seq)
                assert ours == bar_hillel.pyformlang_empty(g, ctx, seq), (ctx, seq)
                answers.add(ours)
    assert answers == {True, False}  # both answers were tried


@pytest.mark.parametrize(
    "context, seq, never",
    [
        ("newline", ("<indent>", "COMMA", "AMPEREQUAL"), False),
        ("newline", ("<indent>", "RBRACE", "AMPEREQUAL"), False),
        ("newline", ("<indent>", "COLON", "COLON", "COLON"), True),
        ("NAME", ("NAME",), True),
        ("DEF", ("NAME",), False),
    ],
)
def test_python_queries_agree_with_pyformlang(python_grammar, context, seq, never):
    g = python_grammar
    ctx = AFTER_NEWLINE if context == "newline" else after(g.term_id[context])
    s = parse_names(g, seq)
    assert bar_hillel.bar_hillel_empty(g, ctx, s) is never
    assert bar_hillel.pyformlang_empty(g, ctx, s) is never
