"""Checked before offered (issue 17): no completion is offered unless the document with it
applied has no new syntax error, the whole rest of the file read; when the model's stop fails,
an earlier stop, then a later one, then nothing (`lsp_server.decoding.model_pass`)."""

from __future__ import annotations

import random


from grammar_tools.parsing.cpython_check import compiles
from grammar_tools.parsing.incremental import PrefixParser
from lsp_server.decoding.engine import CompletionEngine, CompletionRequest
from lsp_server.decoding.model_pass import choose_offer, offered_text
from lsp_server.decoding.stopping.rest_of_file import RestOfFile, LineScanner
from lsp_server.options import EngineOptions

from corpus_support import STDLIB, read_source
from scripted_model import ScriptedRuntime


def complete(compiled, text: str, off: int, intended_after: str, **opts):
    """Complete `text` at offset `off` with a model that wants to write `intended_after` there;
    returns the result and the document with it applied over its range."""
    comp, tok = compiled
    before = text[:off]
    engine = CompletionEngine(EngineOptions(**opts), ScriptedRuntime(tok, (before + intended_after).encode()), comp)
    line = before.count("\n")
    ch = len(before) - (before.rfind("\n") + 1)
    r = engine.complete(CompletionRequest.at(text, line, ch))
    assert r.start == off  # the replace range starts at the cursor
    return r, text[:off] + r.text + text[r.end :]


# ---------------------------------------------------------------- the search, on real checks


def offer(compiled, before: bytes, after: bytes, completion: bytes, cut: int):
    comp, _ = compiled
    parser = PrefixParser(comp.recognizer, comp.lexer)
    scanner = LineScanner(comp.lexer)
    rest = RestOfFile.build(before.decode(), after.decode(), "auto", scanner, b"", b"", 0, parser, before)
    return choose_offer(rest, scanner, b"", completion, 0, cut)


def test_the_models_stop_is_offered_when_it_passes(compiled):
    o = offer(compiled, b"x = ", b"\ny = 2\n", b"f(1)\n", 4)
    assert (o.cut, o.path) == (4, "model") and o.checks == 1


def test_an_earlier_stop_then_a_later_one_then_nothing(compiled):
    o = offer(compiled, b"x = ", b"\ny = 2\n", b"1 + (2", 6)  # `(2` left open
    assert o.path == "earlier-stop" and offered_text(b"1 + (2", o.cut, True) == b"1"
    o = offer(compiled, b"x = ", b"\ny = 2\n", b"(1, 2)\n", 3)  # `(1,` left open; the model closed it later
    assert (o.cut, o.path) == (6, "later-stop")
    o = offer(compiled, b"x = ", b"\ny = 2\n", b"(((", 3)
    assert (o.cut, o.path) == (0, "empty")


# ---------------------------------------------------------------- the failures of issue 17

PARAMS = ("def check(\n    value|\n    strict,\n    limit,\n    *,\n    key=None,\n    default=0,\n"
          ") -> bool:\n    return bool(value)\n\n\nx = check(1, 2, 3)\n")


def test_a_multi_line_parameter_list_is_not_closed_early(compiled):
    """The cursor after a parameter name of a multi-line `def f(` whose parameters go on for
    five more lines; the model closes the list there (`: Any) -> bool:` and a body)."""
    off = PARAMS.index("|")
    text = PARAMS[:off] + PARAMS[off + 1 :]  # (the cut took the comma after `value`)
    for intended in (": Any,\n    strict: bool = False) -> bool:\n    return True\n",
                     ": Any) -> bool:\n    return True\n"):
        for max_tokens in (4, 8, 48):
            r, applied = complete(compiled, text, off, intended, max_tokens=max_tokens)
            assert not r.text or compiles(applied), (intended, max_tokens, r.text)
    r, applied = complete(compiled, text, off, ": Any,\n    strict: bool = False) -> bool:\n")
    assert r.text == ": Any," and compiles(applied)  # the parameter's annotation: valid, offered


def test_a_long_string_is_not_closed_and_reopened(compiled):
    """A cursor at column 0 inside a long triple-quoted string; the model closes it and opens a
    string with the other quote, which would flip every later string of the file."""
    lines = "".join(f"line {i} of the text\n" for i in range(60))
    cut = lines.index("line 10")
    text = "DOC = '''\n" + lines + "'''\n\n\ndef f():\n    return \"\"\"b\"\"\"\n"
    off = len("DOC = '''\n") + cut
    assert compiles(text)
    for intended in ("'''\nTITLE = \"\"\"Title\n", "'''\n\n\ndef g():\n    return '''x\n", "more words\n"):
        for max_tokens in (3, 16):
            r, applied = complete(compiled, text, off, intended, max_tokens=max_tokens)
            assert not r.text or compiles(applied), (intended, max_tokens, r.text)
    r, applied = complete(compiled, text, off, "more words here\nline 10 of the text\n")
    assert r.text.startswith("more words") and compiles(applied)


# ---------------------------------------------------------------- property: early closers

CLOSERS = [")", "]", "}", ")]", '"', "'", '"""', "'''", "):", ")\n", "]\n\n", '"""\n', ")\nx = 1\n", "\n", ":\n"]


def test_models_that_close_brackets_and_strings_early_never_break_a_file(compiled):
    """Random cut points (anywhere, mid-line too) of random stdlib files that compile; the model
    writes a closer (a bracket, a quote, a string's end, a colon) there and then the file's own
    text: whatever is offered, the file with it applied still compiles."""
    rng = random.Random(17)
    files = [p for p in sorted((STDLIB / "json").glob("*.py")) + sorted((STDLIB / "email").glob("*.py"))
             if 2_000 < p.stat().st_size < 16_000]
    offered = 0
    for _ in range(30):
        path = rng.choice(files)
        data = read_source(path)
        assert data is not None
        text = data.decode()
        off = rng.randrange(len(text))
        closer = rng.choice(CLOSERS)
        r, applied = complete(compiled, text, off, closer + text[off:], max_tokens=rng.choice([4, 12, 24]))
        if r.text:
            offered += 1
            assert compiles(applied), (path.name, off, closer, r.text, r.offer_path)
            assert r.offer_path in ("model", "earlier-stop", "later-stop", "redecode")
        else:
            assert r.offer_path == "empty"
    assert offered >= 10  # (not vacuous: most cuts offer something)


def test_a_docstring_written_whole_is_cut_where_the_files_docstring_goes_on(compiled):
    """The cursor where a docstring's first line was cut away (its text and closing quotes go
    on below); the model writes a whole one-line docstring and code. No line end or lexeme
    boundary of that passes, the point before its closing quotes does: the file's docstring
    text closes the string."""
    doc = ('def area(w, h):\n    |\n\n    The width times the height.\n    """\n    return w * h\n\n\n'
           'print(area(2, 3))\n')
    off = doc.index("|")
    text = doc[:off] + doc[off + 1 :]
    r, applied = complete(compiled, text, off, '"""Compute the area."""\n    return w * h\n')
    assert r.text == '"""Compute the area.' and compiles(applied)
    assert r.offer_path in ("earlier-stop", "later-stop")
