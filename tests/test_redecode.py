"""Search, don't give up (issue 17): when no cut of the model's text keeps the file valid, the
engine decodes again from the step where validity was lost with the model's next-best tokens
there (`lsp_server.decoding.model_pass`), and only then answers nothing."""

from __future__ import annotations


import pytest

from lsp_server.decoding import header_steering, model_pass
from lsp_server.decoding.engine import CompletionEngine, CompletionRequest
from lsp_server.options import EngineOptions

from completion_support import two_minded as complete
from scripted_model import ScriptedRuntime, choices_runtime
from grammar_tools.parsing.cpython_check import compiles


# the line at the cursor was a block's header: the lines after it are its body, indented deeper
LOOP = ("def total(items):\n    result = 0\n    |\n        result += item\n    return result\n\n\n"
        "print(total([1, 2]))\n")


@pytest.mark.parametrize("speculative", [False, True])
def test_the_next_best_first_token_gives_the_header_the_next_lines_need(compiled, speculative):
    """The model's first choice writes a statement (no cut of it keeps the file valid: the
    deeper lines after it need a block header), its second choice the loop's header: the first
    pass is steered to the headers that fit, so that is offered from the first pass."""
    r, applied = complete(compiled, LOOP, "return result\n    return result\n", "for item in items:\n",
                          speculative=speculative)
    assert (r.text, r.offer_path) == ("for item in items:", "model")
    assert compiles(applied)


def test_without_redecoding_that_answer_is_empty(compiled, monkeypatch):
    """The same request with neither the first pass's steering nor the search's re-decoding
    gets nothing: what the first choice wrote has no valid cut (so the test above needs a
    mechanism); with the search alone, its second pass gives the header."""
    monkeypatch.setattr(header_steering, "needed_headers", lambda rest: ())
    r, _ = complete(compiled, LOOP, "return result\n    return result\n", "for item in items:\n")
    assert (r.text, r.offer_path) == ("for item in items:", "redecode")
    monkeypatch.setattr(model_pass, "TRIES", 0)
    r, _ = complete(compiled, LOOP, "return result\n    return result\n", "for item in items:\n")
    assert (r.text, r.offer_path) == ("", "empty")


def test_empty_when_no_choice_fits(compiled):
    """Both choices write statements the deeper lines can't follow: after the bounded search,
    nothing is offered."""
    r, applied = complete(compiled, LOOP, "return result\n", "result = 1\n")
    assert (r.text, r.offer_path) == ("", "empty")


def test_the_restart_step_is_the_first_past_the_healed_text():
    token_bytes = [b"\n", b"    ", b"\n    ", b"for", b" x"]
    assert model_pass.restart_step([2, 3, 4], token_bytes, healed=5) == 1
    assert model_pass.restart_step([0, 1, 3], token_bytes, healed=5) == 2
    assert model_pass.restart_step([0, 1], token_bytes, healed=5) == 2  # nothing past it: the next step
    assert model_pass.restart_step([3, 4], token_bytes, healed=0) == 0


def test_a_line_the_model_ends_where_it_is_complete_is_not_searched_past(compiled):
    """At the end of a complete line (the request after accepting a suggestion) the model's
    first choice ends the line: its answer is "nothing to add here", which keeps the file
    valid, so no other start (a trailing comment, a `+ ...`) is forced on the line."""
    doc = "def f(x):\n    y = x + 1|\n"
    r, applied = complete(compiled, doc, "\n", "  # add one\n")
    assert (r.text, r.offer_path) == ("", "empty")
    assert compiles(applied)


# ---------------------------------------------------------------- steered by the following lines


def rest_at(compiled, doc: str):
    """The rest of the file at the `|` of `doc`, as a constrained request builds it."""
    from grammar_tools.parsing.incremental import PrefixParser
    from lsp_server.decoding.stopping.rest_of_file import LineScanner
    from lsp_server.decoding.stopping.rest_of_file import RestOfFile

    comp, _ = compiled
    off = doc.index("|")
    before, after = doc[:off], doc[off + 1 :]
    parser = PrefixParser(comp.recognizer, comp.lexer)
    return RestOfFile.build(before, after, "auto", LineScanner(comp.lexer), b"", b"", 0, parser, before.encode())


def test_the_headers_the_following_lines_need(compiled):
    """Which block headers fit at a cut header line is what the whole-file check says of each
    keyword's header alone there: any block opener above a deeper body, a clause after a
    `try` body; nothing where the file is valid without a completion or the line holds code."""
    fits = header_steering.needed_headers(rest_at(compiled, LOOP))
    assert {b"if", b"for", b"while", b"with"} <= set(fits)
    assert not {b"else", b"elif", b"except", b"finally"} & set(fits)
    clause = "def first(words):\n    try:\n        word = words[1]\n    |\n        word = None\n    return word\n"
    fits = header_steering.needed_headers(rest_at(compiled, clause))
    assert {b"except", b"finally"} <= set(fits) and b"if" not in fits
    assert header_steering.needed_headers(rest_at(compiled, "x = 1\n|\ny = 2\n")) == ()
    doc = 'def f(value):\n    |\n    Convert it.\n    """\n    return int(value)\n'  # a docstring's first line cut
    assert header_steering.needed_headers(rest_at(compiled, doc)) == (b'"""',)
    # code before the cursor on its line: no steering
    assert header_steering.needed_headers(rest_at(compiled, LOOP.replace("|", "x = 1|"))) == ()
    assert header_steering.starts_with_keyword(b" for", b"for") and not header_steering.starts_with_keyword(b"format", b"for")
    assert header_steering.starts_with_keyword(b'"""Con', b'"""')


FIVE_MINDS = ["return result\n", "result = 1\n", "total = 0\n", "print(result)\n", "for item in items:\n"]


def five_minded(compiled, **opts):
    comp, tok = compiled
    off = LOOP.index("|")
    text = LOOP[:off] + LOOP[off + 1 :]
    before = text[:off]
    runtime = choices_runtime([ScriptedRuntime(tok, (before + s).encode()) for s in FIVE_MINDS])
    engine = CompletionEngine(EngineOptions(**opts), runtime, comp)
    return engine.complete(CompletionRequest.at(text, 2, 4)), text


def test_the_search_starts_with_a_header_where_the_next_lines_need_one(compiled):
    """The model's first four choices are statements, its fifth the loop's header: more than
    the search's passes would try in the model's order, but the deeper lines need a header, so
    the first pass is steered to one."""
    r, text = five_minded(compiled)
    assert (r.text, r.offer_path) == ("for item in items:", "model")
    off = LOOP.index("|")
    assert compiles(text[:off] + r.text + text[off:])


def test_unsteered_the_same_search_finds_nothing(compiled, monkeypatch):
    monkeypatch.setattr(header_steering, "needed_headers", lambda rest: ())
    r, _ = five_minded(compiled)
    assert (r.text, r.offer_path) == ("", "empty")

