"""`await` and `async for` in comprehensions, by CPython's own `compile()` for each version.

A comprehension is a scope of its own (its first iterable aside), and `await` or `async for`
in it makes it asynchronous: a generator expression may be asynchronous anywhere, a list, set or
dict comprehension only directly in an async function (from 3.11 also inside another
comprehension, which becomes asynchronous in turn). Every expression below is put in every
context below, and the recognizer for version 3.X must answer as CPython 3.X's `compile()`:
always 3.11 (the interpreter running the tests), and every other version whose CPython the
machine has (pyenv, as test_cpython_versions finds them).

Masks must never offer a dead end, so the refusals are checked token by token too.

Two known gaps, both sound (refusing what CPython accepts, never the other way round):
- the element of a generator expression comes before its `for`, so while it is read the
  recognizer can't know that it is one, and it follows the enclosing scope there:
  `(await x for x in y)` is refused in a sync function (`GENEXP_ELEMENT`);
- before 3.11, CPython allows an asynchronous list comprehension in a comprehension that
  awaits anywhere in its own part (`([await z for z in x] for x in y if await x)`), known only
  once that comprehension has been read (`BEFORE_3_11_GAP`).
"""

from __future__ import annotations

import random
import sys

import pytest
from cpython_oracle import INTERPRETERS, allows, compiles, cpython_compiles, parser_for

from grammar_tools.parsing.lookahead import accepted
from grammar_tools.parsing.check import check_source

EXPRESSIONS = {
    "element": "(await x for x in y)",
    "condition": "(x for x in y if await x)",
    "later iterable": "(x for x in y for z in await x)",
    "first iterable": "(x for x in await y)",
    "async for": "(x async for x in y)",
    "later async for": "(x for x in y async for z in x)",
    "list display in condition": "(x for x in y if [await z])",
    "walrus in condition": "(x for x in y if (z := await x))",
    "call argument": "f(await x for x in y)",
    "call argument, async for": "f(x async for x in y)",
    "call argument, condition": "f(x for x in y if await x)",
    "listcomp element": "[await x for x in y]",
    "listcomp condition": "[x for x in y if await x]",
    "listcomp first iterable": "[x for x in await y]",
    "listcomp async for": "[x async for x in y]",
    "setcomp element": "{await x for x in y}",
    "dictcomp value": "{x: await x for x in y}",
    "dictcomp async for": "{x: x async for x in y}",
    "listcomp in genexp element": "([await z for z in x] for x in y)",
    "async listcomp in genexp element": "([z async for z in x] for x in y)",
    "dictcomp in genexp element": "({k: await k for k in x} for x in y)",
    "genexp in genexp element": "((await z for z in x) for x in y)",
    "genexp first iterable in genexp element": "((w for w in await x) for x in y)",
    "genexp first iterable in later iterable": "(x for x in y for z in (w for w in await x))",
    "genexp in listcomp element": "[(await z for z in x) for x in y]",
    "async genexp in listcomp element": "[(z async for z in x) for x in y]",
    "genexp first iterable in listcomp element": "[(w for w in await x) for x in y]",
    "listcomp in listcomp element": "[[await z for z in x] for x in y]",
    "async listcomp in listcomp element": "[[z async for z in x] for x in y]",
    "listcomp in listcomp display": "[[await z for z in x]]",
    "lambda in genexp element": "(lambda: await x for x in y)",
    "lambda in genexp condition": "(x for x in y if (lambda: await x))",
    "lambda default in genexp condition": "(x for x in y if (lambda a=await x: a))",
    "genexp in listcomp first iterable": "[x for x in (await z for z in y)]",
    "genexp in genexp first iterable": "(x for x in (await z for z in y))",
    "listcomp in genexp first iterable": "(x for x in [await z for z in y])",
    "async listcomp in genexp first iterable": "(x for x in [z async for z in y])",
    "genexp in async genexp first iterable": "(x async for x in (await z for z in y))",
    "genexp in listcomp later iterable": "[x for x in y for z in (await w for w in x)]",
    "genexp in genexp condition": "(x for x in y if (await w for w in x))",
    "genexp element in listcomp condition": "[x for x in y if (await z for w in v)]",
    "async listcomp in genexp condition": "(x for x in y if [w async for w in x])",
    "dictcomp in genexp condition": "(x for x in y if {k: await k for k in x})",
    "async genexp in listcomp condition": "[x for x in y if (w async for w in x)]",
    "listcomp first iterable in genexp element": "([z for z in await x] for x in y)",
    "listcomp in dictcomp value": "{k: [await v for v in k] for k in y}",
    "genexp target": "(x for (await y).a in z)",
    "genexp later target": "(x for x in y for (await w).a in z)",
    "genexp target in a call": "f((x for (await y).a in z))",
    "listcomp target": "[x for (await y).a in z]",
    "subscript in genexp condition": "(x for x in y if a[await x])",
    "await in a group in a genexp element": "((await x) for y in z)",
    "await in a group in a tuple": "((await x), 1)",
    "await in a tuple": "(await x, 1)",
    "await in a group": "(await x)",
    "await as a second argument": "f(a, await x)",
    "await as a keyword argument": "f(a=await x)",
    "await as a sole argument": "f(await x)",
    "starred await": "(*await x, 1)",
    "await in a with item": "(await x as y)",
    "await": "await x",
    "no await": "(x for x in y if x)",
}
CONTEXTS = {
    "module": "{}\n",
    "def": "def f():\n    return {}\n",
    "async def": "async def f():\n    return {}\n",
    "lambda": "lambda: {}\n",
    "lambda in async def": "async def f():\n    return lambda: {}\n",
    "class": "class C:\n    x = {}\n",
    "class in async def": "async def f():\n    class C:\n        x = {}\n",
    "def in async def": "async def f():\n    def g():\n        return {}\n",
    "default of a def": "def f(a={}): pass\n",
    "default of a lambda in async def": "async def f():\n    return lambda a={}: a\n",
    "decorator": "def f():\n    @g({})\n    def h(): pass\n",
    "with item": "def f():\n    with {}: pass\n",
    "with item in async def": "async def f():\n    with {}: pass\n",
    "for target": "def f():\n    for {}.a in z: pass\n",
}
# an await (or asynchronous comprehension) in a generator expression's element: see above
GENEXP_ELEMENT = {
    "element", "call argument", "listcomp in genexp element", "async listcomp in genexp element",
    "dictcomp in genexp element", "genexp in genexp element", "genexp first iterable in genexp element",
    "genexp in listcomp element", "genexp in listcomp first iterable", "genexp in genexp first iterable",
    "genexp in async genexp first iterable", "genexp in listcomp later iterable",
    "listcomp first iterable in genexp element", "genexp element in listcomp condition",
    "await in a group in a genexp element",
}
# before 3.11: an asynchronous list comprehension in a comprehension that awaits later on
BEFORE_3_11_GAP = [
    "async def f():\n    return ([await z for z in x] for x in y if await x)\n",
    "async def f():\n    return [[await z for z in x] for x in y if await x]\n",
    "async def f():\n    return ([z async for z in x] async for x in y)\n",
]
# a named expression in a comprehension in a class body is an error of its own (not checked)
LEFT_OUT = {("walrus in condition", "class"), ("walrus in condition", "class in async def")}

