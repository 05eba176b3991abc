"""A starred expression standing alone where CPython wants an expression, by CPython's `compile()`.

`star_expressions` (assignment right sides and targets, augmented and annotated assignment
values, `return`, `yield`, a `for` loop's iterable, an expression statement) may be a tuple
with starred elements (`x = *a,`, `for x in *a, b:`), but a lone starred expression there is
refused by CPython's compiler, in every version ("can't use starred expression here"):
`x = *a`, `yield *a`, `for x in *a:`. Lists, sets, calls and subscripts (`[*a]`, `f(*a)`,
`a[*b]` from 3.11) are other rules. Every snippet below must get CPython's answer: from the
running interpreter (3.11) and from every other version that pyenv has (test_cpython_versions).

The refusal comes at the terminal that ends the lone starred expression (a mask never offers a
token after which nothing valid can follow), and the masks (`accepted`) agree with `feed`.

A known gap, 3.8 only: CPython 3.8 has no starred element at all in an augmented assignment's
value or a `for` loop's iterable (`x += *a, b`, `for x in *a, b:`), which the recognizer
accepts for 3.8 as for 3.9 (`BEFORE_3_9_GAP`).
"""

from __future__ import annotations

import random
import sys

import pytest
from cpython_oracle import INTERPRETERS, allows, compiles, cpython_compiles, parser_for

from grammar_tools.parsing.lookahead import accepted
from grammar_tools.parsing.check import check_source

# every place a star_expressions stands: `{}` is the expression
PLACES = {
    "statement": "{}\n",
    "statement before ;": "{}; pass\n",
    "assignment value": "x = {}\n",
    "assignment value before ;": "x = {}; pass\n",
    "chained assignment value": "x = y = {}\n",
    "chained assignment middle": "x = {} = y\n",
    "augmented assignment value": "x += {}\n",
    "annotated assignment value": "x: int = {}\n",
    "return": "def f():\n    return {}\n",
    "yield": "def f():\n    yield {}\n",
    "yield value": "def f():\n    x = yield {}\n",
    "parenthesized yield": "def f():\n    x = (yield {})\n",
    "yield as an argument": "def f():\n    g((yield {}))\n",
    "for iterable": "for x in {}: pass\n",
    "async for iterable": "async def f():\n    async for x in {}: pass\n",
    "list": "x = [{}]\n",
    "set": "x = {{{}}}\n",
    "call": "f({})\n",
    "subscript": "a[{}]\n",
    "parenthesis": "x = ({})\n",
    "line continuation": "x = {}\\\n\n",
}
EXPRESSIONS = {
    "lone star": "*a",
    "star of a call": "*f()",
    "star of a constant": "*1",
    "star of an attribute": "*a.b",
    "star of a group": "*(a)",
    "star of a tuple": "*(a, b)",
    "star and a comma": "*a,",
    "two stars": "*a, *b",
    "star then a name": "*a, b",
    "name then a star": "a, *b",
    "star in a tuple": "(*a, b)",
    "star in a list": "[*a]",
    "name": "a",
    "conditional star": "*a if b else c",
    "star of a conditional": "*(a if b else c)",
}
# a subscript's starred element is `*` and any expression from 3.11 (`a[*b if c else d]`), where
# the grammar's `star_slice` takes a bitwise-or expression only: refused, valid (no validity hole)
LEFT_OUT = {("subscript", "conditional star")}
SOURCES = [(place, name, src.format(expr)) for place, src in PLACES.items() for name, expr in EXPRESSIONS.items()
           if (place, name) not in LEFT_OUT]
MORE = [
    "*a, = y\n", "x = *a = y\n", "[*a] = y\n", "(*a,) = y\n", "*a = y\n", "x, *a = y\n",
    "for *a, in b: pass\n", "for *a in b: pass\n", "with a as (*b,): pass\n", "with a as *b: pass\n",
    "del *a\n", "del *a,\n", "x: *a = 1\n", "*a: int\n", "*a += 1\n", "print(x, *a)\n", "f(**a)\n",
    "x = **a\n", "lambda: *a\n", "assert *a\n", "match *a, b:\n    case _: pass\n",
    "match *a:\n    case _: pass\n", "[x for x in *a]\n", "[x for x in *a, b]\n", "a[*b] = 1\n",
    "a[*b, c]\n", "x = *a or b\n", "x = *a == b\n", "x = *a; y = *b,\n", "x = *a,; y = *b\n",
    "def f[*T = *a](): pass\n", "type X[*T = *a] = int\n",
]
ALL = [src for _, _, src in SOURCES] + MORE
# CPython 3.8: no starred element in an augmented assignment's value nor in a for loop's iterable
BEFORE_3_9_GAP = {
    src for place, name, src in SOURCES
    if place in ("augmented assignment value", "for iterable", "async for iterable")
    and name in ("star and a comma", "two stars", "star then a name", "name then a star")
}






