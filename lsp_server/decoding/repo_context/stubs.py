"""Compact stubs of definitions: what a reader of a call needs, not the body.

    stub_of(source, line)   # the stub of the definition that starts (its name) on 1-based `line`

A function: its signature and the first line of its docstring. A class: its header, the first
docstring line, its class-level attributes, the attributes its methods set on `self` (one
comment line), and its public methods' signatures (one line each, the first docstring line as a
comment). A method stands for its class (the receiver's other methods are what a completion
after `obj.` picks from). A module-level name: its assignment's first line. A module: the first
docstring line and its public functions and classes, one line each.

jedi finds where a name is defined (`definitions.py`); the stub is read from the module's tree
with the standard library's `ast` (jedi's own names give signatures but not a class's attributes
set in `__init__`, and `ast.unparse` writes annotations and defaults exactly as Python reads them).
Sizes are bounded (MAX_MEMBERS, MAX_LINE) so a 3,000-line class costs a few lines of the budget.
"""

from __future__ import annotations

import ast
import functools
import hashlib

MAX_MEMBERS = 16  # methods (and as many attributes) listed per class; module members per module
MAX_LINE = 120  # characters of a signature or an assignment kept (longer: cut, with "...")
DOC_CHARS = 80  # of a docstring's first line


def _short(text: str, limit: int = MAX_LINE) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def _doc(node) -> str:
    doc = ast.get_docstring(node, clean=True)
    return _short(doc.strip().split("\n")[0], DOC_CHARS) if doc and doc.strip() else ""


@functools.lru_cache(maxsize=128)
def _parsed(digest: str, source: str) -> ast.Module | None:
    del digest  # the key: a module's text is looked up by its hash, so a changed file is parsed again
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def module_tree(source: str) -> ast.Module | None:
    """The module's tree (cached by its text's hash), None when it does not parse."""
    return _parsed(hashlib.blake2b(source.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest(), source)


def signature(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """`def name(args) -> returns:` as the source has it (decorators that change how it is
    called, `@property` and the like, in front)."""
    head = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
    returns = f" -> {ast.unparse(node.returns)}" if node.returns is not None else ""
    decorators = "".join(f"@{ast.unparse(d)} " for d in node.decorator_list
                         if isinstance(d, ast.Name) and d.id in ("property", "staticmethod", "classmethod"))
    return _short(f"{decorators}{head} {node.name}({ast.unparse(node.args)}){returns}:")


def function_stub(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    doc = _doc(node)
    return f"{signature(node)}\n    {_quoted(doc)}\n" if doc else f"{signature(node)} ...\n"


def _quoted(doc: str) -> str:
    return '"""' + doc.replace('"""', "'''").rstrip("\\") + '"""'


def _public(name: str) -> bool:
    return not name.startswith("_") or name in ("__init__", "__call__", "__enter__", "__iter__", "__getitem__")


def class_stub(node: ast.ClassDef) -> str:
    bases = [ast.unparse(b) for b in node.bases] + [ast.unparse(k) for k in node.keywords]
    lines = [_short(f"class {node.name}({', '.join(bases)}):" if bases else f"class {node.name}:")]
    doc = _doc(node)
    if doc:
        lines.append(f"    {_quoted(doc)}")
    attributes: list[str] = []
    own: dict[str, None] = {}
    methods: list[str] = []
    for item in node.body:
        if isinstance(item, (ast.Assign, ast.AnnAssign)) and len(attributes) < MAX_MEMBERS:
            attributes.append("    " + _short(ast.unparse(item)))
        elif isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for sub in ast.walk(item):
                for target in _targets(sub):
                    if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                            and target.value.id == "self" and _public(target.attr)):
                        own.setdefault(target.attr)
            if _public(item.name) and len(methods) < MAX_MEMBERS:
                doc = _doc(item)
                methods.append(f"    {signature(item)} ..." + (f"  # {doc}" if doc else ""))
    lines += attributes
    if own:
        lines.append("    # " + _short("self." + ", self.".join(list(own)[:MAX_MEMBERS]), MAX_LINE))
    lines += methods
    if len(lines) == 1:
        lines.append("    ...")
    return "\n".join(lines) + "\n"


def _targets(node) -> list:
    if isinstance(node, ast.Assign):
        return [t for target in node.targets for t in (target.elts if isinstance(target, ast.Tuple) else [target])]
    if isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        return [node.target]
    return []


def module_stub(tree: ast.Module, skip: frozenset[str] = frozenset()) -> str:
    """A module's public functions and classes, one line each (those named in `skip` left out)."""
    lines = []
    doc = _doc(tree)
    if doc:
        lines.append(_quoted(doc))
    for item in tree.body:
        if len(lines) > MAX_MEMBERS:
            break
        if getattr(item, "name", None) in skip:
            continue
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and _public(item.name):
            lines.append(f"{signature(item)} ...")
        elif isinstance(item, ast.ClassDef) and _public(item.name):
            bases = ", ".join(ast.unparse(b) for b in item.bases)
            lines.append(_short(f"class {item.name}({bases}): ..." if bases else f"class {item.name}: ..."))
    return "\n".join(lines) + "\n" if lines else ""


def _holder(tree: ast.Module, line: int):
    """The definition whose name is on `line`: the outermost class that holds it when it is a
    method (or any member of a class), the function or the statement otherwise."""
    for item in tree.body:
        end = getattr(item, "end_lineno", item.lineno)
        first = min([item.lineno] + [d.lineno for d in getattr(item, "decorator_list", [])])
        if not first <= line <= end:
            continue
        if isinstance(item, ast.ClassDef):
            return item
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return item if item.lineno <= line else None
        if isinstance(item, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            return item
        return None
    return None


def stub_of(source: str, line: int, kind: str = "", skip: frozenset[str] = frozenset()) -> tuple[str, str] | None:
    """(the definition's name, its stub) for the definition named on 1-based `line` of a module's
    `source` (`kind` "module": the module's stub, its members named in `skip` left out); None when there is none (a name bound by a
    loop, an import, or a module that does not parse)."""
    tree = module_tree(source)
    if tree is None:
        return None
    if kind == "module":
        stub = module_stub(tree, skip)
        return ("", stub) if stub else None
    node = _holder(tree, line)
    if isinstance(node, ast.ClassDef):
        return node.name, class_stub(node)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return node.name, function_stub(node)
    if node is not None:
        text = ast.get_source_segment(source, node) or ""
        names = [t.id for t in _targets(node) if isinstance(t, ast.Name)]
        if "\n" not in text:
            return (names[0] if names else ""), _short(text) + "\n"
        annotation = f": {ast.unparse(node.annotation)}" if isinstance(node, ast.AnnAssign) else ""
        targets = ", ".join(ast.unparse(t) for t in _targets(node))
        return (names[0] if names else ""), _short(f"{targets}{annotation} = ...") + "\n"
    return None
