"""The Python version a document targets: what its masks allow (`grammar_tools.parsing.versions`).

    target_version("3.9", "file:///p/a.py")   # (3, 9): the `pythonVersion` setting wins
    target_version(None, "file:///p/a.py")    # from /p/pyproject.toml or /p/.python-version, upward
    target_version(None, "untitled:1")        # (3, 14): no file, the newest

Without the setting, the nearest directory from the document's upward that says it decides: its
`pyproject.toml`'s `requires-python` lower bound (code must parse on the oldest Python the
project supports), else its `.python-version` file (pyenv, uv: the interpreter the project runs
on). A `pyproject.toml` without `requires-python`, or with one that doesn't parse, says nothing
and the search goes on upward. A version outside 3.8-3.14 is brought to the nearest end of it
(`>=3.6` reads as 3.8); nothing found anywhere means the newest.

The files are read again only when their modification time or size changed.
"""

from __future__ import annotations

import logging
import re
import stat
import tomllib
from functools import lru_cache
from pathlib import Path
from urllib.parse import unquote, urlparse

from grammar_tools.parsing.versions import NEWEST, OLDEST, PythonVersion, format_version, parse_version

log = logging.getLogger(__name__)

PYPROJECT = "pyproject.toml"
PYTHON_VERSION_FILE = ".python-version"
_PINNED = re.compile(r"^\s*(?:[A-Za-z]+-?)?(\d+)\.(\d+)")  # "3.12.1", "3.12", "pypy3.10", "cpython-3.13"
_HIGHEST_MINOR = 40  # minors probed when reading a specifier (3.0 .. 3.40)


def target_version(setting: str | None, document: str) -> PythonVersion:
    """The version that `document` (a file URI, a path, or a name of no file) targets: the
    setting when given (`EngineOptions.python_version`, checked when set), else the project's."""
    if setting:
        return parse_version(setting)
    path = document_path(document)
    found = project_version(path) if path is not None else None
    return found[0] if found else NEWEST


def document_path(document: str) -> Path | None:
    """The file of a document key: `file:` URIs and absolute paths; None for anything else
    (`untitled:1`, a test's "d")."""
    if document.startswith("file:"):
        parsed = urlparse(document)
        path = unquote(parsed.path)
        if parsed.netloc and parsed.netloc != "localhost":
            path = f"//{parsed.netloc}{path}"
        return Path(path)
    p = Path(document)
    return p if p.is_absolute() else None


def project_version(path: Path) -> tuple[PythonVersion, Path] | None:
    """The version the project around `path` declares, and the file that says it; None when
    no directory from `path`'s upward has a `requires-python` or a `.python-version`."""
    for directory in path.parents if not path.is_dir() else (path, *path.parents):
        for name, reader in ((PYPROJECT, requires_python_floor), (PYTHON_VERSION_FILE, pinned_version)):
            f = directory / name
            try:
                st = f.stat()
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            version = _read(str(f), st.st_mtime_ns, st.st_size, reader)
            if version is not None:
                return version, f
    return None


@lru_cache(maxsize=256)
def _read(path: str, mtime_ns: int, size: int, reader) -> PythonVersion | None:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    version = reader(text)
    log.info("%s: Python %s", path, "not stated" if version is None else format_version(version))
    return version


def requires_python_floor(pyproject: str) -> PythonVersion | None:
    """The oldest supported version that a `pyproject.toml`'s `requires-python` allows (any
    patch release of it), clamped to 3.8-3.14; None without one, or when it doesn't parse."""
    try:
        spec = tomllib.loads(pyproject).get("project", {}).get("requires-python")
    except (tomllib.TOMLDecodeError, AttributeError):
        return None
    if not isinstance(spec, str):
        return None
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        allowed = SpecifierSet(spec)
    except InvalidSpecifier:
        return None
    for minor in range(_HIGHEST_MINOR + 1):
        # a minor is allowed when one of its releases is: `>3.8` allows 3.8.1
        if any(allowed.contains(f"3.{minor}.{patch}", prereleases=True) for patch in range(0, 30)):
            return _clamped((3, minor))
    return None


def pinned_version(text: str) -> PythonVersion | None:
    """The first version a `.python-version` file names ("3.12.1" -> (3, 12)), clamped to
    3.8-3.14; None when it names none (`system`)."""
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        m = _PINNED.match(line)
        if m and m.group(1) == "3":
            return _clamped((3, int(m.group(2))))
    return None


def _clamped(version: PythonVersion) -> PythonVersion:
    return max(OLDEST, min(NEWEST, version))