SOURCES = [
    (name, ctx, CONTEXTS[ctx].format(expr))
    for name, expr in EXPRESSIONS.items()
    for ctx in CONTEXTS
    if (name, ctx) not in LEFT_OUT
]






def _differences(version, cpython: list[bool]) -> list:
    """The snippets where the recognizer for `version` and CPython disagree, beyond the known
    gap (a generator expression's element refused where CPython accepts it)."""
    out = []
    for (name, ctx, src), ok in zip(SOURCES, cpython):
        ours = check_source(src.encode(), parser_for(version)).ok
        if ours != ok and not (name in GENEXP_ELEMENT and ok and not ours):
            out.append((name, ctx, "CPython " + ("accepts" if ok else "refuses")))
    return out


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the project runs on CPython 3.11")
def test_python_3_11_by_the_running_interpreter():
    cpython = [compiles(src) for _, _, src in SOURCES]
    assert not _differences((3, 11), cpython)
    assert any(cpython) and not all(cpython)


@pytest.mark.skipif(not INTERPRETERS, reason="no CPython of another supported version on this machine")
@pytest.mark.parametrize("version", sorted(INTERPRETERS))
def test_each_version_by_its_cpython(version):
    cpython = cpython_compiles(version, [s for _, _, s in SOURCES])
    assert not _differences(version, cpython)


def test_the_generator_expression_gap_is_what_the_oracle_says():
    """What the recognizer refuses in a generator expression's element is valid Python (so
    the gap is real), and accepted in an async def."""
    rec = parser_for((3, 11))
    for name in GENEXP_ELEMENT:
        assert compiles(CONTEXTS["def"].format(EXPRESSIONS[name])), name
        assert check_source(CONTEXTS["async def"].format(EXPRESSIONS[name]).encode(), rec).ok, name
    assert not check_source(CONTEXTS["def"].format(EXPRESSIONS["element"]).encode(), rec).ok


def test_the_known_gap_before_3_11():
    """Valid Python (3.11 here; 3.8-3.10 too, where pyenv has them): accepted for 3.11 on,
    refused before (sound: never accepted where CPython refuses)."""
    for src in BEFORE_3_11_GAP:
        assert compiles(src), src
        assert check_source(src.encode(), parser_for((3, 11))).ok, src
        assert not check_source(src.encode(), parser_for((3, 10))).ok, src
    for version in sorted(v for v in INTERPRETERS if v < (3, 11)):
        assert all(cpython_compiles(version, BEFORE_3_11_GAP)), version


