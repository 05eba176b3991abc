"""f-/t-string lexemes end where CPython 3.12+'s tokenizer ends them (PEP 701's rules).

The lexer reads an f-string as one lexeme with a bounded stack machine
(`string_automata._FStringMachine`); which version allows what inside a field is the field
checker's business, the lexeme's end is not version dependent. Each snippet's expected end is
asserted here and, where a pyenv CPython 3.12+ exists, checked against that CPython's own
tokenizer (FSTRING_START..FSTRING_END), as is a sample of its standard library.
"""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest
from fstring_spans import FSTRING_TERMINALS, compare, cpython_spans, interpreters, our_lexeme, stdlib_files

INTERPRETERS = interpreters()
NEWEST = INTERPRETERS[max(INTERPRETERS)] if INTERPRETERS else None
needs_cpython = pytest.mark.skipif(NEWEST is None, reason="no pyenv CPython >= 3.12 on this machine")

# (lexeme, what follows it, its terminal): valid Python 3.12 with the lexeme first
POSITIVE = [
    ('f"{d["a"]}"', ' + "b"', "FSTRING"),
    ('f"{", ".join(xs)}"', "\n", "FSTRING"),
    ('f"{f"{x}"}"', ' if x else "}"', "FSTRING"),
    ('f"{", ".join(f"{a!r}" for a in b)}"', "", "FSTRING"),
    ('f"{\n 1 + 2\n}"', "", "FSTRING"),
    ('f"{ {1: 2}[1] }"', "", "FSTRING"),
    ('f"{d[1:"a"]}"', "", "FSTRING"),
    ('f"{x # c "}\n}"', ' "', "FSTRING"),
    ('f"{x!r:>{w}}"', "", "FSTRING"),
    ('f"{x=}"', "", "FSTRING"),
    ('f"{x = !s:^{w}}"', "", "FSTRING"),
    ('f"{x:=10}"', "", "FSTRING"),
    ('f"{x!r }"', "", "FSTRING"),
    ('f"{x:\n}"', "", "FSTRING"),
    ('f"{a!=b}"', "", "FSTRING"),
    ('f"\\N{BULLET} {x}"', "", "FSTRING"),
    ('rf"\\N{x}\\{y}"', "", "FSTRING"),
    ('f"{x!s:{">" if a else "<"}10}"', "", "FSTRING"),
    ("f\"{'''a\"}'''}\"", "", "FSTRING"),
    ('f\'{"\\n".join(x)}\'', "", "FSTRING"),
    ('f"{rb"x"!r}{Rb"y"}{u"z"}"', "", "FSTRING"),
    ('f"{x if"a"else"b"}"', "", "FSTRING"),
    ('f"{"a" "b"}"', "", "FSTRING"),
    ('f"{f"{x}" + f"{y}"}"', "", "FSTRING"),
    ('f"{x:{{y}}}"', "", "FSTRING"),
    ('f"{x:}}}"', "", "FSTRING"),
    ('f"{{}}{x}"', ' "}"', "FSTRING"),
    ('f"{x}"', ' f"{y}"', "FSTRING"),
    ('f""', ' ""', "FSTRING"),
    ('f"{x:{y}}"', "", "FSTRING"),
    ('f"{x}"', '"', "FSTRING"),
    ('f"{(lambda x: "s")(1)}"', "", "FSTRING"),
    ('f"{return_}"', "", "FSTRING"),
    ('f"{\\\n x}"', "", "FSTRING"),
    ('f"{é}"', "", "FSTRING"),
    ('f"""a"""', '"', "LONG_FSTRING"),
    ('f"""{d["a"]}"""', "", "LONG_FSTRING"),
    ("f'''{x # }'''\n}'''", "", "LONG_FSTRING"),
    ('f"""{x:""}"""', "", "LONG_FSTRING"),
    ("f'''{f'{x}'}'''", "", "LONG_FSTRING"),
    ('f"{f"""{x}"""}"', "", "FSTRING"),
    ('F"{x}"', "", "FSTRING"),
    ('t"{name!r}"', "", "TSTRING"),
    ('Rt"{d["a"]}"', "", "TSTRING"),
    ("t'''{x}'''", "", "LONG_TSTRING"),
]

