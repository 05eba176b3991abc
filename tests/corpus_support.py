"""The tests' corpus: this interpreter's standard library, its files read as CPython reads them
(`read_source`: the one oracle's `compilable_source`)."""

from __future__ import annotations

import sysconfig
from pathlib import Path

from grammar_tools.parsing.cpython_check import compilable_source as read_source

__all__ = ["ROOT", "STDLIB", "is_test_file", "read_source", "stdlib_files"]

ROOT = Path(__file__).resolve().parents[1]
STDLIB = Path(sysconfig.get_paths()["stdlib"])


def is_test_file(p: Path) -> bool:
    """Whether a stdlib file belongs to a test package (test, tests, idle_test)."""
    parts = p.relative_to(STDLIB).parts
    return any(x in ("test", "tests", "idle_test") for x in parts[:-1])


def stdlib_files(include_tests: bool = True) -> list[Path]:
    """The standard library's .py files, sorted (site-packages and hidden folders left out)."""
    out = []
    for p in sorted(STDLIB.rglob("*.py")):
        rel = p.relative_to(STDLIB).parts
        if rel[0] == "site-packages" or any(part.startswith(".") for part in rel):
            continue
        if not include_tests and is_test_file(p):
            continue
        out.append(p)
    return out
