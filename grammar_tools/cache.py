"""The per-user cache directory and content hashes for derived artefacts.

Everything derived from the grammar (parse table, lexer automaton, analyses) and from a
tokenizer (mask stores, converted weights) is cached under one directory, keyed by a hash of
what it was derived from, and stored as JSON or numpy `.npz` (never pickle). What it was
derived from includes the code that made it: `source_hash(module)` hashes the module's source
with that of every project module it imports, directly or not (so no list of modules can fall
behind the code), and `library_versions` names the libraries whose output it keeps.
`SYNTAXLOCK_CACHE` overrides the location (tests use it for an isolated cache).
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np


def cache_dir() -> Path:
    env = os.environ.get("SYNTAXLOCK_CACHE")
    if env:
        base = Path(env)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = (Path(xdg) if xdg else Path.home() / ".cache") / "syntaxlock"
    base.mkdir(parents=True, exist_ok=True)
    return base


def content_hash(*parts: str | bytes, length: int = 16) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\x00")
    return h.hexdigest()[:length]


PROJECT_PACKAGES = ("grammar_tools", "mask_store", "lsp_server")


def read_source(path: Path) -> bytes:
    """A module's source, as the code hashes read it."""
    return path.read_bytes()


def source_hash(*modules: Any) -> str:
    """Hash of the source files of `modules` and of every module of this project that they
    import, directly or not: a cached artefact keyed by it is rebuilt when any code that
    produced it changes (no list of modules to keep up to date by hand)."""
    files = project_closure(*(Path(m.__file__) for m in modules))
    root = _project_root()
    parts: list[str | bytes] = []
    for f in files:
        parts += [f.relative_to(root).as_posix(), read_source(f)]
    return content_hash(*parts)


def library_versions(*names: str) -> str:
    """The installed versions of the libraries whose output an artefact keeps ("lark=1.3.1")."""
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for name in names:
        try:
            out.append(f"{name}={version(name)}")
        except PackageNotFoundError:
            out.append(f"{name}=?")
    return ",".join(out)


def _project_root() -> Path:
    return Path(__file__).resolve().parents[1]


def project_closure(*files: Path) -> list[Path]:
    """`files` and the project modules they import, transitively (read from every import
    statement in them, function bodies included), sorted."""
    root = _project_root()
    seen: set[Path] = set()
    todo = [Path(f).resolve() for f in files]
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        for name in _imported_names(read_source(f), f.parent.relative_to(root).parts):
            path = _module_file(root, name)
            if path is not None and path not in seen:
                todo.append(path)
    return sorted(seen)


_imports_lock = threading.Lock()


@functools.lru_cache(maxsize=1024)
def _imported_names(source: bytes, package: tuple[str, ...]) -> tuple[str, ...]:
    """The absolute names that the import statements of a module of `package` name (for
    `from m import x`, both m and m.x: x may be a module). Memoized on the source itself, in
    the process and on disk (parsing the ~30 modules behind a store takes ~0.3 s; reading the
    answers back, milliseconds)."""
    key = content_hash(source, "/".join(package))
    with _imports_lock:
        memo = _imports_memo()
        if key not in memo:
            memo[key] = list(_parse_imports(source, package))
            write_json(_imports_memo_path(), memo)
        return tuple(memo[key])


def _imports_memo_path() -> Path:
    # keyed by this file: the code that reads the imports
    return cache_dir() / f"imports-{content_hash(Path(__file__).read_bytes())}.json"


def _imports_memo() -> dict:
    path = _imports_memo_path()
    memo = _imports_memos.get(path)
    if memo is None:
        data = read_json(path)
        memo = _imports_memos[path] = data if isinstance(data, dict) else {}
    return memo


_imports_memos: dict[Path, dict] = {}


def _parse_imports(source: bytes, package: tuple[str, ...]) -> tuple[str, ...]:
    import ast

    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = list(package[: len(package) - node.level + 1]) if node.level else []
            mod = base + (node.module.split(".") if node.module else [])
            out += [".".join(mod)] + [".".join(mod + [a.name]) for a in node.names]
    return tuple(out)


def _module_file(root: Path, name: str) -> Path | None:
    parts = name.split(".")
    if not parts or parts[0] not in PROJECT_PACKAGES:
        return None
    base = root.joinpath(*parts)
    for cand in (base.with_suffix(".py"), base / "__init__.py"):
        if cand.is_file():
            return cand.resolve()
    return None


@contextmanager
def written_aside(path: Path) -> Iterator[Path]:
    """A file name beside `path`, this writer's own, renamed onto `path` when the block ends
    (removed if it raises): a reader sees the old file or the whole new one, and two processes
    making the same artefact at once (two servers, two test workers) never write into one file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@contextmanager
def folder_written_aside(path: Path) -> Iterator[Path]:
    """`written_aside` for a folder: an empty folder beside `path`, this writer's own, that
    takes `path`'s place when the block ends. Where another writer finished first, its folder
    is kept and this one removed (both were made from the same inputs)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp"))
    try:
        yield tmp
        try:
            tmp.rename(path)
        except OSError:
            if not path.is_dir():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def one_maker(path: Path) -> Iterator[None]:
    """One process at a time inside the block for the artefact at `path` (an exclusive lock on
    `<path>.lock` beside it): a process that waited here finds what the first one made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    with written_aside(path) as tmp:
        tmp.write_bytes(data)


def write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, json.dumps(obj, separators=(",", ":")).encode())


def read_json(path: Path) -> Any | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def write_npz(path: Path, **arrays: np.ndarray) -> None:
    import io

    buf = io.BytesIO()
    np.savez(buf, **arrays)
    atomic_write_bytes(path, buf.getvalue())


def read_npz(path: Path) -> dict[str, np.ndarray] | None:
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, KeyError):
        return None
