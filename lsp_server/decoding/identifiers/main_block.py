"""The names a module's file binds only in its `if __name__ == "__main__":` blocks: an imported
module never runs them, so they are no attributes of it (jedi lists them: rich's `box` module
binds `box` in its demo, `from . import box as box`).

    main_only(source)    # frozenset({'box', 'box_name', ...})

Python's `ast` reads the file's structure (not whether it compiles: a file it can't read has no
such names). A name bound anywhere else at the module's level (outside functions and classes,
`else:` of the `__main__` test included) is not main-only.
"""

from __future__ import annotations

import ast

_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def main_only(source: str) -> frozenset[str]:
    """The names `source` binds at its module level only inside `if __name__ == "__main__":`."""
    try:
        module = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return frozenset()
    inside: set[str] = set()
    outside: set[str] = set()
    for statement in module.body:
        if _is_main_test(statement):
            inside |= _bound(statement.body)
            outside |= _bound(statement.orelse)
        else:
            outside |= _bound([statement])
    return frozenset(inside - outside)


def _is_main_test(statement: ast.stmt) -> bool:
    """`if __name__ == "__main__":` (either side first)."""
    if not isinstance(statement, ast.If) or not isinstance(statement.test, ast.Compare):
        return False
    test = statement.test
    if len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq):
        return False
    sides = (test.left, test.comparators[0])
    return (any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides)
            and any(isinstance(s, ast.Constant) and s.value == "__main__" for s in sides))


def _bound(statements: list[ast.stmt]) -> set[str]:
    """The names these statements bind in the scope they run in (not in the functions, classes and
    comprehensions they hold, but a `:=` inside a comprehension binds outside it)."""
    out: set[str] = set()
    stack: list[ast.AST] = list(statements)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
            stack.extend(node.decorator_list)
            continue
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update(a.asname or a.name.split(".")[0] for a in node.names if a.name != "*")
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.add(node.id)
        elif isinstance(node, ast.NamedExpr):
            out.add(node.target.id)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            out.update(node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            out.add(node.name)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            out.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            out.add(node.rest)
        if isinstance(node, _COMPREHENSIONS):  # only its `:=` targets bind here
            stack.extend(n for n in ast.walk(node) if isinstance(n, ast.NamedExpr) and n is not node)
            continue
        stack.extend(ast.iter_child_nodes(node))
    return out