# texts CPython 3.12 refuses, none of which may be one lexeme of ours
NEGATIVE = [
    'f"{x"', 'f"}"', 'f"{x}}"', 'f"{"', 'f"{x:{{}"', 'f"{x! r}"', 'f"{}"', 'f"{ }"', 'f"{x)}"',
    'f"a\nb"', 'f"{x:"}"', 'f"{x # c}"', 'f"{x\\y}"', 'f"{x!z}"', 'f"{x!}"', 'f"{!r}"',
    'f"{=}"', 'f"{x:a\\}}"', 'f"{"a}"', "f'''{x:'''}'''",
]

# valid Python 3.12 beyond the automaton's limits (string_automata.FIELD_LIMITS): refused, as
# long as the lexer follows CPython; never read to another end
BEYOND = [
    'f"{f"{f"{x}"}"}"', 'f"{a(b(c(d(e))))}"', 'f"{x:{y:{z}}}"', 'f"{a(b(c(f"{x}")))}"',
    'f"{f"{x:>{w}}"}"', 'f"{f"{d["a"]}"}"', 'f"{a(b(c("x")))}"', 'f"{x:{a(b(c(d)))}}"', 'f"{a("""x""")}"', 'f"{a(b # c\n)}"',
]


@pytest.mark.parametrize("lexeme, tail, terminal", POSITIVE)
def test_fstring_lexeme_ends_where_cpython_ends_it(lexeme, tail, terminal, lexer):
    data = (lexeme + tail).encode()
    end, names = our_lexeme(lexer, data, 0)
    assert (end, terminal in names) == (len(lexeme.encode()), True)


@pytest.mark.parametrize("text", NEGATIVE)
def test_fstring_cpython_refuses_is_no_lexeme(text, lexer):
    end, names = our_lexeme(lexer, text.encode(), 0)
    assert not (end == len(text.encode()) and set(names) & set(FSTRING_TERMINALS))


@pytest.mark.parametrize("text", BEYOND)
def test_fstring_beyond_the_limits_is_refused_not_misread(text, lexer):
    end, names = our_lexeme(lexer, (text + ' + "}"').encode(), 0)
    assert not set(names) & set(FSTRING_TERMINALS)


_TOKENIZE = """\
import io, json, sys, tokenize, warnings
warnings.simplefilter("ignore")
out = []
for src in json.load(sys.stdin):
    try:
        compile(src, "<s>", "eval")
        toks = list(tokenize.generate_tokens(io.StringIO(src).readline))
    except SyntaxError:
        out.append(None)
        continue
    ends = [t.end for t in toks if t.type == tokenize.FSTRING_END]
    starts = [t.start for t in toks if t.type == tokenize.FSTRING_START]
    out.append([starts[0], ends]) if starts else out.append(None)
print(json.dumps(out))
"""


@needs_cpython
def test_snippets_say_what_cpython_says():
    """The expectations above are CPython's: each positive compiles (as an expression) and its
    first f-string ends where the lexeme does; each negative and none of the BEYOND are
    refused."""
    # t-strings (3.14) read as f-strings: asked with their `t` made an `f`
    asked = [lex.replace("t", "f", 1) if "TSTRING" in term else lex for lex, _, term in POSITIVE]
    asked += NEGATIVE + BEYOND
    run = subprocess.run([NEWEST, "-c", _TOKENIZE], input=json.dumps(asked), capture_output=True,
                         text=True, timeout=120, check=True)
    answers = json.loads(run.stdout)
    for (lexeme, _, _), ans in zip(POSITIVE, answers):
        assert ans is not None, lexeme
        lines = lexeme.split("\n")
        row, col = ans[1][-1]
        assert (row, col) == (len(lines), len(lines[-1])), lexeme
    n = len(POSITIVE)
    assert answers[n : n + len(NEGATIVE)] == [None] * len(NEGATIVE)
    assert None not in answers[n + len(NEGATIVE) :]


