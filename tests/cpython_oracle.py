"""CPython's `compile` as the oracle of the grammar tests: this interpreter, and the CPython of
each other supported version where the machine has one (python3.X on PATH or pyenv's); and
what our recognizer says of the same text (`parser_for`, `allows`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from grammar_tools.parsing.incremental import ParseError, PrefixParser
from grammar_tools.lexing.lexer_automaton import LexError
from grammar_tools.parsing.recognizer import Recognizer
from grammar_tools.parsing.versions import SUPPORTED

_COMPILE = """\
import json, sys, warnings
warnings.simplefilter("ignore")
out = []
for src in json.load(sys.stdin):
    try:
        compile(src, "<snippet>", "exec")
        out.append(True)
    except SyntaxError:
        out.append(False)
print(json.dumps(out))
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
    """Whether that version's CPython (`INTERPRETERS`) compiles each source."""
    run = subprocess.run([INTERPRETERS[version], "-c", _COMPILE], input=json.dumps(sources),
                         capture_output=True, text=True, timeout=300, check=True)
    return json.loads(run.stdout)


def compiles(src: str) -> bool:
    """Whether this interpreter compiles `src`."""
    try:
        compile(src, "<snippet>", "exec")
    except SyntaxError:
        return False
    return True


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
