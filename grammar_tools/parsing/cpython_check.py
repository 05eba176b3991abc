"""Does CPython accept this text? The project's one oracle of "valid Python".

Valid means what CPython's own compiler says: `compile(text, name, "exec")` raises no
`SyntaxError` (`IndentationError`, `TabError`) and no `ValueError` (a NUL byte before 3.12).
Never `ast.parse`: it builds the tree and stops before the compiler's checks, so it accepts what
CPython refuses (`return 1` or `await x` at module level, `x = *a`, `break` outside a loop).
Warnings (`SyntaxWarning` for `"\\d"`, `is` with a literal) are not refusals and are silenced; the
caller's `from __future__` imports are not inherited (`dont_inherit`), so the verdict is the one
a file of its own gets.

Used by the tests, the benchmarks and the engine's last check of an answer alike (`compiles`,
`refusal`, `refused_lines`, `compilable_source`; lsp_server/decoding/request.py's compiler gate);
`parsed_tree` is the parser's tree for readers of it (the names' later-lines check). For
another CPython version the file runs as a script under that interpreter (the tests' per-version
plumbing, tests/cpython_oracle.py): a JSON list of sources on stdin, a JSON list of verdicts on
stdout. So it imports nothing of the project and keeps to syntax that Python 3.8 reads.
"""

from __future__ import annotations

import ast
import io
import json
import sys
import tokenize
import warnings
from pathlib import Path
from typing import NamedTuple


class Refused(NamedTuple):
    """Where CPython refuses a text: its message, the first and last lines it names (1-based; 0
    where it names none) and the column it points at on the first (0-based; -1 where it names
    none): the line's UTF-8 bytes for a refusal made after the parse (the compiler's and the
    symbol table's checks), its characters for the parser's."""

    message: str
    line: int
    end_line: int
    column: int = -1


def refused_lines(text: str | bytes, name: str = "<text>", mode: str = "exec",
                  after_parse: bool = False) -> Refused | None:
    """CPython's refusal of `text` (str or bytes) as `mode` ("exec" for a file, "eval" for an
    expression): `Refused`; None where it compiles it. `after_parse`: only a refusal made after the text parsed (the
    compiler's and the symbol table's checks: a keyword argument given twice, `yield from` in an
    `async def`, `break` outside a loop), None where the parser refuses it; the compiler is the
    same one (the parsed tree compiled is the text compiled), it is asked in two steps, and
    only for a text it refuses: a text it compiles in one step (about half the time of the two,
    no tree of Python objects made and read back) has no refusal of either kind."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            if after_parse:
                try:
                    compile(text, name, mode, dont_inherit=True)
                    return None
                except (SyntaxError, ValueError):
                    pass
                tree = parsed_tree(text, name, mode)
                if tree is None:
                    return None
                text = tree
            compile(text, name, mode, dont_inherit=True)
        except SyntaxError as e:
            line = e.lineno or 0
            # end_lineno: 3.10+; offset: 1-based
            return Refused(e.msg, line, max(line, getattr(e, "end_lineno", None) or line), (e.offset or 0) - 1)
        except ValueError as e:  # NUL bytes, before 3.12
            return Refused(str(e), 0, 0)
    return None


# How often a tree is asked for again when its conversion was disturbed (see `parsed_tree`).
TREE_TRIES = 3


def parsed_tree(text: str | bytes, name: str = "<text>", mode: str = "exec") -> ast.AST | None:
    """The tree CPython's parser makes of `text`; None where the parser refuses it, or where no
    tree could be had. CPython 3.11 counts the depth of a tree's conversion to Python objects in
    one counter per interpreter, so a conversion in another thread at the same moment (the
    server's names analysis runs jedi beside the decoding) can end in `SystemError: AST
    constructor recursion depth mismatch`; the tree is asked for again, and where it never comes
    the text gets no after-parse verdict (the grammar has already accepted its parse)."""
    for _ in range(TREE_TRIES):
        try:
            return compile(text, name, mode, ast.PyCF_ONLY_AST, dont_inherit=True)
        except (SyntaxError, ValueError):
            return None
        except SystemError:
            continue
    return None


def refusal(text: str | bytes, name: str = "<text>", mode: str = "exec") -> str | None:
    """CPython's message where it refuses `text` as `mode`: `"invalid syntax (line 3)"` (a NUL
    byte: the message alone); None where it compiles it."""
    refused = refused_lines(text, name, mode)
    if refused is None:
        return None
    return f"{refused.message} (line {refused.line})" if refused.line else refused.message


def compiles(text: str | bytes, name: str = "<text>", mode: str = "exec") -> bool:
    """Whether CPython (this interpreter) compiles `text` (str or bytes) as `mode`."""
    return refusal(text, name, mode) is None


def compilable_source(path: Path) -> bytes | None:
    """The file as UTF-8 bytes (decoded by its coding cookie), or None where it is not a source
    file this CPython compiles (a syntax error, an unknown encoding, bytes that don't decode)."""
    raw = path.read_bytes()
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
        data = raw.decode(encoding).encode()
    except (SyntaxError, UnicodeDecodeError, LookupError):
        return None
    return data if compiles(raw, str(path)) else None


def main() -> None:
    """The verdicts of this interpreter on a JSON list of sources (stdin), as a JSON list."""
    print(json.dumps([compiles(src, "<snippet>") for src in json.load(sys.stdin)]))


if __name__ == "__main__":
    main()