def _sample(exe: str, n: int) -> list[Path]:
    """`n` stdlib files with an f-string prefix in them (drawn with a fixed seed), and the ones
    with PEP 701 fields."""
    files = [p for p in stdlib_files(exe) if _has_fstring(p)]
    pep701 = [p for p in files if p.name in ("turtle.py", "traceback.py", "dataclasses.py", "test_fstring.py")]
    return sorted(set(random.Random(20).sample(files, min(n, len(files))) + pep701))


def _has_fstring(path: Path) -> bool:
    data = path.read_bytes()
    return any(p + q in data for p in (b"f", b"F", b"rf", b"fr", b"t") for q in (b'"', b"'"))


@needs_cpython
@pytest.mark.parametrize("version", sorted(INTERPRETERS))
def test_stdlib_fstrings_are_lexemes_as_cpython_reads_them(version, lexer):
    exe = INTERPRETERS[version]
    result = compare(lexer, cpython_spans(exe, _sample(exe, 300)))
    assert result["fstrings"] >= 1000
    # what differs must be beyond the limits: refused, never read to another end
    misread = [d for d in result["differ"] if set(d["as"]) & set(FSTRING_TERMINALS)]
    assert not misread, misread[:3]
    assert len(result["differ"]) <= 0.01 * result["fstrings"], result["differ"][:5]



@pytest.mark.parametrize("version", [(3, 11), (3, 12)])
def test_bytes_that_are_not_utf8_are_refused(version, lexer):
    """The literal parts and specs take exactly UTF-8; inside a field the automaton takes any
    byte >= 0x80 and the field checker, lexing the field again with the exact automata, refuses
    what is not UTF-8 (`string_automata._FStringMachine`)."""
    from grammar_tools.parsing.check import check_source
    from grammar_tools.parsing.incremental import PrefixParser
    from grammar_tools.parsing.recognizer import Recognizer

    assert our_lexeme(lexer, b'f"\xff"', 0)[1] == []  # the literal part: the lexer refuses
    assert our_lexeme(lexer, b'f"{x:\xed\xa0\x80}"', 0)[1] == []  # a surrogate in a spec
    assert "FSTRING" in our_lexeme(lexer, 'f"é{x:é}"'.encode(), 0)[1]
    parser = PrefixParser(Recognizer(python_version=version))
    bad = [b'x = f"{\xff}"\n', b"x = f\"{'\xff'}\"\n", b'x = f"""{a # \xff\n}"""\n',
           b"x = f\"{f'\xed\xa0\x80'}\"\n", b'x = f"{\xc3}"\n']
    good = ['x = f"{é}"\n', "x = f\"{'é'}\"\n", "x = f\"{f'é'}\"\n"]
    if version >= (3, 12):
        good.append('x = f"""{a # é\n}"""\n')  # a comment in a field: PEP 701
    for src in bad:
        assert not check_source(src, parser).ok, src
    for src in good:
        assert check_source(src.encode(), parser).ok, src


ESCAPES = [
    r'f"\x4"', r'f"\x41"', r'f"\u12{x}"', r'f"{x}\N{}"', r'rf"\x4"', r'f"\N{BULLET}"',
    r'f"\N{EM DASH}"', r'f"{x:\N{EM DASH}}"', r'f"{x:\x4}"', r'f"\U00110000"', r'f"\U0010FFFF"',
    r'rf"\N{x}"', r'f"\{x}"', r'f"\d"', 'f"a\\\nb"', r'f"\N{x:y}"', r'f"\N"', r'Rf"\u1"',
    r'f"""\x4"""', r'f"{x!r}\x"',
]


@pytest.mark.parametrize("literal", ESCAPES)
def test_escapes_in_literal_parts_as_cpython(literal):
    """The lexer's f-string automaton takes any escape (raw or not is not known in its states);
    the field checker checks them: the whole check agrees with this CPython's compile."""
    import warnings

    from grammar_tools.parsing.check import check_source
    from grammar_tools.parsing.incremental import PrefixParser
    from grammar_tools.parsing.recognizer import Recognizer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            compile(literal, "<s>", "eval")
            expected = True
        except (SyntaxError, ValueError):
            expected = False
    for src in (literal, "t" + literal[1:] if literal[0] == "f" else literal):
        parser = PrefixParser(Recognizer(python_version=(3, 14)))
        assert check_source(f"x = {src}\n".encode(), parser).ok == expected, src
