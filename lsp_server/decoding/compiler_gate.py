"""The last check of an answer: CPython's compiler, where the grammar cannot see.

The grammar and the edit check decide every stop and every offer, so an offered answer parses.
CPython's compiler refuses a few files that parse: checks made after the parse, in the compiler
and the symbol table (a keyword argument given twice, `yield from` or `return value` in an
`async def` generator, `nonlocal` of a name no enclosing function has, a `*` target twice). No
grammar holds them (they need names compared across a statement, or the kind of the enclosing
function), so the file with the answer is compiled once, before it is offered (the project's one
oracle, `grammar_tools.parsing.cpython_check`; ~1 ms for 400 lines, ~10 ms for 3,500), and an
answer the compiler refuses *where it was written* is not offered.

Which refusals: only those made after the file parsed (`refused_lines(..., after_parse=True)`).
What the parser refuses is the grammar's business, per target version, and this interpreter may
be older than the version a document targets (a 3.12 f-string is no error there): a file this
interpreter cannot parse is left to the grammar's verdict. Where: the refusal's lines must touch
the lines the answer wrote, or the line after them (a keyword argument the answer repeats from
the line below is reported there), or anywhere when the file *without* the answer compiles:
then the refusal can only be the answer's (a keyword argument it repeats from three lines below
is reported three lines below). Otherwise a refusal elsewhere is the file's own (`return` outside
a function further down) and refuses nothing here.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from grammar_tools.parsing.cpython_check import refused_lines

from .results import CompletionResult
from .stopping.policy import StopReason

log = logging.getLogger(__name__)


def refused_where_written(before: str, answer: str, after: str) -> str | None:
    """CPython's message when it refuses `before + answer + after` on the lines the answer wrote
    or the line after them, or anywhere when `before + after` compiles; None when the file
    compiles or the refusal is the file's own (module docstring)."""
    refused = refused_lines(before + answer + after, "<completion>", after_parse=True)
    if refused is None:
        return None
    message, line, end_line = refused
    first = before.count("\n") + 1
    last = first + answer.count("\n") + 1
    where_written = line <= last and end_line >= first  # the answer's lines or the line after them
    if where_written or refused_lines(before + after, "<document>") is None:
        return f"{message} (line {line})"
    return None


def compiler_checked(result: CompletionResult, before: str, after: str) -> CompletionResult:
    """`result`, or no completion (stop reason `compiler`) when CPython's compiler refuses the
    file with it where it was written (`refused_where_written`)."""
    if not result.text:
        return result
    refusal = refused_where_written(before, result.text, after[result.end - result.start :])
    if refusal is None:
        return result
    log.info("not offered: the compiler refuses %r: %s", result.text[:60], refusal)
    return replace(result, text="", end=result.start, stop_reason=StopReason.COMPILER)
