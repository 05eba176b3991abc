"""The Python version a document targets: the setting, else the nearest project file that says
(`requires-python`'s lower bound, `.python-version`), else 3.14; and the engine completes with
that version's syntax only (a 3.9 target never gets a `match` statement, 3.14 does)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cpython_oracle import INTERPRETERS, compiles, cpython_compiles
from scripted_model import ScriptedRuntime

from grammar_tools.parsing.versions import NEWEST, VersionError
from lsp_server.decoding.engine import CompletionEngine, CompletionRequest
from lsp_server.options import EngineOptions, OptionError
from lsp_server.server.settings import ServerOptions
from lsp_server.decoding.parts import (
    document_path,
    pinned_version,
    project_version,
    requires_python_floor,
    target_version,
)


def _project(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


@pytest.mark.parametrize("spec, floor", [
    (">=3.9", (3, 9)), (">=3.10,<4", (3, 10)), ("~=3.12", (3, 12)), ("==3.11.*", (3, 11)),
    (">3.8", (3, 8)),  # 3.8.1 is allowed
    (">=3.8.2", (3, 8)), (">= 3.13", (3, 13)), ("<4,>=3.11", (3, 11)),
    (">=3.6", (3, 8)),  # below the oldest supported: the oldest
    (">=3.20", (3, 14)),  # past the newest: the newest
    ("!=3.9.*,>=3.9", (3, 10)),
])
def test_requires_python_lower_bound(spec, floor):
    assert requires_python_floor(f'[project]\nname = "p"\nrequires-python = "{spec}"\n') == floor


@pytest.mark.parametrize("text", [
    '[project]\nname = "p"\n',  # no requires-python
    '[project]\nrequires-python = "three"\n',  # not a specifier
    '[project]\nrequires-python = 3.9\n',  # not a string
    "[project\n",  # not TOML
    '[tool.poetry]\npython = ">=3.9"\n',
])
def test_pyproject_that_says_nothing(text):
    assert requires_python_floor(text) is None


@pytest.mark.parametrize("text, version", [
    ("3.12.1\n", (3, 12)), ("3.10", (3, 10)), ("pypy3.9\n", (3, 9)), ("cpython-3.13.0\n", (3, 13)),
    ("# pinned\n3.11\n", (3, 11)), ("system\n3.9\n", (3, 9)), ("3.7.16\n", (3, 8)), ("system\n", None), ("", None),
])
def test_python_version_file(text, version):
    assert pinned_version(text) == version


def test_detection_order(tmp_path: Path):
    """Setting > nearest directory's requires-python > its .python-version > further up > 3.14."""
    _project(tmp_path, {
        "pyproject.toml": '[project]\nrequires-python = ">=3.10"\n',
        ".python-version": "3.12\n",
        "pkg/mod.py": "",
        "pkg/sub/.python-version": "3.9.18\n",
        "pkg/sub/deep/a.py": "",
        "other/pyproject.toml": '[project]\nname = "o"\n',  # says nothing: the search goes on up
        "other/b.py": "",
    })
    # in one directory, requires-python before .python-version
    assert target_version(None, str(tmp_path / "pkg" / "mod.py")) == (3, 10)
    assert project_version(tmp_path / "pkg" / "mod.py") == ((3, 10), tmp_path / "pyproject.toml")
    # the nearest directory wins
    assert target_version(None, str(tmp_path / "pkg" / "sub" / "deep" / "a.py")) == (3, 9)
    assert target_version(None, str(tmp_path / "other" / "b.py")) == (3, 10)
    # file URIs (percent-encoded) as the server gets them
    _project(tmp_path, {"with space/.python-version": "3.11\n"})
    assert target_version(None, (tmp_path / "with space" / "c.py").as_uri()) == (3, 11)
    # the setting wins over the project
    assert target_version("3.13", str(tmp_path / "pkg" / "mod.py")) == (3, 13)
    # no file, or no project file anywhere: the newest
    assert target_version(None, "untitled:Untitled-1") == NEWEST
    assert target_version(None, "d") == NEWEST
    # an edited project file is read again
    (tmp_path / "pkg" / "sub" / ".python-version").write_text("3.14.0\n# now\n")
    assert target_version(None, str(tmp_path / "pkg" / "sub" / "deep" / "a.py")) == (3, 14)
    with pytest.raises(VersionError):
        target_version("3.7", "d")