def _differences(version, sources, cpython: list[bool]) -> list:
    return [(src, "CPython " + ("accepts" if ok else "refuses"))
            for src, ok in zip(sources, cpython) if check_source(src.encode(), parser_for(version)).ok != ok]


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the project runs on CPython 3.11")
def test_python_3_11_by_the_running_interpreter():
    cpython = [compiles(src) for src in ALL]
    assert not _differences((3, 11), ALL, cpython)
    assert not compiles("x = *a\n") and compiles("x = *a,\n")


@pytest.mark.skipif(not INTERPRETERS, reason="no CPython of another supported version on this machine")
@pytest.mark.parametrize("version", sorted(INTERPRETERS))
def test_each_version_by_its_cpython(version):
    sources = [s for s in ALL if not (version < (3, 9) and s in BEFORE_3_9_GAP)]
    cpython = cpython_compiles(version, sources)
    assert not _differences(version, sources, cpython)
    assert any(cpython) and not all(cpython)


def test_the_known_gap_before_3_9():
    """Valid from 3.9 (3.11 here); CPython 3.8, where pyenv has it, refuses them all."""
    assert len(BEFORE_3_9_GAP) == 12
    for src in BEFORE_3_9_GAP:
        assert compiles(src), src
        assert check_source(src.encode(), parser_for((3, 9))).ok, src
    if (3, 8) in INTERPRETERS:
        assert not any(cpython_compiles((3, 8), sorted(BEFORE_3_9_GAP)))


@pytest.mark.parametrize("version", [(3, 8), (3, 11), (3, 13)])
@pytest.mark.parametrize(
    ("prefix", "terminal", "allowed"),
    [
        ("x = *a ", "_NEWLINE", False),
        ("x = *a ", "SEMICOLON", False),
        ("x = *a ", "EQUAL", False),
        ("x = *a ", "COMMA", True),
        ("x = *a ", "DOT", True),
        ("x = *a ", "PLUS", True),
        ("x = *a, ", "_NEWLINE", True),
        ("x = *a, *b ", "_NEWLINE", True),
        ("*a ", "_NEWLINE", False),
        ("*a ", "EQUAL", False),
        ("*a ", "PLUSEQUAL", False),
        ("*a ", "COLON", False),
        ("*a ", "COMMA", True),
        ("x += *a ", "_NEWLINE", False),
        ("x: int = *a ", "_NEWLINE", False),
        ("x = y = *a ", "_NEWLINE", False),
        ("def f():\n    return *a ", "_NEWLINE", False),
        ("def f():\n    return *a ", "COMMA", True),
        ("def f():\n    yield *a ", "_NEWLINE", False),
        ("def f():\n    x = (yield *a ", "RPAR", False),
        ("def f():\n    x = (yield *a ", "COMMA", True),
        ("for x in *a ", "COLON", False),
        ("for x in *a ", "COMMA", True),
        ("x = [*a ", "RSQB", True),
        ("f(*a ", "RPAR", True),
        ("x = (*a ", "RPAR", False),
        ("x = (*a ", "COMMA", True),
    ],
)
def test_refused_where_the_token_comes(version, prefix, terminal, allowed):
    if version < (3, 9) and prefix.startswith("for") and terminal == "COMMA":
        allowed = True  # the 3.8 gap: accepted (it can only be refused later, see BEFORE_3_9_GAP)
    assert allows(version, prefix, terminal) is allowed


@pytest.mark.parametrize("version", [(3, 8), (3, 11)])
def test_masks_agree_with_feeding(version):
    """The terminals `accepted` offers are exactly those that `feed` takes, along random walks
    through stars, commas, assignments and statement ends (the guard is on a reduction: the
    mask reads it without feeding)."""
    parser = parser_for(version)
    rec = parser.recognizer
    tid = rec.grammar.term_id
    liked = [tid[t] for t in ("STAR", "COMMA", "EQUAL", "PLUSEQUAL", "COLON", "_NEWLINE", "SEMICOLON", "NAME",
                              "LPAR", "RPAR", "LSQB", "RSQB", "RETURN", "YIELD", "FOR", "IN")]
    starts = ["", "def f():\n    ", "for x in y:\n    ", "def f():\n    x = (yield "]
    rng = random.Random(5)
    checked = after_star = 0
    for walk in range(150):
        node = parser.parse(rng.choice(starts).encode()).configs[0]
        last = []
        for _ in range(20):
            acc = accepted(rec, node) & ~(1 << rec.END)
            fed = sum(1 << t for t in range(rec.n_terminals) if t != rec.END and rec.feed(node, t) is not None)
            assert acc == fed, (walk, node)
            checked += 1
            after_star += last[-2:] == [tid["STAR"], tid["NAME"]]
            choices = [t for t in liked if acc >> t & 1] or [t for t in range(rec.n_terminals) if acc >> t & 1]
            if not choices:
                break
            t = rng.choice(choices)
            last.append(t)
            node = rec.feed(node, t)
    assert checked > 1500 and after_star > 50
