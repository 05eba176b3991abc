"""Names CPython refuses to see twice (lsp_server/decoding/repeated_names.py): a parameter of one
`def`, a keyword of one call or class header, found in text that never ended; a completion that
writes one stops there (`StopReason.REPEATED`) and the search goes on from that name, where a
small model's loop went wrong, not from its first token."""

from __future__ import annotations

import pytest
from completion_support import two_minded

from grammar_tools.parsing.cpython_check import compiles, refusal
from lsp_server.decoding.repeated_names import first_repeated_name
from lsp_server.decoding.stopping.policy import StopReason

LOOP = "    def visit_With(self, node: nodes.With, node: nodes.With, node: nod"


@pytest.mark.parametrize("text, name, whole", [
    (LOOP, "node: nodes.With, node: nod", LOOP[4:] + "e):\n pass\n"),  # a parameter again
    ("def f(a, b=a, *a)", "a)", "def f(a, b=a, *a): pass\n"),  # a default reads a name; `*a` is a parameter
    ("def f(a, *, a)", "a)", "def f(a, *, a): pass\n"),
    ("def f(self, x: t.Dict[str, x], x", None, None),  # ends inside the name: it may go on (`xs`)
    ("def f(self, x: t.Dict[str, x], x ", "x ", "def f(self, x: t.Dict[str, x], x): pass\n"),
    ("with s.Session(\n        timeout=None,\n        timeout=None,\n        ti", "timeout=None,\n        ti",
     "with s.Session(\n        timeout=None,\n        timeout=None,\n): pass\n"),
    ("f(a, a, b=1, c=a, b=2", "b=2", "f(a, a, b=1, c=a, b=2)\n"),  # positional names are no keywords
    ("f(a=1, a=", None, None),  # `=` may still become `==`
    ("f(a=1, a==2, a", None, None),
    ("class A(metaclass=M, metaclass=N", "metaclass=N", "class A(metaclass=M, metaclass=N): pass\n"),
    ("f(key=lambda x=1, y=2: x, x=3, y=4", None, None),  # a lambda's parameters are its own
    ("f(key=lambda: 1, key=2", "key=2", "f(key=lambda: 1, key=2)\n"),
    ("x = (a, a, a", None, None),  # a tuple may hold a name twice
    ("f(g(a=1), a=2, h(a=3", None, None),  # each call its own keywords
    ("    a=1, a=2)\nf(x=1, x=2", "x=2", None),  # a call opened before the text read is not judged
])
def test_the_first_repeated_name(text, name, whole):
    at = first_repeated_name(text)
    assert (None if at is None else text[at:]) == name
    if whole is not None:  # CPython refuses that name once the text is whole
        assert any(w in refusal(whole) for w in ("repeated", "duplicate"))


def test_a_name_before_start_is_no_repetition_of_the_completion():
    assert first_repeated_name("def f(a, a, b", start=len("def f(a, a")) is None
    assert first_repeated_name("def f(a, a, b, b:", start=len("def f(a, a")) == len("def f(a, a, b, ")


def test_a_looping_parameter_list_is_searched_from_the_repeated_name(compiled):
    # the model writes the same parameter again and again (it would reach its token limit with
    # nothing to offer); its next-best choice at the repeated name ends the header
    doc = "class A:\n    def visit(self|\n        pass\n"
    r, text = two_minded(compiled, doc, ",node:int" * 40 + "):", ",node:int,**kw):")
    assert (r.text, r.offer_path) == (",node:int,**kw):", "redecode")
    assert compiles(text)


def test_a_keyword_given_on_the_cursors_line_counts(compiled):
    # `key` repeats the cursor's line: the search goes on from there, not from the second `key`
    # the completion writes, nor from its first token
    r, text = two_minded(compiled, "x = 1\nresult = dict(key=0,|)\n", "other=1," + "key=0," * 40, "other=1,more=2)\n")
    assert (r.text, r.offer_path) == ("other=1,more=2)", "redecode")
    assert compiles(text)


def test_the_stop_says_why(compiled):
    # nothing else to write: the repetition is where the completion ended, and nothing is offered
    r, _ = two_minded(compiled, "x = 1\nresult = dict(key=0,|)\n", "key=0," * 12, "key=0," * 12)
    assert (r.text, r.stop_reason) == ("", StopReason.REPEATED)
