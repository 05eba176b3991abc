"""Never echo the text after the cursor (issue 23): a scripted model that writes what the file
already has after the cursor is stopped where the echo starts, at a point where the file stays
valid; the decision is the stop reason `echo`. A line that repeats the next one where the
completion could not stop before it is kept."""

from __future__ import annotations


import pytest

from lsp_server.decoding.engine import CompletionEngine, CompletionRequest
from lsp_server.decoding.stopping.rest_of_file import following_text
from lsp_server.options import EngineOptions

from scripted_model import ScriptedRuntime
from completion_support import accept, complete_at_marker

from grammar_tools.parsing.cpython_check import compiles

BROKEN = "def broken(x:\n    return x\n\n\ndef g():\n    pass\n\n\n"  # recovery mode for what follows


def test_following_text_reads_the_next_lines_and_the_rest_of_the_line():
    f = following_text("x = 1\n    y = f(", "a, 2)  \n\n    z = 3\n\tw\n", infix=True)
    assert f.line_before == b"    y = f(" and f.line_rest == b"a, 2)"
    assert f.lines == (b"z = 3", b"w")
    assert following_text("", "\n\n  # note\n  z\n", False).lines == (b"# note", b"z")
    assert following_text("x", ")\nz\n", infix=False).line_rest == b""
    gen = b"q\n  z = 3 \n\tw"
    # from the newline after `q`: `z = 3` then (only when the text ends there) `w`
    assert f.line_echoes(gen, 0, [1, 9], at_end=False) == [1]
    assert f.line_echoes(gen, 0, [1, 9], at_end=True) == [1]
    assert f.line_echoes(b"q\n  z = 4\n", 0, [1, 9], at_end=True) == []
    # the cursor's line read whole: `    y = f(` + `...` is not `z = 3`; an unfinished line is no echo yet
    assert following_text("", "\nz = 3\n", False).line_echoes(b"z = 3\n", 0, [5], False) == [0]
    assert following_text("", "\nz = 3\n", False).line_echoes(b"z = 3", 0, [], False) == []
    assert f.rest_echoes(b"b, a, 2)\n", 0, [0, 1, 2, 4, 5]) == [2]


@pytest.mark.parametrize("recovery", [False, True])
def test_a_block_body_that_follows_is_not_written_again(compiled, recovery):
    # at an `else:` line's indentation: the completion writes `else:`; its body is the next line
    doc = ("def f(m):\n    try:\n        m()\n    except OSError as e:\n        if e.errno:\n            raise\n"
           "    |\n        raise e from None\n")
    doc = BROKEN + doc if recovery else doc
    text, off, r = complete_at_marker(compiled, doc, "else:\n        raise e from None\n")
    assert (r.recovery is not None) == recovery
    assert r.mode == "multi" and r.stop_reason == "echo" and r.text == "else:"
    assert compiles(accept(text, off, r)[len(BROKEN) if recovery else 0 :])


def test_the_block_ends_before_the_return_after_the_loop(compiled):
    # the cursor's block is the loop body: the function's `return result` follows it already
    doc = "def total(xs):\n    result = 0\n    for x in xs:\n        |\n    return result\n"
    text, off, r = complete_at_marker(compiled, doc, "result += x\n    return result\n")
    assert r.text == "result += x" and r.stop_reason == "block-end"
    assert compiles(accept(text, off, r))


def test_a_completion_ends_before_the_line_the_file_goes_on_with(compiled):
    # a multi-line statement (a call over three lines), then the function's next line again
    doc = "def f():\n    |\n    return x\n"
    text, off, r = complete_at_marker(compiled, doc, "x = foo(\n        1,\n    )\n    return x\n")
    assert r.stop_reason == "echo" and r.text == "x = foo(\n        1,\n    )"
    assert compiles(accept(text, off, r))


def test_the_closing_line_of_a_call_is_not_written_again(compiled):
    doc = "x = foo(\n    1,\n    |\n)\n"
    text, off, r = complete_at_marker(compiled, doc, "2,\n)\n")
    assert r.text == "2,"
    assert accept(text, off, r) == "x = foo(\n    1,\n    2,\n)\n"


