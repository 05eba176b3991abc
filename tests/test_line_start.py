"""Fill in the middle at a line start: with the cursor at or inside the leading whitespace of a
non-blank line, an answer is whole lines above it (the existing line moves down with its own
text and indentation) or nothing; mid-line completions still join the rest of the line."""

from __future__ import annotations

import pytest

from lsp_server.decoding.engine import CompletionEngine, CompletionRequest
from lsp_server.decoding.stopping.rest_of_file import cursor_context
from lsp_server.decoding.stopping.policy import StopReason
from lsp_server.options import EngineOptions

from cpython_oracle import compiles
from completion_support import two_minded
from scripted_model import ScriptedRuntime

LOOP = "def f(items):\n    result = 0\n    for item in items:\n        result += item\n    return result\n"


def complete_at(compiled, doc: str, wants: str):
    """Complete `doc` at its `|` with a scripted model that writes `wants` there; the result and
    the document with the answer applied over its range."""
    comp, tok = compiled
    off = doc.index("|")
    text = doc[:off] + doc[off + 1 :]
    before = text[:off]
    engine = CompletionEngine(EngineOptions(), ScriptedRuntime(tok, (before + wants).encode()), comp)
    line = before.count("\n")
    r = engine.complete(CompletionRequest.at(text, line, len(before) - (before.rfind("\n") + 1)))
    assert r.start == off  # the replace range starts at the cursor
    return r, text[:off] + r.text + text[r.end :]


def kept_intact(applied: str, doc: str) -> bool:
    """Whether every line of `doc` after its cursor's line start stands whole in `applied`,
    in order, after the answer (the cursor's line included, with its indentation)."""
    off = doc.index("|")
    existing = doc[doc.rfind("\n", 0, off) + 1 :].replace("|", "")
    return applied.endswith(existing)


@pytest.mark.parametrize("before, after", [
    ("def f():\n", "    return 1\n"),  # column 0 of an indented line
    ("def f():\n  ", "  return 1\n"),  # inside its indentation
    ("def f():\n    ", "return 1\n"),  # at the end of its indentation
    ("x = f(\n    1,\n", ")\n"),  # a closing bracket that stands on its own line: the line's own, not auto-closed
])
def test_a_line_start_of_existing_code_inserts_lines(before, after):
    ctx = cursor_context(before, after)
    assert ctx.lines and not ctx.infix and ctx.covered == "" and ctx.mode == "single"


def test_mid_line_is_not_a_line_start():
    ctx = cursor_context("def f(a):\n    x = ", "a.strip()\n")
    assert ctx.infix and not ctx.lines


def test_column_0_of_an_indented_line_gets_whole_lines_and_the_line_stays(compiled):
    doc = LOOP.replace("        result += item", "|        result += item")
    r, applied = complete_at(compiled, doc, "        total = item\n        result += item\n    return result\n")
    assert r.text == "        total = item\n"
    assert kept_intact(applied, doc) and compiles(applied)


def test_the_end_of_the_indentation_gets_lines_then_the_indentation_again(compiled):
    doc = LOOP.replace("        result += item", "        |result += item")
    r, applied = complete_at(compiled, doc, "total = item\n        result += item\n    return result\n")
    assert r.text == "total = item\n        "
    assert kept_intact(applied, doc) and compiles(applied)


def test_a_model_that_glues_onto_the_line_gets_a_line_of_its_own_or_nothing(compiled):
    """The model writes `answer = ` and then the existing line (a chained assignment, valid
    Python that rewrites the user's line): the glue is never offered."""
    doc = "def g(x):\n    y = x\n|    result = len(y)\n    return result\n"
    r, applied = complete_at(compiled, doc, "    answer = result = len(y)\n    return result\n")
    assert r.text == "" or (r.text.endswith("\n") and "\n" not in r.text[:-1])
    assert kept_intact(applied, doc) and compiles(applied)


def test_an_answer_that_would_reindent_the_next_line_is_refused(compiled):
    """The model writes eight spaces more before the existing line (it would move into the
    `if` above): no answer re-indents it."""
    doc = "def h(text):\n    if not text:\n        return None\n|    value = int(text)\n    return value\n"
    r, applied = complete_at(compiled, doc, "            value = int(text)\n    return value\n")
    assert r.text == "" or r.text.endswith("\n")
    assert kept_intact(applied, doc) and compiles(applied)


