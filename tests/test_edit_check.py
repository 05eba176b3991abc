"""Checked before offered: an edit's verdict is the whole file's, read by resynchronisation."""

from __future__ import annotations

import io
import random
import tokenize

import pytest
from corpus_support import read_source, stdlib_files

from grammar_tools.parsing.check import check_source
from grammar_tools.parsing.cpython_check import compiles
from grammar_tools.parsing.edit_check import EditCheck
from grammar_tools.parsing.incremental import ParseError, PrefixParser
from grammar_tools.parsing.incremental import parse_prefix


@pytest.fixture(scope="module")
def parser_factory(recognizer, lexer):
    return lambda: PrefixParser(recognizer, lexer)


def checked(parser_factory, doc: str, insert: str, replaced: int = 0):
    """The verdict for `insert` at the `|` of `doc` (in place of `replaced` characters)."""
    at = doc.index("|")
    before, after = doc[:at].encode(), doc[at + 1 :].encode()
    return EditCheck(parser_factory(), before, after).check(insert.encode(), replaced)


def statement_start(parser: PrefixParser, data: bytes, pos: int) -> int:
    """Where the statement that holds offset `pos` of `data` starts (it parses up to there)."""
    parser.parse(data[: pos + 1])  # the lexeme before the error complete
    return parser.restart_points(pos, 1)[1][-1][0]


def test_verdicts_are_the_whole_files_on_cut_stdlib_files(parser_factory):
    """Cut points of real files (the rest of the cursor's line dropped, as while typing it), and
    edits there: the line's own rest, prefixes of it, stray closers, a string opener, a block.
    An edit passes when it leaves a file that parses, or one whose first error is the one the
    cut file already had, at the same place of the text after the edit, in a statement after
    the one the edit is in (the cut may have broken a statement that encloses the cursor: a
    `try` that lost its `except` line fails where the `try` ends, whatever is written at the
    cursor; but an edit must finish its own statement)."""
    rng = random.Random(11)
    files = [p for p in stdlib_files(include_tests=False) if 4_000 < p.stat().st_size < 30_000]
    rng.shuffle(files)
    compared = refused = renested = 0
    for path in files[:16]:
        data = read_source(path)
        if data is None or not check_source(data, parser_factory()).ok:
            continue
        lines = data.decode().split("\n")
        for _ in range(3):
            i = rng.randrange(len(lines))
            line = lines[i]
            if not line.strip():
                continue
            ch = rng.choice([len(line) - len(line.lstrip()), rng.randrange(len(line) + 1)])
            before = "\n".join(lines[:i] + [line[:ch]])
            after = "\n" + "\n".join(lines[i + 1 :])
            rest = line[ch:]
            check = EditCheck(parser_factory(), before.encode(), after.encode())
            cut = check_source((before + after).encode(), parser_factory())
            for insert in (rest, rest[: rng.randrange(len(rest) + 1)], rest + ")", rest + "]\n",
                           '"""', "\n", "if x:\n" + " " * (len(line) - len(line.lstrip()) + 4) + "pass"):
                verdict = check.check(insert.encode())
                whole = check_source((before + insert + after).encode(), parser_factory())
                shift = len(insert.encode())
                same_error = (not whole.ok and not cut.ok and cut.pos >= len(before.encode())
                              and whole.pos - shift == cut.pos
                              and statement_start(parser_factory(), (before + insert + after).encode(), whole.pos)
                              >= len(before.encode()) + shift)
                if whole.ok and not verdict.ok:  # refused though valid: only for re-nesting the existing text
                    assert depth_changed(before, insert, after), (path, i, ch, insert, verdict)
                    renested += 1
                else:
                    assert verdict.ok == (whole.ok or same_error), (path, i, ch, insert, verdict)
                compared += 1
                refused += not verdict.ok
    assert compared >= 100 and 0 < refused < compared  # both answers were exercised
    assert renested <= compared // 20


def depth_changed(before: str, insert: str, after: str) -> bool:
    """Whether the first line of code after the cursor stands in a different number of blocks
    (Python's tokenizer: INDENT/DEDENT) with `insert` at the cursor than without it."""

    def depth(text: str, at: int) -> int | None:
        starts = [0] + [k + 1 for k, c in enumerate(text) if c == "\n"]
        level = 0
        try:
            for t in tokenize.generate_tokens(io.StringIO(text).readline):
                level += (t.type == tokenize.INDENT) - (t.type == tokenize.DEDENT)
                if t.type not in (tokenize.INDENT, tokenize.DEDENT, tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT) \
                        and starts[t.start[0] - 1] + t.start[1] >= at:
                    return level
        except (tokenize.TokenError, SyntaxError):
            return None
        return None

    code = len(after) - len(after.lstrip())
    return depth(before + after, len(before) + code) != depth(before + insert + after, len(before + insert) + code)


