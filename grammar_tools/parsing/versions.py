"""The Python versions a document may target, and the version each construct came in with.

One grammar (and one mask store) serves every target from 3.8 to 3.14: the recognizer of a
version removes from the parse table the shifts into constructs newer than it
(`guards.build_guard_tables`). A construct is named here by the nonterminals whose states only
it reaches, or by terminals only it shifts, so the table below is all there is to say about a
version:

    3.9   parenthesized with-items        `with (a as b, c as d):`
    3.10  match statement (PEP 634)       `match x:` / `case ...:`
    3.11  except* (PEP 654)               `except* E:`
    3.11  star unpacking (PEP 646)        `x[*a]`, `def f(*args: *Ts)`
    3.12  type parameters (PEP 695)       `type X = ...`, `def f[T]()`, `class C[T]:`
    3.13  type parameter defaults (696)   `def f[T = int]()`
    3.14  except without parentheses (758) `except A, B:`
    3.14  template strings (PEP 750)      `t"hello {name}"`, concatenated with template strings only

What changed in 3.8 itself (the walrus, positional-only parameters, `f"{x=}"`) is the floor.
Not modelled: PEP 614 decorators (3.9) and unparenthesized walrus in set displays and indexes
(3.10) are accepted from 3.8 on. Not accepted yet (notes/issue20.md): PEP 701's same quote,
backslashes, comments and line breaks inside f-string and t-string replacement fields (3.12):
they are single lexemes read with the rules of 3.11 at every version (`string_automata`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PythonVersion = tuple[int, int]

OLDEST: PythonVersion = (3, 8)
NEWEST: PythonVersion = (3, 14)
SUPPORTED: tuple[PythonVersion, ...] = tuple((3, minor) for minor in range(OLDEST[1], NEWEST[1] + 1))

_VERSION = re.compile(r"\s*(\d+)\.(\d+)\s*")


class VersionError(ValueError):
    """A Python version that is not one of `SUPPORTED`, or not a version at all."""


def parse_version(text: str) -> PythonVersion:
    """`"3.12"` -> (3, 12). Raises VersionError naming the supported range."""
    m = _VERSION.fullmatch(text or "")
    if m is None:
        raise VersionError(f"{text!r} is not a Python version (expected e.g. {format_version(NEWEST)!r})")
    return checked((int(m.group(1)), int(m.group(2))))


def checked(version) -> PythonVersion:
    """`version` as a tuple, if it is supported; else VersionError."""
    v = tuple(int(x) for x in version)[:2]
    if v not in SUPPORTED:
        raise VersionError(
            f"Python {'.'.join(map(str, v))} is not supported: choose one of "
            f"{format_version(OLDEST)}..{format_version(NEWEST)}"
        )
    return v  # type: ignore[return-value]


def format_version(version: PythonVersion) -> str:
    return f"{version[0]}.{version[1]}"


@dataclass(frozen=True)
class Feature:
    name: str
    since: PythonVersion
    rules: tuple[str, ...] = ()  # nonterminals only this construct reaches
    terminals: tuple[str, ...] = ()  # terminals only this construct shifts


FEATURES: tuple[Feature, ...] = (
    Feature("parenthesized with-items", (3, 9), rules=("with_as_item",)),
    Feature("match statement (PEP 634)", (3, 10), terminals=("MATCH",)),
    Feature("except* (PEP 654)", (3, 11), rules=("except_star_clause",)),
    Feature(
        "star unpacking in subscripts and *args annotations (PEP 646)", (3, 11), rules=("star_slice", "star_annotation")
    ),
    Feature("type parameters and the type statement (PEP 695)", (3, 12), rules=("type_params", "type_alias")),
    Feature("type parameter defaults (PEP 696)", (3, 13), rules=("type_param_default", "type_param_star_default")),
    Feature("except without parentheses (PEP 758)", (3, 14), rules=("except_types",)),
    Feature("template strings (PEP 750)", (3, 14), terminals=("TSTRING", "LONG_TSTRING")),
)


def features_after(version: PythonVersion) -> tuple[Feature, ...]:
    """The constructs that a document targeting `version` may not use."""
    return tuple(f for f in FEATURES if f.since > tuple(version))
