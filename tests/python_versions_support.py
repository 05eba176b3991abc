"""Snippets of each syntax feature, valid from its version on or invalid in every version, and
whether our recognizer accepts a source for a version: shared by the tests that compare the
grammar with CPython (tests/test_python_versions.py, tests/test_cpython_versions.py)."""

from __future__ import annotations

from grammar_tools.parsing.check import check_source
from grammar_tools.parsing.incremental import PrefixParser
from grammar_tools.parsing.recognizer import Recognizer

# (since, valid snippets, snippets invalid in every version)
SNIPPETS: dict[str, tuple[tuple[int, int], list[str], list[str]]] = {
    "parenthesized with-items": (
        (3, 9),
        ["with (a as b, c as d): pass\n", "with (\n    open(x) as f,\n):\n    pass\n"],
        ["with (a as b) + c: pass\n", "with a, (b as c): pass\n"],
    ),
    "match statement": (
        (3, 10),
        ["match x:\n    case 1 | 2: pass\n    case _: pass\n", "match a, b:\n    case [x, *_]: pass\n"],
        ["match x:\ncase 1: pass\n", "match x:\n    case *a: pass\n"],
    ),
    "except*": (
        (3, 11),
        ["try:\n    pass\nexcept* ValueError as e:\n    pass\n"],
        ["try:\n    pass\nexcept* ValueError:\n    pass\nexcept TypeError:\n    pass\n"],
    ),
    "PEP 646 star unpacking": (
        (3, 11),
        ["x[*a]\n", "x[a, *b] = c\n", "def f(*args: *Ts): pass\n"],
        ["def f(x: *Ts): pass\n", "x[**a]\n"],
    ),
    "PEP 695 type parameters": (
        (3, 12),
        [
            "type Point = tuple[float, float]\n",
            "type L[T] = list[T]\n",
            "def f[T](x: T) -> T:\n    return x\n",
            "def f[T: int, *Ts, **P](x: T): pass\n",
            "class C[T: (int, str)](Base): pass\n",
        ],
        ["type X[] = int\n", "def f[](): pass\n", "type X = int = str\n"],
    ),
    "PEP 696 type parameter defaults": (
        (3, 13),
        [
            "def f[T = int](): pass\n",
            "class C[T: int = bool, *Ts = *tuple[int], **P = [int]]: pass\n",
            "type A[T, U = str] = dict[T, U]\n",
        ],
        ["def f[T =](): pass\n", "class C[**P = *a]: pass\n"],
    ),
    "PEP 758 except without parentheses": (
        (3, 14),
        [
            "try:\n    pass\nexcept ValueError, TypeError:\n    pass\n",
            "try:\n    pass\nexcept* A, B, C:\n    pass\n",
        ],
        ["try:\n    pass\nexcept A, B as e:\n    pass\n", "try:\n    pass\nexcept , A:\n    pass\n"],
    ),
    "PEP 750 template strings": (
        (3, 14),
        [
            't"hello {name}"\n',
            "x = rt'a{x!r:>{w}}\\d'\n",
            'y = T"""b\n{y=}"""\n',
            "f(Rt'{a}', RT'')\n",
        ],
        ['bt"x"\n', 'ft"x{y}"\n', 't"{}"\n'],
    ),
}


def accepts(src: str, version) -> bool:
    return check_source(src.encode(), PrefixParser(_recognizer(version))).ok


_RECOGNIZERS: dict = {}


def _recognizer(version) -> Recognizer:
    if version not in _RECOGNIZERS:
        _RECOGNIZERS[version] = Recognizer(python_version=version)
    return _RECOGNIZERS[version]
