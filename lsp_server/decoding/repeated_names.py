"""Names CPython refuses to see twice, found in a completion that never ended: a parameter of the
same `def` (`def visit(self, node: Node, node`: "duplicate argument") and a keyword of the same
call or class header (`Session(timeout=1, timeout=`: "keyword argument repeated").

The compiler says so only of a file that parses (`request.past_refusal` searches past what it
refuses in an answer). A small model that loops (`node: nodes.With, node: nodes.With, ...`,
`session_timeout=None,` again and again) writes until its token limit inside the brackets it
opened, nothing of it can be offered, and the search that follows restarted at the completion's
first token, banning the one choice it had right (`nodes.` then `With`). The repeated name is
where the text stopped being Python: the search restarts there (`request.search_again`).

Read with Python's tokenizer from the start of the cursor's line: only brackets opened in the text
read are judged (a call's or a header's opened on an earlier line is one whose other names are not
read, so nothing in it is called a repetition), and only a `def`'s parameter list and a call's or a
class header's arguments (a tuple may hold a name twice). Written by hand: parso and CPython report
these repetitions only for a construct that is complete.
"""

from __future__ import annotations

import io
import keyword
import tokenize
from typing import NamedTuple

_OPENERS = {"(": ")", "[": "]", "{": "}"}
_PARAMETER_BEFORE = ("(", ",", "*", "**")  # what comes before a parameter's name
_ARGUMENT_BEFORE = ("(", ",")  # what comes before a keyword argument's name


def repeated_name_at(head: bytes, written: bytes, start: int) -> int | None:
    """The byte of `written` (read after `head`, the cursor's line before it) where the first name
    at or after its byte `start` repeats a parameter or keyword (`first_repeated_name`); None."""
    text = (head + written).decode("utf-8", "surrogateescape")
    at = first_repeated_name(text, len((head + written[:start]).decode("utf-8", "surrogateescape")))
    return None if at is None else len(text[:at].encode("utf-8", "surrogateescape")) - len(head)


def first_repeated_name(text: str, start: int = 0) -> int | None:
    """The offset in `text` of the first name at or after `start` that repeats a parameter of
    the same `def` header or a keyword argument of the same call or class header (see the module
    docstring); None where there is none (or the tokenizer cannot read the text that far). A
    name counts once something follows what decides it (the name itself, a keyword's `=`): `text`
    may end inside a name that goes on, or on an `=` that becomes `==`."""
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    frames: list[_Bracket] = []  # the brackets open, the innermost last
    last: list[tokenize.TokenInfo] = []  # the significant tokens read, the last three
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
                continue
            if tok.type == tokenize.OP and tok.string in _OPENERS:
                frames.append(_Bracket(_bracket_kind(tok.string, last), set()))
            elif tok.type == tokenize.OP and tok.string in _OPENERS.values():
                if frames:
                    frames.pop()
            elif frames and frames[-1].kind != "other":
                if tok.string == "lambda" or (frames[-1].in_lambda and tok.string == ":"):
                    frames[-1] = frames[-1]._replace(in_lambda=tok.string == "lambda")  # a lambda's parameters are its own
                frame = frames[-1]
                name = None if frame.in_lambda else _named(frame.kind, tok, last)
                # decided once something follows the token (a name may go on, `=` become `==`)
                if name is not None and offsets[tok.end[0] - 1] + tok.end[1] < len(text):
                    at = offsets[name.start[0] - 1] + name.start[1]
                    if name.string in frame.names and at >= start:
                        return at
                    frame.names.add(name.string)
            last = (last + [tok])[-3:]
    except (tokenize.TokenError, SyntaxError, ValueError):  # the text ends inside brackets; a bad indentation
        pass
    return None


class _Bracket(NamedTuple):
    """An open bracket: its kind ("parameters", "arguments" or "other"), the parameters or keywords
    read in it, and whether a lambda's parameters are being read (up to its `:`)."""

    kind: str
    names: set[str]
    in_lambda: bool = False


def _bracket_kind(opener: str, last: list[tokenize.TokenInfo]) -> str:
    """What the bracket opened after the tokens `last` holds: a `def`'s parameters, a call's or a
    class header's arguments, or something else."""
    if opener != "(" or not last:
        return "other"
    before = last[-1]
    if len(last) >= 2 and last[-2].string == "def" and before.type == tokenize.NAME:
        return "parameters"
    if before.type == tokenize.NAME and not keyword.iskeyword(before.string):
        return "arguments"  # a call, or `class Name(`
    if before.string in (")", "]"):
        return "arguments"
    return "other"


def _named(kind: str, tok: tokenize.TokenInfo, last: list[tokenize.TokenInfo]) -> tokenize.TokenInfo | None:
    """The name `tok` completes in a bracket of `kind`: a parameter's (`tok` itself, a name after
    `(`, `,`, `*` or `**`) or a keyword argument's (the name before `tok` when `tok` is its `=`)."""
    if kind == "parameters":
        if tok.type == tokenize.NAME and last and last[-1].string in _PARAMETER_BEFORE:
            return tok
        return None
    if (tok.type == tokenize.OP and tok.string == "=" and len(last) >= 2 and last[-1].type == tokenize.NAME
            and last[-2].string in _ARGUMENT_BEFORE):
        return last[-1]
    return None
