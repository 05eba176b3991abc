"""Incremental parsing across edits gives what a fresh parse gives; the terminal-level API."""

from __future__ import annotations

import io
import random
import tokenize

import pytest
from corpus_support import read_source, stdlib_files

from grammar_tools.parsing.cpython_check import compiles
from grammar_tools.parsing.check import IncrementalParser, UnexpectedTerminal
from grammar_tools.parsing.incremental import ParseError, PrefixParser
from grammar_tools.lexing.lexer_automaton import LexError


def _outcome(parser: PrefixParser, data: bytes):
    try:
        st = parser.parse(data)
    except (ParseError, LexError) as e:
        return ("error", e.pos)
    return (
        tuple(c.key() for c in st.configs),
        st.lexer_state,
        st.lexeme_start,
        st.newline_width,
    )


def test_edits_reuse_checkpoints_and_match_a_fresh_parse(recognizer, lexer):
    rng = random.Random(5)
    files = [p for p in stdlib_files(include_tests=False) if 3000 < p.stat().st_size < 40000]
    rng.shuffle(files)
    compared = 0
    for path in files[:20]:
        data = read_source(path)
        if data is None:
            continue
        text = data.decode()
        cursor = rng.randrange(len(text) // 2, len(text))
        inc = PrefixParser(recognizer, lexer)
        for _ in range(15):
            kind = rng.random()
            if kind < 0.5:  # type at the cursor
                text = text[:cursor] + "x" + text[cursor:]
                cursor += 1
            elif kind < 0.7:  # delete before the cursor
                if cursor > 0:
                    text = text[: cursor - 1] + text[cursor:]
                    cursor -= 1
            elif kind < 0.85:  # an edit somewhere above
                i = rng.randrange(0, max(cursor, 1))
                text = text[:i] + "(" + text[i:]
                cursor += 1
            else:  # move the cursor
                cursor = rng.randrange(0, len(text))
            prefix = text[:cursor].encode()
            assert _outcome(inc, prefix) == _outcome(PrefixParser(recognizer, lexer), prefix)
            compared += 1
    assert compared >= 200


def test_feed_accepts_snapshot_restore(recognizer):
    p = IncrementalParser(recognizer)
    for t in ["NAME", "EQUAL", "NAME"]:
        p.feed(t)
    assert p.accepts(["PLUS", "DEC_NUMBER"])
    assert not p.accepts(["PLUS", "PLUS", "RPAR"])
    snap = p.snapshot()
    before = p.accepted_terminals()
    p.feed("LPAR")
    assert "RPAR" in p.accepted_terminals()
    p.restore(snap)
    assert p.accepted_terminals() == before
    with pytest.raises(UnexpectedTerminal):
        p.feed("DEF")
    p.feed_newline(0)
    assert p.is_accepted()


def test_prefix_ending_mid_token_and_in_layout(recognizer, lexer):
    cases = {
        b"def f():\n    ret": (b"ret", "RETURN"),
        b"x = 0x": (b"0x", "HEX_NUMBER"),
        b'x = "abc': (b'"abc', "STRING"),
        b"x = f": (b"f", "FSTRING"),
        b"if x:\n   ": (b"\n   ", "_NEWLINE"),
        b"f(a,\n  ": (b"\n  ", "_NEWLINE"),
        b"x = 1  # note": (b"# note", "_NEWLINE"),
    }
    for text, (held, terminal) in cases.items():
        parser = PrefixParser(recognizer, lexer)
        st = parser.parse(text)
        assert text[st.lexeme_start :] == held
        possible = set(recognizer.grammar.names(lexer.possible[st.lexer_state]))
        assert terminal in possible
    # the indentation typed so far is known, and inside brackets newlines don't count
    st = PrefixParser(recognizer, lexer).parse(b"if x:\n   ")
    assert st.newline_width == (3, 3)
    st = PrefixParser(recognizer, lexer).parse(b"f(a,\n  ")
    assert st.configs[0].depth == 1


def test_can_end(recognizer, lexer):
    parser = PrefixParser(recognizer, lexer)
    for text, ok in [
        (b"x = 1", True),
        (b"x = (1", False),
        (b"if x:\n    pass\n    ", True),
        (b"if x:\n", False),
        (b"def f():\n    return 1  # done", True),
        (b"", True),
        (b"x = 'abc", False),
        (b"x = 1, \\\n", False),  # CPython: unexpected EOF right after a line continuation
        (b"x = 1, \\\n   ", True),
        (b"x = 1, \\\n\n", True),
        (b"x = 1  # c \\\n", True),  # a comment's backslash continues nothing
    ]:
        assert parser.can_end(parser.parse(text), text) == ok, text
        assert compiles(text) == ok, text


def test_indent_width_follows_cpythons_tokenizer():
    """One rule for every part (parser, stopping, recovery): a tab moves `col` to the next
    multiple of 8 and counts 1 in `altcol`; a form feed resets both. CPython compiles a block's
    first line and a next one exactly when they have the same widths or the next dedents to 0."""
    from grammar_tools.parsing.incremental import indent_width, newline_width
    from lsp_server.decoding.stopping.rest_of_file import line_indent

    assert indent_width(b"    x") == (4, 4)
    assert indent_width(b"\t  ") == (10, 3)
    assert indent_width(b"  \f  ") == (2, 2)
    assert indent_width(b"\t\f ") == (1, 1)
    assert newline_width(b"\n  \n\t # note") == (9, 2)
    assert line_indent("\f    return") == 4
    prefixes = [b"    ", b"\t", b"\f    ", b"  \f  ", b"\t\f    ", b"    \f", b" \t", b"\f\t", b"\f", b" \f   "]
    for a in prefixes:
        for b in prefixes:
            src = b"if 1:\n" + a + b"x = 1\n" + b + b"y = 2\n"
            same = compiles(src)  # refused as IndentationError / TabError included
            wa, wb = indent_width(a), indent_width(b)
            assert same == (wa != (0, 0) and wb in (wa, (0, 0))), (a, b)


def test_the_mask_store_and_stopping_measure_indents_as_the_parser():
    """The mask store's token indents (a newline lexeme's bytes as far as a token goes, or more of
    an open one) and the stop policy's cursor context give the parser's widths: form feeds reset,
    a comment ends the indentation."""
    from grammar_tools.parsing.incremental import extend_width, newline_width
    from lsp_server.decoding.stopping.rest_of_file import continues_deeper

    for lexeme in (b"\n  \f    ", b"\n\t  ", b"\n    \f", b"\n  # note", b"\n\n\t # c", b"\n \t"):
        assert extend_width(None, lexeme) == newline_width(lexeme), lexeme
        assert extend_width(extend_width(None, lexeme[:2]), lexeme[2:]) == newline_width(lexeme), lexeme
    # after a form feed the next line is at column 2, not deeper than the cursor's statement at 4
    assert not continues_deeper("\n\f      \f  y = 1\n", 4)
    assert continues_deeper("\n      y = 1\nz\n", 4)


def _lines_between_statements(text: str) -> set[int]:
    """Python's tokenizer's view: the lines (0-based) from the one after a statement's NEWLINE
    to the next statement's first line (the blank and comment lines between included)."""
    lines, after = set(), None
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.NEWLINE:
            after = tok.start[0]  # 1-based: the next line, 0-based
        elif tok.type not in (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
            if after is not None:
                lines.update(range(after, tok.start[0]))
            after = None
    return lines


def _gap_lines(data: bytes, gaps) -> set[int]:
    return {line for s, e in gaps for line in range(data.count(b"\n", 0, s) + 1, data.count(b"\n", 0, e) + 1)}


def test_the_gaps_between_statements_are_the_lines_pythons_tokenizer_starts_statements_on(recognizer, lexer):
    sample = (b'import os\n# c\nx = (1,\n  2)\ns = """doc\ny = 3\n"""  # tail\n\ndef f(a,\n      b):\n'
              b'    return a \\\n        + b\nz = 1\n')
    parser = PrefixParser(recognizer, lexer)
    parser.parse(sample)
    # not inside the bracket (3), the string (5, 6), the parameters (9) or after the backslash (11)
    assert _gap_lines(sample, parser.statement_gaps(sample)) == {1, 2, 4, 7, 8, 10, 12}
    # only within the text last parsed: an edit above leaves what comes after it unknown
    assert _gap_lines(sample, parser.statement_gaps(sample[:20] + b"(" + sample[20:])) == {1, 2}
    files = [p for p in stdlib_files(include_tests=False) if 3000 < p.stat().st_size < 30000][:12]
    compared = 0
    for path in files:
        data = read_source(path)
        if data is None or not compiles(data.decode()):
            continue
        compared += 1
        text = data.decode()
        parser.parse(data)
        lines = _gap_lines(data, parser.statement_gaps(data))
        expected = _lines_between_statements(text)
        first = min(expected)  # the lines before the file's first statement hold no gap
        last = text.rstrip().count("\n")  # nor those after its last (its newline is held back)
        assert {n for n in lines if first <= n < last} == {n for n in expected if first <= n < last}, path
    assert compared >= 8