def test_document_paths():
    assert document_path("file:///home/u/a%20b.py") == Path("/home/u/a b.py")
    assert document_path("/home/u/a.py") == Path("/home/u/a.py")
    assert document_path("untitled:Untitled-1") is None
    assert document_path("relative.py") is None


def test_python_version_setting():
    opts, problems = ServerOptions().merged({"pythonVersion": "3.9"})
    assert opts.engine.python_version == "3.9" and problems == []
    assert ServerOptions().to_json()["pythonVersion"] is None
    again, problems = opts.merged({"pythonVersion": "3.7"})
    assert again.engine.python_version == "3.9" and "3.8..3.14" in problems[0]
    assert opts.merged({"pythonVersion": None})[0].engine.python_version is None
    with pytest.raises(OptionError, match="string"):
        EngineOptions(python_version=3.1).validated()


MATCH_DOC = "def handle(command):\n    "
MATCH_SCRIPT = MATCH_DOC + "match command:\n        case 1:\n            pass\n"


def _complete(compiled_full, doc: str, document: str, **opts):
    comp, tok = compiled_full
    engine = CompletionEngine(EngineOptions(mode="single", **opts), ScriptedRuntime(tok, MATCH_SCRIPT.encode()), comp)
    lines = doc.split("\n")
    return engine.complete(CompletionRequest.at(doc, len(lines) - 1, len(lines[-1]), document=document))


def test_the_target_decides_whether_match_is_completed(compiled_full, tmp_path: Path):
    """A model that wants to write a match statement gets it for 3.14 (and 3.10), never for 3.9:
    there it writes something else that parses as 3.9 code."""
    new = _complete(compiled_full, MATCH_DOC, "d")  # no setting, no file: 3.14
    assert new.python_version == "3.14"
    assert new.text.startswith("match command:"), new.text
    assert _complete(compiled_full, MATCH_DOC, "d", python_version="3.10").text.startswith("match command:")

    old = _complete(compiled_full, MATCH_DOC, "d", python_version="3.9")
    assert old.python_version == "3.9"
    assert not old.text.startswith("match command"), old.text
    # what it wrote is valid code, for CPython 3.9 itself where the machine has one
    written = MATCH_DOC + old.text + "\n"
    assert compiles(written)
    if (3, 9) in INTERPRETERS:
        assert cpython_compiles((3, 9), [written]) == [True]

    # the same from the project's files, without the setting
    _project(tmp_path, {"pyproject.toml": '[project]\nrequires-python = ">=3.9"\n'})
    doc = str(tmp_path / "app.py")
    from_project = _complete(compiled_full, MATCH_DOC, doc)
    assert from_project.python_version == "3.9" and from_project.text == old.text
    assert _complete(compiled_full, MATCH_DOC, (tmp_path / "app.py").as_uri(), python_version="3.14").text == new.text


def test_typing_through_follows_the_project_version(compiled_full, tmp_path: Path):
    """A suggestion made for 3.14 is not served on after the project moved to 3.9."""
    comp, tok = compiled_full
    engine = CompletionEngine(EngineOptions(mode="single"), ScriptedRuntime(tok, MATCH_SCRIPT.encode()), comp)
    _project(tmp_path, {".python-version": "3.14\n"})
    doc = str(tmp_path / "app.py")

    def ask(text: str):
        lines = text.split("\n")
        return engine.complete(CompletionRequest.at(text, len(lines) - 1, len(lines[-1]), document=doc))

    first = ask(MATCH_DOC)
    assert first.text.startswith("match command:")
    assert ask(MATCH_DOC + "ma").typed_through == 2
    (tmp_path / ".python-version").write_text("3.9.1\n")
    later = ask(MATCH_DOC + "ma")
    assert later.typed_through == 0 and later.python_version == "3.9"
    assert not later.text.startswith("tch command"), later.text