@pytest.mark.parametrize(
    ("version", "prefix", "terminal", "allowed"),
    [
        # refused where the token comes, not later: a mask never offers a dead end
        ((3, 11), "def f():\n    return (x for x in y if ", "AWAIT", True),
        ((3, 11), "def f():\n    return ( ", "AWAIT", False),  # the generator expression gap
        ((3, 11), "async def f():\n    return (await x ", "RPAR", True),
        ((3, 11), "async def f():\n    return (await x ", "FOR", True),
        ((3, 11), "async def f():\n    with (await x ", "AS", True),
        ((3, 11), "def f():\n    return g(a, ", "AWAIT", False),
        ((3, 11), "def f():\n    return (x for x in y if (lambda: ", "AWAIT", False),
        ((3, 11), "def f():\n    return (x for x in y if g(a, ", "AWAIT", True),
        ((3, 11), "def f():\n    return (x for x in y if (await x ", "RPAR", True),
        ((3, 11), "async def f():\n    return [x for ", "AWAIT", False),  # no target starts with await
        ((3, 11), "async def f():\n    for ", "AWAIT", False),
        ((3, 11), "def f():\n    return (x for x in ", "AWAIT", False),
        ((3, 11), "def f():\n    return [x for x in y if ", "AWAIT", False),
        ((3, 11), "def f():\n    return [x ", "ASYNC", False),
        ((3, 11), "def f():\n    return (x ", "ASYNC", True),
        ((3, 11), "async def f():\n    return [x for x in y if [z for z in w if ", "AWAIT", True),
        ((3, 10), "async def f():\n    return [x for x in y if [z for z in w if ", "AWAIT", False),
        ((3, 10), "async def f():\n    return [x for x in y if [z ", "ASYNC", False),
        ((3, 10), "def f():\n    return (x for x in y if [z ", "ASYNC", False),
        ((3, 11), "def f():\n    return (x for x in y if [z ", "ASYNC", True),
        # before 3.11 the element decides at its `for`: a display stays possible
        ((3, 10), "def f():\n    return (x for x in y if [await z ", "RSQB", True),
        ((3, 10), "def f():\n    return (x for x in y if [await z ", "FOR", False),
        ((3, 11), "def f():\n    return (x for x in y if [await z ", "FOR", True),
        ((3, 10), "async def f():\n    return ([await z for z in w] ", "RPAR", True),
        ((3, 10), "async def f():\n    return ([await z for z in w] ", "FOR", False),
        ((3, 10), "async def f():\n    return [await z ", "FOR", True),
        ((3, 8), "async def f():\n    return [[z async for z in w] ", "ASYNC", False),
        ((3, 8), "async def f():\n    return [x for x in [await z for z in w] ", "FOR", True),
    ],
)
def test_refused_where_the_token_comes(version, prefix, terminal, allowed):
    assert allows(version, prefix, terminal) is allowed


@pytest.mark.parametrize("version", [(3, 10), (3, 11)])
def test_masks_agree_with_feeding(version):
    """The terminals `accepted` offers (the masks' question) are exactly those that `feed`
    takes, along random walks through awaits, comprehensions and brackets: the flows that
    decide an element's end differ between stacks that reduce onto the same node (whose memo
    must tell them apart)."""
    parser = parser_for(version)
    rec = parser.recognizer
    tid = rec.grammar.term_id
    liked = [tid[t] for t in ("AWAIT", "ASYNC", "FOR", "IN", "IF", "LPAR", "RPAR", "LSQB", "RSQB", "COMMA", "NAME")]
    rng = random.Random(3)
    checked = 0
    for walk in range(150):
        node = parser.parse(rng.choice(list(CONTEXTS.values())).split("{}")[0].encode()).configs[0]
        for _ in range(16):
            acc = accepted(rec, node) & ~(1 << rec.END)
            fed = sum(1 << t for t in range(rec.n_terminals) if t != rec.END and rec.feed(node, t) is not None)
            assert acc == fed, (walk, node)
            checked += 1
            choices = [t for t in liked if acc >> t & 1] or [t for t in range(rec.n_terminals) if acc >> t & 1]
            if not choices:
                break
            node = rec.feed(node, rng.choice(choices))
    assert checked > 1000


@pytest.mark.parametrize("version", [(3, 8), (3, 10), (3, 11), (3, 12)])
def test_await_in_an_fstring_field(version):
    """A field is parsed on a stack of its own, from the string's context: an async def's
    `print(f"{await x}")` stays accepted (the context is inside a parenthesis, whose bracket
    that stack does not hold), a sync def's refused."""
    parser = parser_for(version)
    assert check_source(b'async def f():\n    print(f"{await x}")\n', parser).ok
    assert check_source(b'async def f():\n    return [f"{await x}" for a in b]\n', parser).ok
    assert not check_source(b'def f():\n    print(f"{await x}")\n', parser).ok
    assert not check_source(b'def f():\n    return [f"{await x}" for a in b]\n', parser).ok
