"""Small snippets per construct: valid ones parse, invalid ones don't, as CPython decides.

Each snippet is also checked against CPython's own `compile()` (this interpreter), so the table
can't drift from what Python accepts; PEP 695 snippets are checked with the grammar for 3.12.
"""

from __future__ import annotations

import warnings

import pytest

from grammar_tools.parsing.check import check_source
from grammar_tools.parsing.incremental import PrefixParser
from grammar_tools.parsing.recognizer import Recognizer

VALID = {
    "PEP 646 star in subscript": "x[*a]\nx[*a, b]\n",
    "PEP 646 *args annotation": "def f(*args: *Ts): pass\n",
    "with as attribute target": "with a as b.c: pass\n",
    "with as tuple target": "with a as (b, c): pass\n",
    "parenthesized with-items": "with (a as b, c as d): pass\n",
    "parenthesized with-items, trailing comma": "with (\n    a as b,\n    c,\n):\n    pass\n",
    "parenthesized with-items after plain item": "with (a, b as c): pass\n",
    "with parenthesized expression as": "with (a, b) as c: pass\n",
    "except star": "try:\n    pass\nexcept* ValueError as e:\n    pass\n",
    "match negative literal": "match x:\n    case -1: pass\n",
    "match complex literal": "match x:\n    case 1 - 2j: pass\n",
    "match class pattern mixed": "match x:\n    case P(a, b=c): pass\n",
    "match open sequence subject": "match a, b:\n    case 1, 2: pass\n",
    "match mapping with rest": "match x:\n    case {'k': v, **rest}: pass\n",
    "match wildcard star": "match x:\n    case [1, *_]: pass\n",
    "match or and as": "match x:\n    case (1 | 2) as y: pass\n",
    "match guard": "match x:\n    case y if y > 0: pass\n",
    "match as a call": "match(x)\n",
    "match as a name": "match = 1\nprint(match)\n",
    "match subscript statement": "match[x] = 1\n",
    "case and type as names": "case = type = 1\n",
    "string backslash-newline": "x = 'ab\\\ncd'\n",
    "trailing comma after *args": "def f(*args, a,): pass\n",
    "trailing comma after **kwargs": "def f(**kw,): pass\n",
    "keyword-only params": "def f(a, *, b=1, c): pass\n",
    "positional-only params": "def f(a, /, b=1, *c, d, **e): pass\n",
    "lambda positional-only": "lambda a, /: a\n",
    "lambda keyword-only": "lambda *, a: a\n",
    "if between for clauses": "[x for a in b if c for d in e if f]\n",
    "PEP 614 decorator": "@buttons[0].clicked.connect\ndef f(): pass\n",
    "return starred tuple": "def f():\n    return *a, b\n",
    "yield starred tuple": "def f():\n    yield *a, b\n",
    "call arguments mixed": "f(a, *b, c, d=1, *e, **f, g=2)\n",
    "generator argument": "f(x for x in y)\n",
    "relative import two dots": "from .. import x\n",
    "relative import ellipsis": "from ... import x\n",
    "relative import five dots": "from .....a import b\n",
    "import parenthesized trailing comma": "from a import (b, c,)\n",
    "walrus": "if (n := len(a)) > 10: pass\n",
    "walrus in comprehension": "[y for x in z if (y := x)]\n",
    "starred assignment": "a, *b = c\n",
    "chained assignment": "a = b = c\n",
    "annotated assignment": "x: int = 1\n(y): int\na.b: int\n",
    "augmented attribute": "a.b += 1\na[0] **= 2\n",
    "f-string": "x = f'{a!r:>{width}} {b=}'\n",
    "f-string nested quotes": "x = f\"{d['key']}\"\n",
    "bytes concatenation": "x = b'a' b'b'\n",
    "string concatenation": "x = 'a' \"b\" f'c'\n",
    "raw string": "x = r'\\d+\\'\\\\'\n",
    "async constructs": (
        "async def f():\n    async with a as b:\n        async for c in d:\n            await e\n"
        "    return [x async for x in y]\n"
    ),
    "async generator expression in def": "def f():\n    return (x async for x in y)\n",
    "nonlocal in class in function": "def f():\n    x = 1\n    class C:\n        nonlocal x\n",
    "break in loop else inside outer loop": "while a:\n    for x in y:\n        pass\n    else:\n        break\n",
    "global": "global x\n",
    "del targets": "del a, (b, c), [d], e.f, g[0]\n",
    "numbers": "x = [0, 00, 1_000, 0x_ff, 0o17, 0b1, 1.5, .5, 5., 1e-3, 1_0.0_1e1_0, 3j, 1.5J]\n",
    "ellipsis and slices": "x[...]\nx[1:2, ::3, :]\n",
    "conditional lambda": "f = lambda: a if b else c\n",
    "comments and blank lines": "# c\n\nif x:  # c\n\n    # c\n    pass\n",
    "tab indentation": "if x:\n\tpass\n",
    "line continuation": "x = 1 + \\\n    2\n",
    "semicolons": "a = 1; b = 2;\n",
    "class with keywords": "class C(B, metaclass=M): pass\n",
    "dict and set displays": "x = {**a, 'b': 1}\ny = {*a, 1}\nz = {k: v for k, v in w}\n",
    "unicode identifier": "café = 1\n",
}

