"""The grammar accepts exactly the syntax of the targeted Python version, checked by oracles.

Each feature has snippets that are valid from its version on, and snippets that are invalid in
every version. The oracles decide them first, so the table can't drift from Python: CPython's
own `compile()` (3.11 here) for what 3.11 accepts or rejects, and libcst's native parser (the
newest syntax, whatever version it is told) for what only 3.12+ accepts; the version a feature
came in with is `versions.FEATURES`'s. Then every supported version must accept a valid
snippet exactly from that version on, and reject the invalid ones.
"""

from __future__ import annotations

import warnings

import libcst
import pytest

from grammar_tools.parsing.check import check_source
from grammar_tools.parsing.incremental import PrefixParser
from grammar_tools.parsing.recognizer import Recognizer
from grammar_tools.parsing.versions import (
    FEATURES,
    NEWEST,
    SUPPORTED,
    VersionError,
    features_after,
    format_version,
    parse_version,
)

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


def cpython_accepts(src: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(src, "<snippet>", "exec")
        return True
    except SyntaxError:
        return False


def libcst_accepts(src: str) -> bool:
    try:
        libcst.parse_module(src, config=libcst.PartialParserConfig(python_version=format_version(NEWEST)))
        return True
    except libcst.ParserSyntaxError:
        return False


def accepts(src: str, version) -> bool:
    return check_source(src.encode(), PrefixParser(_recognizer(version))).ok


_RECOGNIZERS: dict = {}


def _recognizer(version) -> Recognizer:
    if version not in _RECOGNIZERS:
        _RECOGNIZERS[version] = Recognizer(python_version=version)
    return _RECOGNIZERS[version]


def _cases(which: int):
    return [(name, i) for name, spec in SNIPPETS.items() for i in range(len(spec[which]))]


@pytest.mark.parametrize("name, i", _cases(1))
def test_valid_snippet_is_accepted_from_its_version_on(name, i):
    since, valid, _ = SNIPPETS[name]
    src = valid[i]
    if since <= (3, 11):
        assert cpython_accepts(src), f"the table is wrong: CPython 3.11 rejects {src!r}"
    else:
        assert not cpython_accepts(src), f"the table is wrong: CPython 3.11 accepts {src!r}"
        assert libcst_accepts(src), f"the table is wrong: libcst rejects {src!r}"
    got = {v: accepts(src, v) for v in SUPPORTED}
    assert got == {v: v >= since for v in SUPPORTED}, src


@pytest.mark.parametrize("name, i", _cases(2))
def test_invalid_snippet_is_rejected_by_every_version(name, i):
    src = SNIPPETS[name][2][i]
    assert not cpython_accepts(src), f"the table is wrong: CPython 3.11 accepts {src!r}"
    assert not libcst_accepts(src), f"the table is wrong: libcst accepts {src!r}"
    assert not any(accepts(src, v) for v in SUPPORTED), src


def test_every_feature_has_snippets():
    """Each construct of the version table is exercised here."""
    covered = {since for since, _, _ in SNIPPETS.values()}
    for f in FEATURES:
        assert f.since in covered, f.name


def test_template_strings_are_concatenated_with_template_strings_only():
    """PEP 750: a t-string joins other t-strings, never a str or f-string literal (CPython 3.14
    says "cannot mix t-string literals with string literals"); the `tr` prefix as `rt`. libcst
    1.9 is no oracle here: it accepts the mixes, fails on t-string concatenation and refuses `tr`."""
    assert accepts('t"a" T"b" rt"""c"""\n', NEWEST) and accepts("tr'{x}' TR'y'\n", NEWEST)
    assert not accepts('t"a" T"b"\n', (3, 13))
    for src in ('t"a" "b"\n', '"a" t"b"\n', 't"a" f"b"\n', 'f"a" t"b"\n', 't"a" b"b"\n'):
        assert not any(accepts(src, v) for v in SUPPORTED), src


def test_versions_parse_and_refuse_clearly():
    assert parse_version("3.12") == (3, 12)
    assert parse_version(" 3.8 ") == (3, 8)
    assert [format_version(v) for v in SUPPORTED] == [f"3.{m}" for m in range(8, 15)]
    for bad in ("3.7", "3.15", "2.7", "three", "", "3"):
        with pytest.raises(VersionError, match="3.8..3.14|not a Python version"):
            parse_version(bad)
    with pytest.raises(VersionError):
        Recognizer(python_version=(3, 7))
    assert Recognizer().python_version == NEWEST
    # each newer version removes a subset of what an older one removes
    removed = [set(features_after(v)) for v in SUPPORTED]
    assert all(a >= b for a, b in zip(removed, removed[1:])) and not removed[-1]
