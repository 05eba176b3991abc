"""A syntax error before the cursor doesn't stop completion.

In 60 stdlib files an early top-level definition is broken (a bracket deleted, or a line
indented wrong); at cut points inside later definitions, the parser must recover and give the
same accepted terminals, lexer state and held-back lexeme as on the unbroken file.
"""

from __future__ import annotations

import random
import re

from corpus_support import read_source, stdlib_files

from grammar_tools.parsing.check import IncrementalParser
from grammar_tools.parsing.incremental import ParseError, PrefixParser, parse_prefix
from grammar_tools.lexing.lexer_automaton import LexError

TOP = re.compile(rb"^(def|class|async def) ", re.M)


def _break(data: bytes, start: int, variant: int) -> bytes | None:
    line_end = data.index(b"\n", start)
    line = data[start:line_end]
    if variant == 0 and b"(" in line:
        i = start + line.index(b"(")
        return data[:i] + data[i + 1 :]
    # indent the body's first line one column more: the next line dedents to an unknown width
    nxt = line_end + 1
    m = re.match(rb"( +)\S", data[nxt:])
    if not m:
        return None
    return data[:nxt] + b" " + data[nxt:]


def _accepted(parser, st):
    return IncrementalParser(parser.recognizer, st.configs).accepted_mask()


def test_recovers_after_an_earlier_broken_definition(recognizer, lexer):
    rng = random.Random(7)
    files = [p for p in stdlib_files(include_tests=False)]
    rng.shuffle(files)
    broken_files = 0
    cut_points = 0
    for path in files:
        data = read_source(path)
        if data is None:
            continue
        tops = [m.start() for m in TOP.finditer(data)]
        if len(tops) < 4:
            continue
        variant = broken_files % 2
        bad = _break(data, tops[0], variant)
        if bad is None:
            continue
        delta = len(bad) - len(data)
        try:
            PrefixParser(recognizer, lexer).parse(bad[: tops[2] + delta])
            continue  # the change didn't break the file
        except (ParseError, LexError):
            pass
        broken_files += 1
        # cut points inside the third and later top-level definitions
        for _ in range(5):
            c = rng.randrange(tops[2] + 1, len(data))
            while c < len(data) and (data[c] & 0xC0) == 0x80:
                c += 1  # a character boundary
            good = PrefixParser(recognizer, lexer)
            st_good = good.parse(data[:c])
            rec = PrefixParser(recognizer, lexer)
            st_bad = parse_prefix(rec, bad[: c + delta])
            assert st_bad.recovered is not None, path
            assert st_bad.lexer_state == st_good.lexer_state, (path, c)
            assert st_bad.held_back_len == st_good.held_back_len, (path, c)
            assert _accepted(rec, st_bad) == _accepted(good, st_good), (path, c, data[c - 40 : c])
            cut_points += 1
        if broken_files >= 60:
            break
    assert broken_files >= 50
    assert cut_points >= 250