def test_writing_the_existing_line_again_is_an_echo(compiled):
    doc = "def g(x):\n    y = x\n|    return y\n"
    r, applied = complete_at(compiled, doc, "    return y\n")
    assert "return y" not in r.text  # never offered; what the search finds instead keeps the line
    assert kept_intact(applied, doc) and compiles(applied)


def test_a_mid_line_completion_still_joins_the_rest_of_the_line(compiled):
    doc = "def f(a):\n    x = |a.strip()\n    return x\n"
    r, applied = complete_at(compiled, doc, "len(a) + a.strip()\n    return x\n")
    assert r.text.rstrip() == "len(a) +" and r.stop_reason == StopReason.ECHO  # where it began to write the rest
    assert applied == f"def f(a):\n    x = {r.text}a.strip()\n    return x\n" and compiles(applied)


CUT_HEADER = "def check(value):\n|        raise TypeError(value)\n    return value\n"


def test_a_line_whose_header_was_cut_gets_a_header_above_it(compiled):
    """Column 0 of a line whose block header was cut away: the model's first four choices are
    statements (none lets the line stand: it is a block's body), its fifth a header at the
    function's depth. No statement fits there, so the first pass is steered to a header at an
    indentation where one fits: the answer is that header, and the line stays as it was."""
    from scripted_model import choices_runtime

    comp, tok = compiled
    off = CUT_HEADER.index("|")
    text = CUT_HEADER[:off] + CUT_HEADER[off + 1 :]
    before = text[:off]
    minds = ["    value = 1\n", "    print(value)\n", "    return value\n", "    del value\n",
             "    if not value:\n"]
    runtime = choices_runtime([ScriptedRuntime(tok, (before + m).encode()) for m in minds])
    r = CompletionEngine(EngineOptions(), runtime, comp).complete(CompletionRequest.at(text, 1, 0))
    applied = text[:off] + r.text + text[off:]
    assert r.text == "    if not value:\n" and r.offer_path == "model"  # the first pass is steered to a header
    assert kept_intact(applied, CUT_HEADER) and compiles(applied)


# ---------------------------------------------------------------- the suffix steers from the first token


def shape_at(compiled, doc: str):
    """What the rest of the file lets the first line be at the `|` of `doc`."""
    from grammar_tools.parsing.incremental import PrefixParser
    from lsp_server.decoding.header_steering import first_line
    from lsp_server.decoding.stopping.rest_of_file import LineScanner
    from lsp_server.decoding.stopping.rest_of_file import RestOfFile

    comp, _ = compiled
    off = doc.index("|")
    before, after = doc[:off], doc[off + 1 :]
    parser = PrefixParser(comp.recognizer, comp.lexer)
    st = parser.parse(before.encode())  # the open lexeme at the cursor and its bracket depth, as a request has them
    rest = RestOfFile.build(before, after, "auto", LineScanner(comp.lexer), before.encode()[st.lexeme_start :], b"",
                            st.configs[0].depth, parser, before.encode())
    return first_line(rest, before)


CUT_TRY = "def f():\n|    except ValueError:\n        pass\n"


def test_the_first_line_is_shaped_by_what_the_rest_of_the_file_requires(compiled):
    from lsp_server.decoding.header_steering import Fit
    from lsp_server.decoding.stopping.rest_of_file import Start

    # column 0 of a loop's body: a statement fits at the body's indentation only
    shape = shape_at(compiled, LOOP.replace("        result += item", "|        result += item"))
    assert (shape.fit, shape.widths, shape.keywords) == (Fit.SHAPED, (8,), ())
    # column 0 of the line after a loop's body: the body's and the function's indentations (a dedent)
    shape = shape_at(compiled, LOOP.replace("    return result", "|    return result"))
    assert (shape.fit, shape.widths, shape.keywords) == (Fit.SHAPED, (4, 8), ())
    # a body whose header was cut: no statement fits, headers at the function's depth do
    shape = shape_at(compiled, CUT_HEADER)
    assert shape.fit is Fit.SHAPED and shape.widths == (4,) and {b"if", b"for", b"while"} <= set(shape.keywords)
    assert b"else" not in shape.keywords
    # at the end of that body line's indentation nothing fits on the cursor's line (a header would
    # stand at the body's column): the answer ends that line first, its header at the function's depth below
    shape = shape_at(compiled, CUT_HEADER.replace("|        raise", "        |raise"))
    assert (shape.fit, shape.start, shape.widths) == (Fit.SHAPED, Start.NEXT_LINE, (4,))
    assert {b"if", b"for", b"while"} <= set(shape.keywords) and b"else" not in shape.keywords
    # where the cursor's line does hold what fits, it is not ended first
    assert shape_at(compiled, LOOP.replace("    return result", "    |return result")).start is Start.CURSOR_LINE
    # an `except` whose `try` was cut: no one line fits above it, at its column or below a line ended first
    assert shape_at(compiled, CUT_TRY).fit is Fit.NOTHING
    assert shape_at(compiled, CUT_TRY.replace("|    except", "    |except")).fit is Fit.NOTHING
    # inside brackets the grammar already asks for an expression; mid-line the model's own tokens
    assert shape_at(compiled, "x = f(\n    1,\n|    2,\n)\n").fit is Fit.FREE
    assert shape_at(compiled, "def f(a):\n    x = |a.strip()\n    return x\n").fit is Fit.FREE


