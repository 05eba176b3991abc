"""Completions inside an f-string's replacement field (PEP 701, Python 3.12+): the field's
expression is constrained as code and the completion closes what is open (the subscript, the
inner string, the field, the f-string). The oracle for 3.12 syntax is libcst (the interpreter
here is 3.11) and, where pyenv has one, CPython 3.12 itself."""

from __future__ import annotations

import libcst
import pytest

from completion_support import accept, complete_at_marker
from cpython_oracle import INTERPRETERS, cpython_compiles


def valid_312(text: str) -> bool:
    try:
        libcst.parse_module(text, config=libcst.PartialParserConfig(python_version="3.12"))
    except libcst.ParserSyntaxError:
        return False
    if (3, 12) in INTERPRETERS:  # CPython 3.12's own compiler has the last word where it is here
        return cpython_compiles((3, 12), [text])[0]
    return True


DOC = 'def greet(user):\n    return f"hello {user["na|\n'


def test_completion_closes_subscript_field_and_string(compiled):
    """The issue's case: after `f"{user["na` the completion closes `"]`, `}` and `"`."""
    text, off, result = complete_at_marker(compiled, DOC, 'me"]}!"\n', python_version="3.12")
    assert result.text == 'me"]}!"'
    assert valid_312(accept(text, off, result))


@pytest.mark.parametrize("intended", ['me}!"\n', 'me"}!"\n', 'me"]!"\n'])
def test_completion_never_leaves_the_field_broken(compiled, intended):
    """A model that forgets to close the subscript or the inner string: whatever is offered is
    valid 3.12 code (without the field's expression parsed, the model's text was offered)."""
    text, off, result = complete_at_marker(compiled, DOC, intended, python_version="3.12")
    assert result.text != intended.rstrip("\n")
    assert not result.text or valid_312(accept(text, off, result)), result.text


def test_same_quote_field_is_an_error_before_312(compiled):
    """Before 3.12 the inner `"` ends the f-string: no completion can make the line valid."""
    text, off, result = complete_at_marker(compiled, DOC, 'me"]}!"\n', python_version="3.11")
    assert result.text == ""
