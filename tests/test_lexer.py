"""The lexer automaton splits text exactly as CPython's tokenizer does."""

from __future__ import annotations

import io
import random
import tokenize
import warnings

import pytest
from conftest import read_source, stdlib_files

from grammar_tools.lexing.lexer_automaton import LexError


def _our_tokens(lexer, data: bytes) -> list[str]:
    g = lexer.grammar
    skip = set(g.ignored) | {g.term_id["_NEWLINE"]}
    lexemes, state, start = lexer.lex(data)
    lexemes.append((start, len(data), state))
    out = []
    for a, b, d in lexemes:
        terms = set(lexer.accepting_ids[d])
        if a == b or terms & skip:
            continue
        text = data[a:b].decode()
        out.extend([".", "."] if text == ".." else [text])  # DOTDOT is CPython's two DOTs
    return out


def _cpython_tokens(data: bytes) -> list[str]:
    drop = {tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT,
            tokenize.ENDMARKER}
    return [t.string for t in tokenize.generate_tokens(io.StringIO(data.decode()).readline)
            if t.type not in drop]


def test_tokens_match_cpython_on_stdlib(lexer):
    files = stdlib_files(include_tests=True)
    rng = random.Random(3)
    sample = rng.sample(files, 300)
    compared = 0
    for path in sample:
        data = read_source(path)
        if data is None:
            continue
        try:
            theirs = _cpython_tokens(data)
        except (tokenize.TokenError, SyntaxError):
            continue
        assert _our_tokens(lexer, data) == theirs, path
        compared += 1
    assert compared >= 250


STRINGS = [
    '""', "''", '"abc"', "'a\\'b'", '"a\\\nb"', 'r"\\""', '"\\x41"', '"\\N{BULLET}"',
    '"\\u1234"', '"\\U0010FFFF"', 'b"\\u12"', '"é"', 'u"x"', 'Rb"x"', 'bR"x"', 'F"x"',
    'f"{x}"', 'f"}}"', 'f"{{"', 'f"{x!r:>{w}}"', 'f"{x=}"', "f\"{a['b']}\"", 'f"{a!=b}"',
    'rf"\\d{3}"', '"""a"b""c"""', "'''a\n'''", "f'''{\n x\n}'''", 'b"\\x00"',
    # invalid
    'r"\\"', '"\\x4"', '"\\u12"', '"\\U00110000"', 'b"é"', 'f"{}"', 'f"}"', 'f"{ }"',
    '"a\nb"', 'ur"x"', 'f"{x#}"', 'f"{x!}"', 'f"{x!z}"', '"\\N{}"',
]


@pytest.mark.parametrize("literal", STRINGS)
def test_string_literal_as_cpython(literal, lexer):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            compile(literal, "<s>", "eval")
            expected = True
        except SyntaxError:
            expected = False
    data = literal.encode()
    end = lexer.run(data)
    ours = end >= 0 and bool(lexer.accepting[end]) and lexer.rows[end][ord("\n")] < 0
    assert ours == expected


@pytest.mark.parametrize(
    "prefix, possible",
    [
        ("ret", {"NAME", "RETURN"}),
        ("0x", {"HEX_NUMBER"}),
        ('"abc', {"STRING"}),
        ("f", {"NAME", "FSTRING", "LONG_FSTRING", "FOR", "FROM", "FINALLY"}),
        ("F", {"NAME", "FSTRING", "LONG_FSTRING", "FALSE"}),
        ("rb", {"NAME", "BYTES", "LONG_BYTES"}),
        ("tr", {"NAME", "TSTRING", "LONG_TSTRING", "TRY"}),
        ("Rt", {"NAME", "TSTRING", "LONG_TSTRING"}),
        ("1.", {"FLOAT_NUMBER", "IMAG_NUMBER"}),
        ("..", {"DOTDOT", "ELLIPSIS"}),
        ("#", {"COMMENT", "_NEWLINE"}),
    ],
)
def test_partial_lexeme_keeps_every_terminal_it_may_become(prefix, possible, lexer):
    g = lexer.grammar
    state = lexer.run(prefix.encode())
    assert set(g.names(lexer.possible[state])) == possible


def test_keywords_win_over_name_but_soft_keywords_keep_both(lexer):
    g = lexer.grammar
    assert g.names(lexer.accepting[lexer.run(b"def")]) == ["DEF"]
    assert set(g.names(lexer.accepting[lexer.run(b"match")])) == {"MATCH", "NAME"}
    assert g.names(lexer.accepting[lexer.run(b"define")]) == ["NAME"]


def test_lex_error_position(lexer):
    with pytest.raises(LexError) as e:
        lexer.lex(b"x = 1 $ 2")
    assert e.value.pos == 6
