"""The per-user cache directory and content hashes for derived artefacts.

Everything derived from the grammar (parse table, lexer automaton, analyses) and from a
tokenizer (mask stores, converted weights) is cached under one directory, keyed by a hash of
what it was derived from, and stored as JSON or numpy `.npz` (never pickle).
`SYNTAXLOCK_CACHE` overrides the location (tests use it for an isolated cache).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
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


def source_hash(*modules: Any) -> str:
    """Hash of the source files of `modules`: a cached artefact is rebuilt when its code changes."""
    texts = [Path(m.__file__).read_bytes() for m in modules]
    return content_hash(*texts)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


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
