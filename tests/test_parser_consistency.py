"""The incremental parser agrees with the full lex, with the true next terminal, and with lark.

At 5,000+ random cut points in stdlib files:
- the held-back lexeme is the true lexeme's start and a viable prefix of its terminal;
- the parser configurations accept the true lexeme (its terminal comes next);
- the recognizer's accepted terminals equal lark's own `InteractiveParser.accepts()` after the
  same terminals (guards off and all version features on, as lark has neither).
"""

from __future__ import annotations

import random

import pytest
from corpus_support import read_source, stdlib_files
from lark import Lark, Token
from lark.lexer import Lexer

from grammar_tools.parsing.lookahead import accepted
from grammar_tools.grammar import grammar_text
from grammar_tools.parsing.incremental import PrefixParser, newline_width
from grammar_tools.parsing.recognizer import Recognizer
from grammar_tools.parsing.versions import NEWEST

N_FILES = 50
CUTS_PER_FILE = 100


class _NoLexer(Lexer):
    def __init__(self, conf):
        pass

    def lex(self, data):
        return iter(())


@pytest.fixture(scope="module")
def lark_parser():
    return Lark(grammar_text(), parser="lalr", lexer=_NoLexer, start="file_input")


def _sample_files():
    files = [p for p in stdlib_files(include_tests=False) if p.stat().st_size > 2000]
    rng = random.Random(1234)
    rng.shuffle(files)
    out = []
    for p in files:
        data = read_source(p)
        if data is not None:
            out.append((p, data))
        if len(out) == N_FILES:
            break
    return out


def _replay(rec: Recognizer, lexer, data: bytes):
    """Feed every lexeme; for each lexeme index, the configs (with their terminal histories)."""
    g = rec.grammar
    nl, ignored = g.term_id["_NEWLINE"], g.ignored
    lexemes, state, start = lexer.lex(data)
    lexemes.append((start, len(data), state))
    configs = [(rec.initial(), ())]
    after = []
    for a, b, d in lexemes:
        terms = lexer.accepting_ids[d]
        new = []
        for node, hist in configs:
            if nl in terms:
                col, alt = newline_width(data[a:b])
                n = rec.feed_newline(node)
                h = hist + ((nl,) if n is not node else ())
                if n is not None:
                    before = n
                    n = rec.feed_indentation(n, col, alt)
                    if n is not None and n is not before:
                        extra = tuple(rec.indentation_terminals(before, col, alt) or ())
                        h = h + extra
                if n is not None:
                    new.append((n, h))
            elif all(t in ignored for t in terms):
                new.append((node, hist))
            else:
                for t in terms:
                    n = rec.feed(node, t)
                    if n is not None:
                        new.append((n, hist + (t,)))
        assert new, f"replay failed at byte {a}"
        configs = new
        after.append(configs)
    return lexemes, after


@pytest.mark.slow
def test_cut_points_agree_with_full_lex_and_lark(recognizer, lexer, lark_parser):
    rec_plain = Recognizer(python_version=NEWEST, semantic_checks=False)
    g = recognizer.grammar
    rng = random.Random(99)
    checked = 0
    compared_with_lark = 0
    for path, data in _sample_files():
        text = data.decode()
        lexemes, after = _replay(rec_plain, lexer, data)
        final_hist = after[-1][0][1]
        # cut points at character boundaries, sorted so the parser reuses its checkpoints
        char_offsets = sorted(rng.sample(range(1, len(text) + 1), min(CUTS_PER_FILE, len(text))))
        cuts = sorted({len(text[:i].encode()) for i in char_offsets})
        parser = PrefixParser(recognizer, lexer)
        starts = [a for a, _, _ in lexemes]
        ip = lark_parser.parse_interactive("")
        fed = 0
        import bisect

        for c in cuts:
            st = parser.parse(data[:c])
            k = bisect.bisect_right(starts, c - 1) - 1  # the lexeme holding byte c-1
            a, b, d = lexemes[k]
            assert st.lexeme_start == a, (path, c)
            true_terms = set(lexer.accepting_ids[d])
            assert true_terms & set(lexer.possible_ids[st.lexer_state]), (path, c)
            # the true lexeme can come next
            assert parser.feed_lexeme(list(st.configs), data, a, b, d), (path, c, data[a:b])
            checked += 1
            # compare with lark where the terminals before the cut are unambiguous
            before = after[k - 1] if k > 0 else [(rec_plain.initial(), ())]
            if len(before) != 1:
                continue
            node, hist = before[0]
            assert final_hist[: len(hist)] == hist
            while fed < len(hist):
                ip.feed_token(Token(g.terminals[hist[fed]], ""))
                fed += 1
            ours = set(g.names(accepted(rec_plain, node)))
            theirs = set(ip.accepts())
            assert ours == theirs, (path, c, ours ^ theirs)
            compared_with_lark += 1
    assert checked >= 5_000
    assert compared_with_lark >= 4_500