def test_a_valid_edit_is_checked_in_a_few_lines_of_a_long_file(parser_factory):
    body = "".join(f"def f{i}(a, b):\n    return a + b * {i}\n\n\n" for i in range(800))
    doc = body + "x = f1(1, |\n" + body
    verdict = checked(parser_factory, doc, "2)")
    assert verdict.ok and verdict.synced is not None
    assert verdict.lexemes < 20  # the rest of the file (~19,000 lexemes) was not read


def test_a_parameter_list_closed_early_is_refused(parser_factory):
    """The cursor after a parameter name in a multi-line `def f(` whose parameters go on for
    five more lines: closing the list there makes the remaining parameter lines statements."""
    doc = ("def check(\n    value|\n    strict,\n    limit,\n    *,\n    key=None,\n    default=0,\n"
           ") -> bool:\n    return bool(value)\n\n\nx = check(1, 2, 3)\n")
    assert not checked(parser_factory, doc, ": int) -> bool:\n    return True").ok
    assert checked(parser_factory, doc, ": int,").ok
    assert checked(parser_factory, doc, ",").ok


def test_a_string_closed_and_reopened_is_refused(parser_factory):
    """A cursor at column 0 inside a long triple-quoted string: closing it (and opening a string
    of the other quote) turns every later string of the file inside out."""
    text = "".join(f"line {i} of the text\n" for i in range(40))
    cut = text.index("line 10")
    doc = "DOC = '''\n" + text[:cut] + "|" + text[cut:] + "'''\n\n\ndef f():\n    return \"\"\"b\"\"\"\n"
    assert not checked(parser_factory, doc, "'''\nTITLE = \"\"\"Title").ok
    assert not checked(parser_factory, doc, "'''").ok
    assert checked(parser_factory, doc, "'''\nTITLE = '''Title").ok  # the same quote: balanced
    assert checked(parser_factory, doc, "more words").ok


def test_a_statement_left_unfinished_is_refused_though_the_next_line_fits_it(parser_factory):
    """The cut removed the end of a call: an argument that the next line can follow (it reads
    as one more argument) but that leaves the call open to the end of the file is refused."""
    doc = "x = f(1, |\ny = 2\nz = 3\n"
    assert not checked(parser_factory, doc, "2,").ok
    assert checked(parser_factory, doc, "2)").ok


def test_errors_the_document_already_had_do_not_count(parser_factory):
    # a broken statement far below the cursor stays broken; an edit above it is judged alone
    # a block header cut away: its body and its `else:` hang (the `else:` is the first line
    # no deeper than the cursor's)
    doc = "if a:\n    pass\nelse:\n    |\n        out = 1\n    else:\n        out = 2\n"
    at = doc.index("|")
    before, after = doc[:at].encode(), doc[at + 1 :].encode()
    assert EditCheck(parser_factory(), before, after).ok(b"# a note")
    strict = EditCheck(parser_factory(), before, after, strict=True)
    assert not strict.ok(b"# a note") and strict.ok(b"if b:")
    doc = "a = 1\n|\nb = 2\n\n\ndef g(:\n    pass\n"
    assert checked(parser_factory, doc, "c = 3").ok
    assert not checked(parser_factory, doc, "c = (3").ok
    # and one above the cursor: the text before the cursor is given as recovery reads it
    doc = "a = 1)\n|\nb = 2\n"
    with pytest.raises(ParseError):
        checked(parser_factory, doc, "c = 3")
    before, after = b"a = 1)\n", b"\nb = 2\n"
    parser = parser_factory()
    state = parse_prefix(parser, before)
    check = EditCheck(parser, state.recovered.rewrite(before), after)
    assert check.ok(b"c = 3") and not check.ok(b"c = (3")


def test_an_edit_at_the_end_of_the_file_must_end_it(parser_factory):
    assert checked(parser_factory, "def f(x):\n    return |", "x").ok
    assert not checked(parser_factory, "def f(x):\n    return |", "(x").ok
    assert checked(parser_factory, "x = [1,|", " 2]").ok


