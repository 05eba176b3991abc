"""Where the names used around the cursor are defined in the workspace, found with jedi.

    scope = cursor_scope(script, lines, line)          # the function (or lines) the cursor is in
    found = definitions(script, lines, scope, line, inside, own_path)

The names read in the cursor's scope (the enclosing function, or `MODULE_LINES` lines around the
cursor at a module's top level), the receivers among them (`self.`, `obj.`, `module.`) and the
names on the cursor's line first, are resolved with jedi's `goto` (imports followed: `from .util
import parse_header` leads to util.py's `def`); a receiver is also inferred (`h = parse_header(x)`
then `h.` leads to the class `Header`). What lies in the workspace (`inside`) and outside the
document itself is kept; so is a class of the document whose `self.` is read far from its header
(`OWN_FAR_LINES`: out of the prompt's window). It runs in the lookup process
(`lookup_process.py`), never in the server's.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Callable
from dataclasses import dataclass

MAX_LOOKUPS = 40  # names resolved per scope (~2-20 ms each, warm)
MODULE_LINES = 16  # at a module's top level: this many lines before the cursor and after it are the scope
OWN_FAR_LINES = 60  # a class of the document this far above the cursor is out of a 768-token window
_CHAIN = re.compile(r"(?<![\w.])[^\W\d]\w*(?:[ \t]*\.[ \t]*[^\W\d]\w*)*")
_PART = re.compile(r"[^\W\d]\w*")
_SKIP = frozenset(keyword.kwlist) | frozenset(keyword.softkwlist)


@dataclass(frozen=True)
class Scope:
    start: int  # 1-based first line
    end: int  # 1-based last line
    header: str  # the `def`/`class` line ("" at module level): with `start`, what names the scope


@dataclass(frozen=True)
class Target:
    path: str  # the module's file
    line: int  # 1-based line of the definition's name (0: the module itself)
    kind: str  # "function" | "class" | "statement" | "module"


def cursor_scope(script, lines: list[str], line: int) -> Scope:
    """The innermost function (or class body) holding 1-based `line`, else the MODULE_LINES lines
    around it, on the grid of their multiples (so that it stays while the cursor moves a little)."""
    column = len(lines[line - 1]) if 0 < line <= len(lines) else 0
    try:
        context = script.get_context(line, column)
    except (ValueError, AttributeError):
        context = None
    if context is not None and context.type in ("function", "class"):
        start, end = context.get_definition_start_position(), context.get_definition_end_position()
        if start is not None and end is not None and start[0] <= line:
            return Scope(start[0], max(end[0], line), lines[start[0] - 1].strip())
    grid = (line - 1) // MODULE_LINES * MODULE_LINES
    return Scope(max(1, grid - MODULE_LINES + 1), min(len(lines), grid + 2 * MODULE_LINES), "")


def _uses(lines: list[str], scope: Scope, line: int) -> list[tuple[int, int, bool, str]]:
    """(line, column, is a receiver, chain so far) of each name read in the scope, the cursor's
    line first, each dotted chain once."""
    order = [line] + [n for n in range(scope.start, scope.end + 1) if n != line]
    seen: set[str] = set()
    out = []
    for n in order:
        if not 0 < n <= len(lines):
            continue
        text = lines[n - 1].split("#", 1)[0] if "'" not in lines[n - 1] and '"' not in lines[n - 1] else lines[n - 1]
        for m in _CHAIN.finditer(text):
            chain = ""
            parts = list(_PART.finditer(m.group()))
            for i, p in enumerate(parts):
                chain = f"{chain}.{p.group()}" if chain else p.group()
                if p.group() in _SKIP or chain in seen:
                    continue
                seen.add(chain)
                out.append((n, m.start() + p.start(), i < len(parts) - 1 or text[m.end():].lstrip().startswith("."), chain))
    return out


def definitions(script, lines: list[str], scope: Scope, line: int, inside: Callable[[str], bool], own_path: str | None,
                limit: int = MAX_LOOKUPS) -> list[Target]:
    """The workspace definitions of the names read in `scope` (see the module's docstring), in
    the order of their first use (the cursor's line first), each once."""
    found: dict[Target, None] = {}

    def keep(d, kind: str) -> None:
        path = str(d.module_path) if d.module_path is not None else None
        if path is None or not inside(path):
            return
        if path == own_path and not (kind == "class" and d.line is not None and d.line < line - OWN_FAR_LINES):
            return
        found.setdefault(Target(path, 0 if d.type == "module" else (d.line or 0), kind))

    for n, column, receiver, _ in _uses(lines, scope, line)[:limit]:
        try:
            for d in script.goto(n, column, follow_imports=True):
                keep(d, d.type if d.type in ("function", "class", "module") else "statement")
            if receiver:
                for d in script.infer(n, column):
                    if d.type == "instance":
                        keep(d, "class")
        except Exception:  # jedi on code it can't follow (it raises now and then): that name is left out
            continue
    return list(found)
