"""The compiler's last word on an answer (lsp_server/decoding/request.py, `compiler_gate`): what parses but
CPython refuses where the answer wrote it is not offered; a refusal elsewhere in the file is the
file's own and refuses nothing; a refusal that points at a token the answer wrote is searched
past from that token (`past_refusal`)."""

from __future__ import annotations

from completion_support import complete_at_marker, two_minded

import ast

from grammar_tools.parsing import cpython_check
from grammar_tools.parsing.cpython_check import compiles
from lsp_server.decoding.request import refusal_where_written
from lsp_server.decoding.stopping.policy import StopReason

ASYNC = "async def rows(source):\n    |\n\n\nprint(rows)\n"


def refused_where_written(before: str, answer: str, after: str) -> str | None:
    refusal = refusal_where_written(before, answer, after)
    return None if refusal is None else refusal.text
KWARGS = "result = dict(\n    |\n    key=2,\n)\n"


def test_a_refusal_on_the_answers_lines_or_the_line_after_them_is_found():
    before, after = ASYNC.split("|")
    assert refused_where_written(before, "yield from source", after) is not None
    assert refused_where_written(before, "return 1", after) is None  # compiles
    before, after = KWARGS.split("|")
    assert "repeated" in refused_where_written(before, "key=1,", after)  # reported on the line below
    before, after = "x = 1\n", "\n"
    assert refused_where_written(before, "y = f\"{d[\"key\"]}\"", after) is None  # 3.12 syntax: the parser's, not ours


def test_a_refusal_points_at_the_answers_byte_it_is_made_at():
    before, after = ASYNC.split("|")
    assert refusal_where_written(before, "x = 1; yield from source", after).at == len("x = 1; ")
    before = "rows = dict(\n    é=1,\n    "  # the column CPython gives is in UTF-8 bytes
    assert refusal_where_written(before, "ü=2, é=3)", "\n").at == len("ü=2, ".encode())
    before, after = KWARGS.split("|")
    assert refusal_where_written(before, "key=1,", after).at is None  # reported on the line below, not in the answer


def test_a_refusal_further_down_is_the_answers_when_the_file_without_it_compiles():
    # attrs' _funcs.py after an accept and Enter: the answer repeats a keyword argument given two
    # lines below it, and CPython reports the repetition there
    before = "rv = asdict(\n    v,\n    filter=filter,\n    "
    after = "\n    retain=retain,\n    value_serializer=value_serializer,\n)\n"
    assert compiles(before + after)
    assert "repeated" in refused_where_written(before, "value_serializer=value_serializer,", after)
    assert refused_where_written(before, "dict_factory=dict_factory,", after) is None


def test_a_refusal_elsewhere_is_the_files_own():
    before = "def f():\n    "
    after = "\n\n\nx = 1\nreturn 2\n"  # `return` outside a function, three lines below the answer
    assert not compiles(before + "pass" + after)
    assert refused_where_written(before, "pass", after) is None


def disturbed_conversions(monkeypatch, times: int) -> list[int]:
    """CPython's `compile` where the first `times` conversions of a tree to Python objects fail as
    they do when another thread converts a tree at the same moment (CPython 3.11)."""
    calls = []

    def compile_(source, filename, mode, flags=0, dont_inherit=False):
        if flags & ast.PyCF_ONLY_AST:
            calls.append(flags)
            if len(calls) <= times:
                raise SystemError("AST constructor recursion depth mismatch (before=18, after=323)")
        return compile(source, filename, mode, flags, dont_inherit=dont_inherit)

    monkeypatch.setattr(cpython_check, "compile", compile_, raising=False)
    return calls


def test_a_tree_whose_conversion_another_thread_disturbed_is_asked_for_again(monkeypatch):
    calls = disturbed_conversions(monkeypatch, cpython_check.TREE_TRIES - 1)
    before, after = ASYNC.split("|")
    assert refused_where_written(before, "yield from source", after) is not None
    assert len(calls) == cpython_check.TREE_TRIES


def test_a_tree_that_never_comes_refuses_nothing_and_raises_nothing(monkeypatch):
    disturbed_conversions(monkeypatch, cpython_check.TREE_TRIES)
    before, after = ASYNC.split("|")
    assert refused_where_written(before, "yield from source", after) is None


def test_the_engine_does_not_offer_what_the_compiler_refuses_where_it_was_written(compiled):
    # the repeated keyword is the line below's: nothing in the answer to search past
    text, off, r = complete_at_marker(compiled, KWARGS, "key=1,\n    key=2,\n)\n")
    assert (r.text, r.stop_reason) == ("", StopReason.COMPILER)
    # the refusal points at the answer's `yield`: whatever the search finds instead compiles
    text, off, r = complete_at_marker(compiled, ASYNC, "yield from source\n\n\nprint(rows)\n")
    assert not r.text.startswith("yield from")
    assert compiles(text[:off] + r.text + text[r.end :])


def test_a_refusal_inside_the_answer_is_searched_past_from_the_token_it_points_at(compiled):
    # the model repeats a keyword argument, and its next-best choice at the repeated name is
    # another one: that answer is offered
    r, text = two_minded(compiled, "x = 1\n|\n", "print(x,end=1,end=2)", "print(x,end=1,sep=2)")
    assert (r.text, r.offer_path) == ("print(x,end=1,sep=2)", "redecode")
    assert compiles(text)
    r, text = two_minded(compiled, "async def rows(source):\n    x = 1\n    |\n", "yield from source", "return")
    assert (r.text, r.offer_path) == ("return", "redecode")
    assert compiles(text)


def test_what_compiles_is_offered_as_before(compiled):
    text, off, r = complete_at_marker(compiled, ASYNC, "return [row async for row in source]\n\n\nprint(rows)\n")
    assert r.text == "return [row async for row in source]"
    assert compiles(text[:off] + r.text + text[off:])


def test_a_completions_later_lines_are_judged_on_a_tree_asked_for_again(monkeypatch):
    from lsp_server.decoding.identifiers.later_lines import first_unbound_line

    calls = disturbed_conversions(monkeypatch, cpython_check.TREE_TRIES - 1)
    before = "def f(items):\n    "
    assert first_unbound_line(before, "n = len(items)\n    return n + width\n", "") == 1
    assert len(calls) == cpython_check.TREE_TRIES