def test_replaced_closers_are_supplied_by_the_edit(parser_factory):
    doc = "y = f(|)\nz = 2\n"
    assert checked(parser_factory, doc, "g(1))", replaced=1).ok
    assert not checked(parser_factory, doc, "g(1)", replaced=1).ok
    assert checked(parser_factory, doc, "g(1)").ok


def test_strict_mode_counts_an_error_in_the_statement_right_after_the_edit(parser_factory):
    """A line cut at its indentation, leaving its continuation line dangling: an edit that does
    not mend it (a comment) leaves the file as broken as it was, which the default mode lets
    pass and the strict mode (the engine's) refuses; an error further on is still excused."""
    doc = "def f(x):\n    |\n        1))\n    return x\n\n\nz = 1\n"
    at = doc.index("|")
    before, after = doc[:at].encode(), doc[at + 1 :].encode()
    lenient = EditCheck(parser_factory(), before, after)
    strict = EditCheck(parser_factory(), before, after, strict=True)
    assert lenient.ok(b"# a note")
    assert not strict.ok(b"# a note") and not strict.ok(b"y = 2")
    assert strict.ok(b"y = (f(0,") and lenient.ok(b"y = (f(0,")  # mends it
    doc = "a = 1\n|\nb = 2\n\n\ndef g(:\n    pass\n"
    at = doc.index("|")
    strict = EditCheck(parser_factory(), doc[:at].encode(), doc[at + 1 :].encode(), strict=True)
    assert strict.ok(b"c = 3") and not strict.ok(b"c = (3")


def test_reach_bounds_what_a_check_reads(parser_factory):
    """An edit that opens a string swallowing the rest of a long file is refused once its parse
    has gone `reach` bytes past the edit without meeting the document's; edits that meet it
    within reach are judged as without a bound."""
    body = "".join(f"def f{i}(a, b):\n    return a + b * {i}\n\n\n" for i in range(400))
    doc = "x = |\n" + body + "y = '''\n"
    at = doc.index("|")
    before, after = doc[:at].encode(), doc[at + 1 :].encode()
    unbounded = EditCheck(parser_factory(), before, after)
    bounded = EditCheck(parser_factory(), before, after, reach=4096)
    assert unbounded.ok(b"'''") and not bounded.ok(b"'''")  # the string ends at the file's last line
    for insert in (b"1", b"(1,", b"f0(1, 2)"):
        assert bounded.ok(insert) == unbounded.ok(insert)
    assert bounded.ok(b"1") and not bounded.ok(b"(1,")


def _table_checks(parser_factory, first_line: str):
    """A table of 3,000 entries whose first line is `first_line` (the cursor at its `|`): the
    document, the text before and after the cursor, a strict check without a reach and one with
    a reach of 4 KB."""
    rows = "".join(f"    'key{i}': {{'id': 'K{i}', 'old': False}},\n" for i in range(3000))
    doc = "TABLE = {\n" + first_line + "\n" + rows + "}\n\n\nx = 1\n"
    at = doc.index("|")
    before, after = doc[:at].encode(), doc[at + 1 :].encode()
    return (doc, before, after, EditCheck(parser_factory(), before, after, strict=True),
            EditCheck(parser_factory(), before, after, strict=True, reach=4096))


def test_reach_bounds_the_read_of_a_long_statement(parser_factory):
    """An edit that meets the document's parse inside a table of thousands of lines: the
    statement it is in is read for errors `reach` bytes on, not to its far end; the verdicts
    are those of the unbounded check (an error the edit leaves in its own line still refuses)."""
    doc, before, after, unbounded, bounded = _table_checks(parser_factory, "|")
    at = len(before)
    for insert in (b"    'new': 1,", b"    'new': {'id': 'N'},", b"    'new': 1", b"    'new': (1,"):
        assert bounded.ok(insert) == unbounded.ok(insert), insert
    assert bounded.ok(b"    'new': 1,") and not bounded.ok(b"    'new': 1")
    assert bounded.reference.reached < at + 2 * 4096 < len(doc) // 10  # not the table's far end
    assert unbounded.reference.reached > len(doc) - 20  # read to the table's end