INVALID = {
    "assign to call": "f() = 1\n",
    "assign to literal": "1 = x\n",
    "chained assign to call": "a = f() = 1\n",
    "augmented assign to tuple": "a, b += 1\n",
    "augmented assign to list": "[a] += 1\n",
    "annotated tuple": "a, b: int\n",
    "for target call": "for f() in x: pass\n",
    "with target call": "with a as f(): pass\n",
    "del call": "del f()\n",
    "del starred": "del *a\n",
    "lone starred assignment": "*a = b\n",
    "two starred targets": "a, *b, *c = d\n",
    "keyword argument expression": "f(a.b=1)\n",
    "positional after keyword argument": "f(a=1, b)\n",
    "iterable unpacking after **": "f(**a, *b)\n",
    "generator not sole argument": "f(x for x in y, 1)\n",
    "non-default after default": "def f(a=1, b): pass\n",
    "bare star without names": "def f(*, **k): pass\n",
    "bare star at end": "def f(*): pass\n",
    "unparenthesized import trailing comma": "from a import b,\n",
    "mixed bytes and str": "x = b'a' 'b'\n",
    "return outside function": "return 1\n",
    "return in class in function": "def f():\n    class C:\n        return 1\n",
    "yield outside function": "x = yield\n",
    "await outside async": "def f():\n    await x\n",
    "await in lambda": "async def f():\n    g = lambda: await x\n",
    "async for outside async": "def f():\n    async for x in y: pass\n",
    "break outside loop": "break\n",
    "break in nested function": "while a:\n    def g():\n        break\n",
    "continue in loop else": "for x in y:\n    pass\nelse:\n    continue\n",
    "nonlocal at module level": "nonlocal x\n",
    "import star in function": "def f():\n    from a import *\n",
    "as outside with": "x = (a as b)\n",
    "parenthesized with-items then operator": "with (a as b) + c: pass\n",
    "parenthesized with-items not first": "with a, (b as c): pass\n",
    "unclosed bracket": "x = (1,\n",
    "unterminated string": "x = 'abc\n",
    "invalid hex escape": "x = '\\x4'\n",
    "bytes with non-ASCII": "x = b'é'\n",
    "empty f-string field": "x = f'{}'\n",
    "lone brace in f-string": "x = f'}'\n",
    "leading zero": "x = 01\n",
    "double underscore in number": "x = 1__0\n",
    "unexpected indent": "  x = 1\n",
    "inconsistent dedent": "if x:\n    a\n  b\n",
    "tab/space mix": "if x:\n        a\n\tb\n",
    "missing block": "if x:\nx = 1\n",
    "old inequality": "x = 1 <> 2\n",
    "walrus statement": "x := 1\n",
    "except and except star": "try:\n    pass\nexcept* E:\n    pass\nexcept F:\n    pass\n",
    "type alias before 3.12": "type X = int\n",
    "type parameters before 3.12": "def f[T](x: T): pass\n",
}

PEP695 = {
    "type alias": "type X = int\n",
    "generic type alias": "type L[T] = list[T]\n",
    "generic function": "def f[T: int, *Ts, **P](x: T) -> T: pass\n",
    "generic class": "class C[T](Base): pass\n",
}


def cpython_accepts(src: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(src, "<snippet>", "exec")
        return True
    except SyntaxError:
        return False


@pytest.mark.parametrize("name", sorted(VALID))
def test_valid_snippet_parses(name, recognizer, lexer):
    src = VALID[name]
    assert cpython_accepts(src), f"the table is wrong: CPython rejects {name}"
    result = check_source(src.encode(), PrefixParser(recognizer, lexer))
    assert result.ok, f"{name}: {result}"


@pytest.mark.parametrize("name", sorted(INVALID))
def test_invalid_snippet_is_rejected(name, recognizer, lexer):
    src = INVALID[name]
    assert not cpython_accepts(src), f"the table is wrong: CPython accepts {name}"
    result = check_source(src.encode(), PrefixParser(recognizer, lexer))
    assert not result.ok, f"{name} parsed but CPython rejects it"


@pytest.mark.parametrize("name", sorted(PEP695))
def test_pep695_with_python_312_grammar(name, lexer):
    rec = Recognizer(python_version=(3, 12))
    assert check_source(PEP695[name].encode(), PrefixParser(rec, lexer)).ok
    rec311 = Recognizer(python_version=(3, 11))
    assert not check_source(PEP695[name].encode(), PrefixParser(rec311, lexer)).ok
