"""The tests' plumbing around the one CPython oracle (grammar_tools/parsing/cpython_check.py): the
CPython of each other supported version where the machine has one (python3.X on PATH or
pyenv's), asked through the same oracle run as a script under it (`cpython_compiles`,
`ORACLE_PRELUDE` for scripts of their own); and what our recognizer says of the same text
(`parser_for`, `allows`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from grammar_tools.parsing import cpython_check
from grammar_tools.parsing.cpython_check import compiles
from grammar_tools.parsing.incremental import ParseError, PrefixParser
from grammar_tools.lexing.lexer_automaton import LexError
from grammar_tools.parsing.recognizer import Recognizer
from grammar_tools.parsing.versions import SUPPORTED

__all__ = ["INTERPRETERS", "ORACLE_PRELUDE", "allows", "compiles", "cpython_compiles", "parser_for"]

# The first lines of a script run by another interpreter: they load the oracle from its file
# (it imports nothing of the project), so that the script's `compiles` is the same function.
ORACLE_PRELUDE = f"""\
import importlib.util as _util
_spec = _util.spec_from_file_location("cpython_check", {cpython_check.__file__!r})
_oracle = _util.module_from_spec(_spec)
_spec.loader.exec_module(_oracle)
compiles = _oracle.compiles
"""


def _interpreters() -> dict[tuple[int, int], str]:
    """The CPython interpreter found for each supported version (3.11 is this one)."""
    found: dict[tuple[int, int], str] = {}
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for v in SUPPORTED:
        candidates = [shutil.which(f"python{v[0]}.{v[1]}")]
        candidates += sorted(str(p / "bin" / "python") for p in pyenv.glob(f"{v[0]}.{v[1]}.*"))
        for exe in filter(None, candidates):
            try:
                out = subprocess.run([exe, "-c", "import sys; print(*sys.version_info[:2])"],
                                     capture_output=True, text=True, timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                continue
            if out.returncode == 0 and tuple(map(int, out.stdout.split())) == v:
                found[v] = exe
                break
    return found


INTERPRETERS = _interpreters()


def cpython_compiles(version: tuple[int, int], sources: list[str]) -> list[bool]:
    """Whether that version's CPython (`INTERPRETERS`; this one for its own version) compiles
    each source, by the oracle run as a script under it."""
    if version == sys.version_info[:2]:
        return [compiles(src, "<snippet>") for src in sources]
    run = subprocess.run([INTERPRETERS[version], cpython_check.__file__], input=json.dumps(sources),
                         capture_output=True, text=True, timeout=300, check=True)
    return json.loads(run.stdout)


_PARSERS: dict = {}


def parser_for(version) -> PrefixParser:
    """One prefix parser per target version, shared by a test module's cases."""
    if version not in _PARSERS:
        _PARSERS[version] = PrefixParser(Recognizer(python_version=version))
    return _PARSERS[version]


def allows(version, prefix: str, terminal: str) -> bool:
    """Whether the recognizer for `version` lets `terminal` come after `prefix` (which it must
    accept, and whose last lexeme must be complete: a name is followed by a space)."""
    parser = parser_for(version)
    try:
        st = parser.parse(prefix.encode())
    except (ParseError, LexError) as e:  # a broken prefix fails the test
        raise AssertionError(f"{prefix!r} refused: {e}") from None
    rec = parser.recognizer
    t = rec.grammar.term_id[terminal]
    return any(rec.feed(node, t) is not None for node in st.configs)
