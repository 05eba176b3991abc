"""Replacement fields of f-/t-strings are parsed by the grammar (grammar_tools/parsing/fstring_fields.py):
the whole-file check, the matcher and the completions refuse what CPython refuses inside `{}`.

The oracle is CPython's `compile`: the running interpreter (3.11, as set-up installs it) always,
and each CPython 3.8-3.13 that pyenv has on the machine for that target version."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from grammar_tools.parsing.check import check_source
from grammar_tools.parsing.incremental import ParseError, PrefixParser
from grammar_tools.parsing.recognizer import Recognizer
from mask_store.matcher import GrammarMatcher

from cpython_oracle import INTERPRETERS
from test_fstring_fields_oracle import verdicts, wrap

HERE = Path(__file__).parent

# what the lexer's f-string automaton (grammar_tools/lexing/string_automata.py, PEP 701's tokenizer
# within FIELD_LIMITS) refuses although CPython accepts it: from 3.12 a third level of
# format-spec fields. Under-accepting, never unsound: the tests check both directions.
LEXER_GAPS = {
    "all": set(),
    (3, 12): {'f"{a:{b:{c}}}"'},
}


def gaps(version: tuple[int, int]) -> set[str]:
    out = set(LEXER_GAPS["all"])
    if version >= (3, 12):
        out |= LEXER_GAPS[(3, 12)]
    return out


def compare(version: tuple[int, int], oracle: dict[str, bool]) -> list[str]:
    parser = PrefixParser(Recognizer(python_version=version))
    wrong = []
    for key, valid in oracle.items():
        where, case = key.split("|", 1)
        ours = check_source(wrap(case, where).encode(), parser)
        if ours.ok and not valid:
            wrong.append(f"{version} accepted, CPython refuses: {where} {case!r}")
        elif valid and not ours.ok and case not in gaps(version):
            wrong.append(f"{version} refused ({ours}), CPython accepts: {where} {case!r}")
    return wrong


def test_fields_agree_with_this_cpython():
    """Against the running interpreter: what it refuses we refuse, what it accepts we accept
    (but for the lexer's gaps, listed above)."""
    version = sys.version_info[:2]
    oracle = verdicts()
    assert not compare(version, oracle)
    # the cases are not all one way: the check has something to decide
    assert 20 < sum(oracle.values()) < len(oracle) - 20


@pytest.mark.parametrize("version", [(3, 8), (3, 9), (3, 10), (3, 12), (3, 13)])
def test_fields_agree_with_each_cpython(version):
    python = INTERPRETERS.get(version)
    if python is None:
        pytest.skip(f"no CPython {version[0]}.{version[1]} on this machine (pyenv)")
    code = (
        f"import sys, json; sys.path.insert(0, {str(HERE)!r}); "
        "from test_fstring_fields_oracle import verdicts; print(json.dumps(verdicts()))"
    )
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert not compare(version, json.loads(out.stdout))


@pytest.mark.parametrize("version", [(3, 11), (3, 12)])
def test_error_points_into_the_field(version):
    parser = PrefixParser(Recognizer(python_version=version))
    r = check_source(b'x = f"{a[}"\n', parser)
    assert not r.ok and "f-string" in r.message and r.column == 10
    r = check_source(b'x = f"abc {lambda y: 1}"\n', parser)
    assert not r.ok and "f-string" in r.message


def test_matcher_parses_the_field_a_token_writes(compiled):
    """The store's rows see a string lexeme; taking a token parses the fields it writes, so a
    token that closes a field on an incomplete expression or a wrong bracket is refused."""
    comp, _ = compiled
    by = comp.vocab.by_bytes

    def takes(prefix: str, token: bytes) -> bool:
        m = GrammarMatcher.from_prefix(comp, prefix)
        assert m.next_token_mask()[by[token]]  # the lexeme allows it
        return m.fork().accept_token(by[token])

    assert takes('x = f"{a', b" +")
    assert not takes('x = f"{a +', b'}"')
    assert takes('x = f"{a +', b" b")
    assert not takes('x = f"{a[', b"}")
    assert takes('x = f"{a[', b"1")
    assert not takes('x = f"{lambda y', b":")  # the spec starts there: `lambda y` is no expression
    assert takes('x = f"{a[1', b":")  # inside brackets a slice


def test_broken_field_before_the_cursor(compiled):
    """In a complete string before the cursor a broken field is a syntax error where it is (so
    recovery treats it as one); in the string the cursor is in, no token can mend it."""
    parser = PrefixParser(Recognizer(python_version=(3, 11)))
    with pytest.raises(ParseError) as e:
        parser.parse(b'x = 1\ny = f"{a +} and {b}"\nz = ')
    assert "f-string" in str(e.value) and e.value.pos == len('x = 1\ny = f"{a +')
    comp, _ = compiled
    assert not GrammarMatcher.from_prefix(comp, 'x = 1\ny = f"{a +} and {b').next_token_mask().any()
    assert GrammarMatcher.from_prefix(comp, 'x = 1\ny = f"{a + 1} and {b[c').next_token_mask().any()


def test_completion_in_a_field_parses(compiled):
    """A model that wants to close the field on an incomplete expression: what the engine offers
    is valid Python (without the fields parsed it offered ` +}"`); a valid field is offered as
    the model wrote it."""
    from test_completion import accept, complete_at_marker, parses

    doc = 'def f(total):\n    return f"sum: {total|\n'
    text, off, result = complete_at_marker(compiled, doc, ' +}"\n', python_version="3.11")
    assert result.text != ' +}"'
    assert not result.text or parses(accept(text, off, result)), result.text  # empty: nothing offered
    doc = 'def f(user):\n    return f"hello {user|\n'
    text, off, result = complete_at_marker(compiled, doc, "['name']}!\"\n", python_version="3.11")
    assert result.text == "['name']}!\""
    assert parses(accept(text, off, result))
