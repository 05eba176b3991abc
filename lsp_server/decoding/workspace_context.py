"""The other open documents of the workspace, as context for a model that reads other files.

Models trained on whole repositories (Qwen2.5-Coder: `<|repo_name|>` and `<|file_sep|>`) see
the other files before the one they complete; `decoding.prompt.build_prompt` puts those that fit
its budget in front of the fill-in-the-middle prompt. The server hands them over as a
`WorkspaceContext`: the document's own path and the others' paths and texts, named relative to
the directory they share (as a repository would name them) and in the order of their names, so
that the prompt's start (and the KV cache made for it) stays the same while they don't change.
It also carries the document's context block when the server has one ready (`repo_context`:
made ahead of the request, read as it is; docs/context.md).
"""

from __future__ import annotations

import os.path
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

if TYPE_CHECKING:
    from .repo_context.block import ContextBlock

MAX_CONTEXT_FILES = 16  # documents considered (the prompt's budget takes those that fit)


@dataclass(frozen=True)
class ContextFile:
    name: str  # its path as the prompt names it
    text: str


@dataclass(frozen=True)
class WorkspaceContext:
    path: str = ""  # the completed document's path as the prompt names it
    others: tuple[ContextFile, ...] = ()
    repo: str = ""  # the repository's (workspace folder's) name, when known
    block: ContextBlock | None = None  # the document's context block (repo_context), when one is made


NO_CONTEXT = WorkspaceContext()


def _path_of(uri: str) -> str:
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme in ("file", "") else uri


def workspace_context(uri: str, documents: Iterable[tuple[str, str]]) -> WorkspaceContext:
    """The context of document `uri` among open `documents` ((uri, text) pairs; `uri` itself
    and empty texts left out): paths relative to the directory they all share, the others
    sorted by name (the first MAX_CONTEXT_FILES)."""
    others = [(u, t) for u, t in documents if u != uri and t.strip()]
    paths = [_path_of(uri)] + [_path_of(u) for u, _ in others]
    try:
        base = os.path.dirname(paths[0]) if len(paths) == 1 else os.path.commonpath(paths)
    except ValueError:  # absolute and relative paths (untitled documents) mixed: names only
        base = ""
    if base and base == paths[0]:  # uri is the only path: keep its name
        base = os.path.dirname(base)

    def named(p: str) -> str:
        return os.path.relpath(p, base) if base and os.path.isabs(p) else os.path.basename(p) or p

    files = sorted((ContextFile(named(_path_of(u)), t) for u, t in others), key=lambda f: f.name)
    repo = os.path.basename(base.rstrip("/")) if base else ""
    return WorkspaceContext(named(paths[0]), tuple(files[:MAX_CONTEXT_FILES]), repo)
