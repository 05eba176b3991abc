"""Which files are the workspace's, and how a prompt names them (the context block's paths).

    root_of(path, roots)                       # the workspace folder holding `path` (None: none)
    inside(path, own_path, roots, project)     # a definition the block may show
    display_name(path, own_path, roots, project)   # "pkg/util.py": relative to the folder

`roots` are the workspace folders the client names; `project` the folder jedi takes as the
document's project where no root holds it (a folder with one of `MARKERS`). The environment's
own files (its prefixes, the stdlib, site-packages, jedi's typeshed) are never the workspace's:
for a document at /x.py jedi's project is "/".
"""

from __future__ import annotations

import os
import sys
import sysconfig

OUTSIDE = ("site-packages", "dist-packages", "typeshed")
MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git", ".hg")  # a folder with one is a project
ENVIRONMENT = tuple(sorted({os.path.normpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                                            sysconfig.get_paths()["stdlib"])}))


def under(path: str, roots) -> bool:
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def root_of(path: str | None, roots: tuple[str, ...]) -> str | None:
    """The workspace folder (of `roots`) holding `path`."""
    if path is None:
        return None
    for r in roots:
        if under(path, (r,)):
            return r
    return None


def inside(path: str, own_path: str | None, roots: tuple[str, ...], project: str | None) -> bool:
    """A definition in the workspace: under a root the client named (else under the document's
    own `project` when that folder has a project marker), not in an environment's packages or
    jedi's typeshed."""
    path = os.path.normpath(path)
    if any(part in OUTSIDE for part in path.split(os.sep)) or under(path, ENVIRONMENT):
        return False
    root = root_of(own_path, roots)
    if root is None and own_path is not None and project is not None:
        if any(os.path.exists(os.path.join(project, m)) for m in MARKERS) and not under(project, ENVIRONMENT):
            root = project
    return root is not None and under(path, (root,))


def display_name(path: str, own_path: str | None, roots: tuple[str, ...], project: str | None) -> str:
    """A path as the prompt names it: relative to the workspace folder holding the document
    (else the one holding `path`, else the document's jedi `project`)."""
    root = root_of(own_path, roots) or root_of(path, roots)
    if root is None and own_path is not None:
        root = project
    return os.path.relpath(path, root) if root and os.path.isabs(path) else os.path.basename(path)