def test_a_bracket_a_cut_left_open_to_the_end_of_a_long_table_refuses(parser_factory):
    """The cut removed a table entry's closing brace (`'ipa': {'id': 'IPA', 'deprecated'|`), in a
    table longer than the reach: an edit that leaves the entry open meets the document's parse
    and no error shows within reach, but the table then never closes (CPython: "'{' was never
    closed" at the end of the file). Refused, as the unbounded check refuses it. (The edit that
    closes the entry is taken by the unbounded check only: its parse, a bracket shallower than
    the document's, never meets the document's within reach.)"""
    _, before, after, unbounded, bounded = _table_checks(parser_factory, "    'ipa': {'id': 'IPA', 'deprecated'|")
    for insert in (b"+", b": {'a': 1},", b": False}", b" + 'x'", b": False},"):
        assert unbounded.ok(insert) == compiles(before + insert + after), insert
        assert not bounded.ok(insert) or unbounded.ok(insert), insert  # what it takes compiles
    assert unbounded.ok(b": False},") and not bounded.ok(b"+") and not bounded.ok(b": {'a': 1},")


def test_recovery_takes_the_enclosing_statement_when_the_inner_one_reads_into_an_error(parser_factory):
    """A cut `except` clause (`except Exce|`): `pass` can't stand for it (a `try` needs a
    clause), and `pass` for the body line before it reads into the next error at once (the
    `try` still has no clause at the dedent), so the document's parse takes the whole `try` as
    `pass` and goes on at the next line. Checks then meet it there instead of reading the long
    rest of the file, and a bounded check accepts what mends the clause."""
    body = "".join(f"def f{i}(a, b):\n    return a + b * {i}\n\n\n" for i in range(400))
    doc = ("def guarded(func):\n    def wrapper(*args):\n        try:\n            return func(*args)\n"
           "        except Exce|\n            pass\n        return None\n\n    return wrapper\n\n\n" + body)
    at = doc.index("|")
    before, after = doc[:at].encode(), doc[at + 1 :].encode()
    bounded = EditCheck(parser_factory(), before, after, strict=True, reach=4096)
    unbounded = EditCheck(parser_factory(), before, after, strict=True)
    for insert in (b"ption:", b"ption as e:", b"ption", b"ption:\n            return 1", b"ption: pass"):
        assert bounded.ok(insert) == unbounded.ok(insert), insert
    assert bounded.ok(b"ption:") and bounded.ok(b"ption as e:") and not bounded.ok(b"ption")
    assert bounded.check(b"ption:").synced is not None  # met the document's parse
    ref = bounded.reference
    ref.at(len(before) + len(after))
    assert ref.ends and len(ref.errors) == 1  # read on to the file's end, past its one error


LOOP = "def f(items):\n    result = 0\n    for item in items:\n|        result += item\n    return result\n"


@pytest.mark.parametrize("insert, ok", [
    ("        total = item\n", True),  # whole lines: the existing line moves down intact
    ("        answer = ", False),  # glued: `answer = result += item` (or a chained assignment)
    ("        if item == 1:", False),  # a one-line `if` whose body would be the existing line
    ("        ", False),  # re-indents the existing line
    ("    if item:\n", False),  # the `for` left without a body
    ("", True),
])
def test_an_edit_at_a_line_start_keeps_the_existing_line_intact(parser_factory, insert, ok):
    assert checked(parser_factory, LOOP, insert).ok is ok


def test_a_chained_assignment_glue_is_refused(parser_factory):
    doc = "def g(x):\n    y = x\n|    result = len(y)\n    return result\n"
    assert checked(parser_factory, doc, "    answer = ").ok is False  # compiles, but rewrites the line
    assert checked(parser_factory, doc, "    answer = y\n").ok is True
    # at the end of the existing line's indentation: the answer's lines, then the indentation again
    at_indent = "def g(x):\n    y = x\n    |result = len(y)\n    return result\n"
    assert checked(parser_factory, at_indent, "answer = y\n    ").ok is True
    assert checked(parser_factory, at_indent, "answer = y\n").ok is False  # the line dedented
    assert checked(parser_factory, at_indent, "answer = ").ok is False


def test_an_eight_space_answer_that_reindents_the_next_line_is_refused(parser_factory):
    doc = "def h(text):\n    if not text:\n        return None\n|    value = int(text)\n    return value\n"
    assert checked(parser_factory, doc, "        ").ok is False  # `value = ...` moved into the `if`
    # whole lines at the `if` body's depth: the existing line moves down at its own depth
    assert checked(parser_factory, doc, "        text = text.strip()\n").ok is True
    assert checked(parser_factory, doc, "if x:\n").ok is False  # the function closed above the line