def test_where_nothing_fits_the_model_is_not_asked(compiled):
    doc = CUT_TRY.replace("|    except", "    |except")
    r, applied = complete_at(compiled, doc, "try:\n        pass\n    except ValueError:\n        pass\n")
    assert (r.text, r.stop_reason, r.figures.tokens_generated) == ("", StopReason.NO_CONTINUATION, 0)


def test_at_the_end_of_a_body_lines_indentation_the_header_goes_on_a_line_below(compiled):
    """The cursor at the end of the indentation of a body whose header was cut: the model's
    first choice writes the header there, on the body's column (where nothing fits), its second
    ends the cursor's line first and writes the header at the function's depth. The first pass
    is steered to the newline and that depth: the answer is the header on a line of its own
    (the cursor's indentation stays as a blank line), and the body stays as it was."""
    doc = CUT_HEADER.replace("|        raise", "        |raise")
    r, applied = two_minded(compiled, doc, "if value:\n        raise TypeError(value)\n",
                            "\n    if not value:\n        raise TypeError(value)\n")
    assert (r.text, r.offer_path) == ("\n    if not value:\n        ", "model")
    assert applied == "def check(value):\n        \n    if not value:\n        raise TypeError(value)\n    return value\n"
    assert kept_intact(applied, doc) and compiles(applied)


def test_the_first_pass_writes_its_line_at_an_indentation_that_fits(compiled):
    """The model's first choice writes its line at the function's depth inside the loop (the
    existing line would become an unexpected indent), its second at the loop body's: the first
    tokens are steered to the body's indentation, so the first pass gives the second."""
    doc = LOOP.replace("        result += item", "|        result += item")
    r, applied = two_minded(compiled, doc, "    total = item\n", "        total = item\n")
    assert (r.text, r.offer_path) == ("        total = item\n", "model")
    assert kept_intact(applied, doc) and compiles(applied)


def test_an_echo_of_the_existing_line_is_searched_past(compiled):
    """At a line start the model writes the existing line again first (an echo, which is not an
    answer there), then a line of its own as its second choice: the search restarts at the
    first code, after the indentation it wrote."""
    r, _ = two_minded(compiled, "def g(x):\n    y = x\n|    return y\n", "    return y\n", "    print(y)\n")
    assert (r.text, r.offer_path) == ("    print(y)\n", "redecode")


NESTED = "def f(stop, items):\n    for item in items:\n        item.process()\n|            item.skip()\n    return items\n"


def test_a_cut_header_is_written_one_level_above_its_body(compiled):
    """Column 0 of a body whose header was cut, inside a loop: a header fits at the loop body's
    depth (where it stood) and at the function's (which would also end the loop's body there).
    The header goes one level above the body: the model's first choice, the shallower header, is
    steered to the body's level, where its second choice stands."""
    from lsp_server.decoding.header_steering import Fit

    shape = shape_at(compiled, NESTED)
    assert (shape.fit, shape.widths) == (Fit.SHAPED, (8,)) and b"if" in shape.keywords
    r, applied = two_minded(compiled, NESTED, "    for option in stop:\n", "        if stop:\n")
    assert (r.text, r.offer_path) == ("        if stop:\n", "model")
    assert kept_intact(applied, NESTED) and compiles(applied)