@pytest.mark.parametrize("recovery", [False, True])
def test_the_rest_of_the_line_is_joined_not_repeated(compiled, recovery):
    doc = (BROKEN if recovery else "") + "x = foo(|, 2)\n"
    text, off, r = complete_at_marker(compiled, doc, "a, 2)\n")
    assert (r.recovery is not None) == recovery
    assert r.stop_reason == "echo" and r.text == "a"  # not `a, 2` (foo(a, 2, 2))
    assert accept(text, off, r).endswith("x = foo(a, 2)\n")


def test_a_single_line_completion_that_is_the_next_line_is_not_offered(compiled):
    doc = "import os\n|\nimport sys\n"
    text, off, r = complete_at_marker(compiled, doc, "import sys\n")
    assert r.mode == "single" and r.stop_reason == "echo" and r.text == ""


def test_a_repeated_line_where_the_completion_cannot_stop_before_it_is_kept(compiled):
    # `return a` is also the function's next line, but the `if` needs a body: nothing stops before it
    doc = "def f(a):\n    if a:\n        |\n    return a\n"
    text, off, r = complete_at_marker(compiled, doc, "return a\n")
    assert r.text.strip() == "return a" and r.stop_reason != "echo"
    assert compiles(accept(text, off, r))


def test_a_repeated_line_the_file_does_not_go_on_with_is_kept(compiled):
    # two `pass` in different methods: the file goes on with `def g`, then its `pass`
    doc = "class A:\n    def f(self):\n        |\n\n    def g(self):\n        pass\n"
    text, off, r = complete_at_marker(compiled, doc, "x = 1\n        pass\n\n    def g(self):\n        pass\n")
    assert r.text == "x = 1\n        pass" and r.stop_reason == "block-end"
    assert compiles(accept(text, off, r))


def test_a_multi_line_completion_stops_at_the_blank_line_before_a_new_definition(compiled):
    # seen in VS Code (issue 24): the block stop went through the blank line into a new `def`
    doc = "import math\n\n\ndef circle_area(radius):\n    |"
    text, off, r = complete_at_marker(
        compiled, doc, "return 3.14 * radius ** 2\n\ndef circle_perimeter(radius):\n    return 2 * (radius + 1)\n")
    assert r.mode == "multi" and r.stop_reason == "block-end" and r.text == "return 3.14 * radius ** 2"
    assert compiles(accept(text, off, r))


def test_an_item_equal_to_what_it_replaces_is_not_offered(compiled):
    # the auto-closed `))` after the cursor: `))` over them changes nothing
    text, off, r = complete_at_marker(compiled, "import math\nprint(circle_area(|))\n", "))\n")
    assert r.text == "" and r.stop_reason == "echo" and r.end == r.start
    # nor the rest of a suggestion typed up to its closers (what VS Code showed after accepting a part)
    comp, tok = compiled
    doc = "print(circle_area())\n"
    engine = CompletionEngine(EngineOptions(), ScriptedRuntime(tok, b"print(circle_area(radius))\n"), comp)
    first = engine.complete(CompletionRequest.at(doc, 0, 18))
    assert first.text == "radius))" and first.end == 20  # over the auto-closed "))"
    typed = "print(circle_area(radius))\n"
    r = engine.complete(CompletionRequest.at(typed, 0, 24))
    assert r.text == "" and r.stop_reason == "echo"


def test_a_word_finished_inside_a_multi_line_parameter_list_ends_at_its_line(compiled):
    # the cursor is mid-word inside a `def f(` whose parameters go on below: the text before and
    # after the cursor alone does not parse (`cli: B` then `ctx: int,`), the completed word does;
    # the completion ends at its line's end (not at the token limit, and not with new parameters)
    doc = "def f(\n    cli: B|\n    ctx: int,\n) -> None:\n    pass\n"
    text, off, r = complete_at_marker(compiled, doc, "aseCommand,\n    extra: str,\n    more: int,\n")
    assert r.text == "aseCommand," and r.stop_reason == "line-end"
    assert accept(text, off, r) == "def f(\n    cli: BaseCommand,\n    ctx: int,\n) -> None:\n    pass\n"
