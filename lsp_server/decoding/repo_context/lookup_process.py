"""The context block's definitions, looked up with jedi in a process of its own
(`jedi_process.JediProcess`: stopped while the server's model runs, at the lowest priority, its
caches bounded after each lookup).

    lookups = DefinitionsProcess(busy=engine_busy)
    found = lookups.find(text, path, line, roots, open_texts, same=(start, header) or None)
    found.scope, found.sections                    # sections None: the scope is `same`
    lookups.close()

What the process does for one lookup (`lookup`): the document's jedi project (the workspace
folder holding it, else the folder jedi finds), the cursor's scope (`definitions.cursor_scope`),
the workspace definitions of the names used there (`definitions.definitions`) and their stubs
(`stubs.stub_of`, the modules read from the open documents' texts, else from disk), one section
per file; then the block's other sections, packed (`sections.block_sections`: the neighbours
ranked there too, off the server's interpreter lock). A lookup that raises, or whose process
dies or runs too long, fails alone (`JediFailed`).
"""

from __future__ import annotations

import os
import sys
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from ..jedi_process import TIMEOUT_S, JediProcess
from .definitions import Scope, Target, cursor_scope, definitions
from .sections import block_sections
from .stubs import stub_of
from .workspace_paths import display_name, inside, root_of

MAX_SOURCE_BYTES = 2_000_000  # a module larger than this is not read for stubs


@dataclass(frozen=True)
class Found:
    scope: Scope
    sections: list[tuple[str, str, str]] | None  # (name, text, kind) of the block's sections; None: the scope is `same`


# ---------------------------------------------------------------------------- the child's side


def lookup(job: dict, projects: dict) -> dict:
    """One lookup (see the module docstring); `projects`: jedi projects by folder, kept (the
    child's state across lookups)."""
    import jedi

    text, roots = job["text"], tuple(job["roots"])
    own_path = job["path"]
    open_texts: dict[str, str] = job["open"]
    lines = text.split("\n")
    line1 = min(max(job["line"], 0), len(lines) - 1) + 1
    project = _project(own_path, roots, projects)
    project_path = str(project.path) if project is not None else None
    script = jedi.Script(text, path=own_path, project=project)
    scope = cursor_scope(script, lines, line1)
    out = {"scope": [scope.start, scope.end, scope.header], "sections": None}
    if job.get("same") == [scope.start, scope.header]:
        return out
    targets = definitions(script, lines, scope, line1, lambda p: inside(p, own_path, roots, project_path), own_path)

    def name(path: str) -> str:
        return display_name(path, own_path, roots, project_path)

    stubs = [(name(p), s) for p, s in stub_sections(targets, open_texts, own_path, text).items()]
    others = [(name(p), t) for p, t in open_texts.items() if p != own_path and t != text]
    others += [(name(p), t) for p, t in job["closed"].items()]
    edited = [(name(p), open_texts[p], ln) for p, ln in job["edited"] if p in open_texts]
    query = "\n".join(lines[scope.start - 1 : scope.end])
    out["sections"] = [list(s) for s in block_sections(stubs, query, text, others, edited, job["limit"])]
    return out


def _project(own_path: str | None, roots: tuple[str, ...], projects: dict):
    """The jedi project of a document: the workspace folder holding it, else the one jedi finds
    from its path (a folder with setup.py, pyproject.toml or .git)."""
    import jedi

    root = root_of(own_path, roots)
    if root is None:
        return None if own_path is None else jedi.get_default_project(os.path.dirname(own_path))
    if root not in projects:
        projects[root] = jedi.Project(root)
    return projects[root]


def stub_sections(targets: list[Target], open_texts: dict[str, str], own_path: str | None,
                  own_text: str) -> OrderedDict[str, str]:
    """The stubs of `targets` by file, in the order of each file's first target; each
    definition once; a module read as a receiver: its members, after the definitions themselves."""
    by_file: OrderedDict[str, list[str]] = OrderedDict()
    seen: set[tuple[str, str]] = set()
    modules: list[Target] = []
    for t in targets:
        if t.kind == "module":
            modules.append(t)
            continue
        source = own_text if t.path == own_path else _source(t.path, open_texts)
        got = stub_of(source, t.line) if source else None
        if got is None or (t.path, got[0]) in seen:
            continue
        seen.add((t.path, got[0]))
        by_file.setdefault(t.path, []).append(got[1])
    for t in modules:
        source = _source(t.path, open_texts)
        listed = frozenset(name for path, name in seen if path == t.path)
        got = stub_of(source, 0, "module", listed) if source else None
        if got is not None and (t.path, "") not in seen:
            seen.add((t.path, ""))
            by_file.setdefault(t.path, []).append(got[1])
    return OrderedDict((p, "".join(stubs)) for p, stubs in by_file.items())


def _source(path: str, open_texts: dict[str, str]) -> str | None:
    if path in open_texts:
        return open_texts[path]
    try:
        if os.path.getsize(path) > MAX_SOURCE_BYTES:
            return None
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


class DefinitionsProcess(JediProcess):
    """The lookups' child process (`jedi_process.JediProcess` running `lookup`)."""

    def __init__(self, busy: Callable[[], bool] = lambda: False, timeout_s: float = TIMEOUT_S) -> None:
        super().__init__(f"{__name__}:lookup", busy, timeout_s)

    def find(self, text: str, path: str | None, line: int, roots: tuple[str, ...], open_texts: dict[str, str],
             same: tuple[int, str] | None = None, closed: dict[str, str] | None = None,
             edited: list[tuple[str, int]] = (), limit: int = sys.maxsize) -> Found:
        """The block's sections for the cursor at 0-based `line` of `text` (the document at
        `path`; `open_texts`: the other open documents' by path, `closed`: recently closed
        ones', `edited`: (path, 0-based line) of the last edits in other documents, the most
        recent first; `limit`: the block's characters); raises JediFailed."""
        answer = self.ask({"text": text, "path": path, "line": line, "roots": list(roots), "open": open_texts,
                           "same": list(same) if same is not None else None, "closed": closed or {},
                           "edited": [list(e) for e in edited], "limit": limit})
        start, end, header = answer["scope"]
        sections = None if answer["sections"] is None else [tuple(s) for s in answer["sections"]]
        return Found(Scope(start, end, header), sections)
