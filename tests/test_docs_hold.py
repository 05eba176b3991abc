"""The docs hold: every name of code that docs/architecture.md cites in backticks exists.

A cited name is a dotted name (`module.function`, `Class.method`, `package.module.Class`, a
suffix of the module's path: `team.wire.TeamArgs`), a call (`next_token_mask()`,
`accept_token(id) -> bool`: the name before the parenthesis), or a single name in the shape
of code (`CamelCase`, `snake_case`). Each is looked up in the source of the three packages, read
with ast (nothing is imported): the modules, their top-level definitions and assignments, and
each class's methods, attributes and fields (its project base classes' too), and the names the
code imports from libraries (lsprotocol's `InlineCompletionItem`); names of the C kernels are
looked up in their source. Plain words (`mask`, `prefill`), paths and commands are
prose: not checked. `NOT_CODE` lists the few backticked dotted names that are not code.
"""

from __future__ import annotations

import ast
import builtins
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("grammar_tools", "mask_store", "lsp_server")
ARCHITECTURE = ROOT / "docs" / "architecture.md"
NOT_CODE = {"syntaxlock.accepted"}  # the editor command an item carries (server/suggester.py)

_SPAN = re.compile(r"`([^`\n]+)`")
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
_CALL = re.compile(r"([A-Za-z_][\w.]*)\(")
_NAME = re.compile(r"[A-Za-z_]\w*")


class _Code:
    """What the packages define: modules, top-level names per module, members per class name."""

    def __init__(self) -> None:
        self.modules: dict[str, set[str]] = {}  # dotted module -> its top-level names
        self.classes: dict[str, list[tuple[set[str], list[str]]]] = {}  # name -> [(members, bases)]
        self.names: set[str] = set(dir(builtins))  # every name defined anywhere
        for pkg in PACKAGES:
            for path in sorted((ROOT / pkg).rglob("*.py")):
                parts = list(path.relative_to(ROOT).with_suffix("").parts)
                if parts[-1] == "__init__":
                    parts.pop()
                self._read(".".join(parts), ast.parse(path.read_text(), str(path)))
            for path in (ROOT / pkg).rglob("*.[ch]"):
                self.names.update(re.findall(r"^\w[\w\s\*]*?\b(\w+)\s*\(", path.read_text(), re.M))
        for name in list(self.modules):  # a package's modules are names in it
            pkg, _, last = name.rpartition(".")
            self.names.add(last)
            if pkg in self.modules:
                self.modules[pkg].add(last)

    def _read(self, module: str, tree: ast.Module) -> None:
        top = self.modules.setdefault(module, set())
        for node in tree.body:
            top.update(_defined(node))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.names.add(node.name)
            elif isinstance(node, ast.ClassDef):
                members = set()
                for item in node.body:
                    members.update(_defined(item))
                for item in ast.walk(node):  # attributes set on self in its methods
                    if (isinstance(item, ast.Attribute) and isinstance(item.ctx, ast.Store)
                            and isinstance(item.value, ast.Name) and item.value.id == "self"):
                        members.add(item.attr)
                bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
                self.classes.setdefault(node.name, []).append((members, bases))
                self.names.add(node.name)
                self.names.update(members)
        self.names.update(top)
        # the names the code takes from libraries: imported (`from lsprotocol import types`) or
        # read off an imported library (`types.InlineCompletionItem`)
        libraries = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module.split(".")[0] not in PACKAGES:
                libraries.update(a.asname or a.name for a in node.names)
            elif isinstance(node, ast.Import):
                libraries.update(a.asname or a.name for a in node.names if a.name.split(".")[0] not in PACKAGES)
        self.names |= libraries
        self.names.update(node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
                          and isinstance(node.value, ast.Name) and node.value.id in libraries)

    def members(self, cls: str, seen: frozenset = frozenset()) -> set[str]:
        out: set[str] = set()
        for members, bases in self.classes.get(cls, []):
            out |= members
            for b in bases:
                if b not in seen:
                    out |= self.members(b, seen | {cls})
        return out

    def exists(self, dotted: str) -> bool:
        """Whether `dotted` names a module, a module's name, a class's member or a module's
        class's member (modules by any suffix of their path)."""
        parts = dotted.split(".")
        if len(parts) == 1:
            return parts[0] in self.names
        for i in range(len(parts), 0, -1):
            head, rest = ".".join(parts[:i]), parts[i:]
            for module, names in self.modules.items():
                if module == head or module.endswith("." + head):
                    if not rest or (rest[0] in names and (len(rest) == 1 or (
                            len(rest) == 2 and rest[1] in self.members(rest[0])))):
                        return True
        return len(parts) == 2 and parts[0] in self.classes and parts[1] in self.members(parts[0])


def _defined(node: ast.stmt) -> set[str]:
    """The names a statement defines at its level (defs, classes, assignments, annotations,
    imports are not definitions)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
        node, (ast.AnnAssign, ast.AugAssign)) else []
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


@cache
def _code() -> _Code:
    return _Code()


def cited_names(text: str) -> list[str]:
    """The names of code cited in backticks in `text` (module docstring), in order."""
    out = []
    for span in _SPAN.findall(text):
        span = span.strip()
        if "/" in span or span.startswith(("$", "~", "-")) or span.endswith((".py", ".md")):
            continue  # a path, a variable, an option
        call = _CALL.match(span)
        if call:
            out.append(call.group(1))
        elif _DOTTED.fullmatch(span):
            out.append(span)
        elif _NAME.fullmatch(span) and ("_" in span.strip("_") or span[0].isupper() or span.startswith("_")):
            out.append(span)
    return [n for n in out if n not in NOT_CODE]


def missing(text: str) -> list[str]:
    code = _code()
    return [n for n in cited_names(text) if not code.exists(n)]


def test_architecture_cites_only_code_that_exists():
    names = cited_names(ARCHITECTURE.read_text())
    assert len(names) > 40  # the page cites the request's path module by module
    assert not missing(ARCHITECTURE.read_text()), "docs/architecture.md cites names the code does not define"


def test_the_check_finds_a_made_up_name():
    """The check is not empty: removed or made-up names are found, real ones in every form pass."""
    text = ("`GrammarMatcher.forced_tokens()` `GrammarMatcher.from_prefix(...)` `team.wire.TeamArgs` "
            "`mask_store.matcher` `Recognizer.can_end` `StopReason.COMPILER` `no_such_function()` "
            "`made_up.module` `CompletionResult` `NoSuchClass` `decoder_layers` `mask` `store.py`")
    assert cited_names(text) == ["GrammarMatcher.forced_tokens", "GrammarMatcher.from_prefix", "team.wire.TeamArgs",
                                 "mask_store.matcher", "Recognizer.can_end", "StopReason.COMPILER",
                                 "no_such_function", "made_up.module", "CompletionResult", "NoSuchClass",
                                 "decoder_layers"]
    assert missing(text) == ["GrammarMatcher.forced_tokens", "no_such_function", "made_up.module", "NoSuchClass"]
