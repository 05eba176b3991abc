"""The README's Layout section matches the tree: every folder and module it lists exists, and every
package and module of `grammar_tools/`, `mask_store/` and `lsp_server/` is listed.

The section's form (README.md, "## Layout"): a bulleted list; each bullet starts with a folder
in backticks, written from the repository root (`lsp_server/decoding/stopping/`), and names the
files of that folder in backticks as the folder sees them (`policy.py`, `grammars/python.lark`).
Other backticked words (`CompiledGrammar`) are not paths."""

from __future__ import annotations

import re

from corpus_support import ROOT

PACKAGES = ("grammar_tools", "mask_store", "lsp_server")
FILE = re.compile(r"[\w./-]+\.(?:py|c|lark)")


def layout_section(readme: str) -> str:
    start = readme.index("\n## Layout\n")
    end = readme.find("\n## ", start + 1)
    return readme[start : end if end >= 0 else len(readme)]


def bullets(section: str) -> list[str]:
    """The list's items, each with its continuation lines."""
    items: list[str] = []
    for line in section.splitlines():
        if re.match(r"\s*- ", line):
            items.append(line)
        elif items and line.strip():
            items[-1] += " " + line.strip()
    return items


def listed(section: str) -> tuple[set[str], set[str]]:
    """The folders and the files the section lists, as paths from the repository root."""
    folders: set[str] = set()
    files: set[str] = set()
    for item in bullets(section):
        names = re.findall(r"`([^`]+)`", item)
        if not names or not names[0].endswith("/"):
            continue
        folder = names[0]
        folders.add(folder.rstrip("/"))
        files |= {folder + name for name in names[1:] if FILE.fullmatch(name)}
    return folders, files


def in_tree() -> tuple[set[str], set[str]]:
    """The packages (folders with an __init__.py) and modules of the three packages."""
    packages: set[str] = set()
    modules: set[str] = set()
    for top in PACKAGES:
        for path in (ROOT / top).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            if path.name == "__init__.py":
                packages.add(path.parent.relative_to(ROOT).as_posix())
            else:
                modules.add(rel)
    return packages, modules


def test_the_layout_section_is_read_as_paths():
    folders, files = listed(layout_section((ROOT / "README.md").read_text(encoding="utf-8")))
    assert {"grammar_tools", "mask_store", "lsp_server"} <= folders
    assert "grammar_tools/grammars/python.lark" in files
    assert all("/" in f for f in files)


def test_everything_the_readme_lists_exists():
    folders, files = listed(layout_section((ROOT / "README.md").read_text(encoding="utf-8")))
    stale = sorted(p for p in folders | files if not (ROOT / p).exists())
    assert not stale, "README.md's Layout lists what is not in the tree: " + ", ".join(stale)


def test_every_package_and_module_is_listed():
    folders, files = listed(layout_section((ROOT / "README.md").read_text(encoding="utf-8")))
    packages, modules = in_tree()
    missing = sorted((packages - folders) | (modules - files))
    assert not missing, (
        "README.md's Layout does not list: " + ", ".join(missing)
        + " (a package as a bullet of its own, `pkg/sub/`; a module by its name in its folder's bullet)"
    )
