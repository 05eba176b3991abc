"""The grammar accepts exactly the syntax of the targeted Python version, checked by oracles.

Each feature has snippets that are valid from its version on, and snippets that are invalid in
every version. The oracles decide them first, so the table can't drift from Python: CPython's
own `compile()` (3.11 here) for what 3.11 accepts or rejects, and libcst's native parser (the
newest syntax, whatever version it is told) for what only 3.12+ accepts; the version a feature
came in with is `versions.FEATURES`'s. Then every supported version must accept a valid
snippet exactly from that version on, and reject the invalid ones.
"""

from __future__ import annotations


import libcst
import pytest
from python_versions_support import SNIPPETS, accepts

from grammar_tools.parsing.cpython_check import compiles

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

def libcst_accepts(src: str) -> bool:
    try:
        libcst.parse_module(src, config=libcst.PartialParserConfig(python_version=format_version(NEWEST)))
        return True
    except libcst.ParserSyntaxError:
        return False


def _cases(which: int):
    return [(name, i) for name, spec in SNIPPETS.items() for i in range(len(spec[which]))]


@pytest.mark.parametrize("name, i", _cases(1))
def test_valid_snippet_is_accepted_from_its_version_on(name, i):
    since, valid, _ = SNIPPETS[name]
    src = valid[i]
    if since <= (3, 11):
        assert compiles(src), f"the table is wrong: CPython 3.11 rejects {src!r}"
    else:
        assert not compiles(src), f"the table is wrong: CPython 3.11 accepts {src!r}"
        assert libcst_accepts(src), f"the table is wrong: libcst rejects {src!r}"
    got = {v: accepts(src, v) for v in SUPPORTED}
    assert got == {v: v >= since for v in SUPPORTED}, src


@pytest.mark.parametrize("name, i", _cases(2))
def test_invalid_snippet_is_rejected_by_every_version(name, i):
    src = SNIPPETS[name][2][i]
    assert not compiles(src), f"the table is wrong: CPython 3.11 accepts {src!r}"
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
