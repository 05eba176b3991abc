"""The names the rest of a document reads that nothing binds where they are read, and that a
binding at the cursor would bind: what the line being written is expected to define (the user
wrote the usage first and writes the definition now, or rewrites the line that bound them).

    unbound_at(text, line)     # the cursor's line is read as its indentation and `pass`, or as blank

parso (jedi's parser, tolerant of the incomplete code around a cursor) reads the document; each
name read (not an attribute, a keyword argument's name or an import's module path) is looked up
in the scopes that enclose it, as Python does: the functions and lambdas around it, the module,
the class whose body holds it directly (not its methods), the comprehension it is in. A read
nothing binds counts when a binding at the cursor would reach it: it sits in the cursor's scope
(a class body's own statements only, when the cursor is in a class body), after the cursor's
line or inside a function (called later, it reads what the scope binds by then). The lines after
a `def`/`for`/`with` header the cursor rewrites are read in the cursor's scope (with the header
replaced by `pass`, parso keeps them there), so a parameter the body reads counts too.

The cursor's line is read as `pass`; where it starts inside a bracket (Python's tokenizer reads
the text before it), as a blank line (the statement goes on: a parameter's line of a `def` header
spread over lines) or as the brackets' closing (`)`, `):`), whichever parso reads with fewer
errors. Inside a string that spans lines nothing is wanted, nor where the file
then leaves parso more than `MAX_ERRORS` error parts (the line opens a string that spans lines:
a docstring's words read as code).

pyflakes is not used here: it needs a file that compiles, and a document with a line being
written rarely does (an open bracket's next lines, a header's body).
"""

from __future__ import annotations

import builtins
import keyword

import parso
from parso.python import tree

from .line_place import LinePlace, Place, line_place

_SCOPES = ("funcdef", "lambdef", "classdef", "file_input")
_COMPREHENSIONS = ("sync_comp_for", "comp_for")
_FUNCTIONS = ("funcdef", "lambdef")
# names every module, class body or method has without a definition
IMPLICIT = ("__name__", "__file__", "__doc__", "__package__", "__spec__", "__loader__", "__path__",
            "__builtins__", "__annotations__", "__cached__", "__module__", "__qualname__", "__class__",
            "__debug__", "WindowsError")
MAX_ERRORS = 24  # more error parts than this: the cursor's line broke the file (on 400 lines of two code sets,
# a line that does not open a string spanning lines left at most 16; a docstring's first line 31 to 1,700)
_GIVEN = frozenset(dir(builtins)) | frozenset(keyword.kwlist) | frozenset(keyword.softkwlist) | frozenset(IMPLICIT)


def unbound_at(text: str, line: int, limit: int = 64, where: LinePlace | None = None) -> list[str]:
    """The names `text` reads that nothing binds where they are read and that a binding at its
    0-based `line` (whatever that line holds now) would bind (module docstring), in the order
    first read, at most `limit`. `where`: the line's `line_place`, when the caller has it."""
    lines = text.split("\n")
    if not 0 <= line < len(lines):
        return []
    indent = lines[line][: len(lines[line]) - len(lines[line].lstrip(" \t"))]
    where = where or line_place("\n".join(lines[:line]) + "\n")
    if where.place is Place.STRING:
        return []
    stand_ins = [indent + "pass"]
    if where.place is Place.CONTINUATION:  # the line goes on with the statement, or closes its brackets
        stand_ins = [indent, indent + where.closers, indent + where.closers + ":"]
    module, errors = None, MAX_ERRORS + 1
    for stand_in in stand_ins:
        tried = parso.parse("\n".join(lines[:line] + [stand_in] + lines[line + 1 :]))
        found = _errors(tried)
        if found < errors:
            module, errors = tried, found
        if found == 0:
            break
    if module is None:
        return []  # the rest of the file is not read as code (a string the line opened)
    cursor = _cursor_scope(module, line, len(indent))
    if cursor is None:
        return []
    defined: dict[str, set[int]] = {}  # name -> id() of the nodes whose scope binds it
    reads: list[tree.Name] = []
    for leaves in module.get_used_names().values():
        for leaf in leaves:
            role = _role(leaf)
            if role is _READ:
                reads.append(leaf)
            elif role is _DEFINITION:
                defined.setdefault(leaf.value, set()).add(id(_binding_scope(leaf)))
            elif role is _GLOBAL:
                defined.setdefault(leaf.value, set()).add(id(module))
    out: list[str] = []
    for leaf in sorted(reads, key=lambda n: n.start_pos):
        name = leaf.value
        if name in _GIVEN or name in out or _bound(leaf, defined.get(name, ())):
            continue
        if _reaches(cursor, leaf, line):
            out.append(name)
            if len(out) >= limit:
                break
    return out


_READ, _DEFINITION, _GLOBAL, _OTHER = range(4)


def _role(leaf: tree.Name) -> int:
    parent = leaf.parent
    if parent.type == "trailer" and parent.children[0] == ".":
        return _OTHER  # an attribute
    if parent.type == "fstring_conversion":
        return _OTHER  # `!r` in an f-string's field
    if parent.type in ("global_stmt", "nonlocal_stmt"):
        return _GLOBAL if parent.type == "global_stmt" else _OTHER
    if parent.type == "argument" and parent.children[0] is leaf and len(parent.children) > 1 \
            and parent.children[1] == "=":
        return _OTHER  # a keyword argument's name
    if leaf.is_definition():
        return _DEFINITION
    if tree.search_ancestor(leaf, "import_name", "import_from") is not None:
        return _OTHER  # a module's path (`from a.b import c`: a, b), an imported name's own name
    return _READ


def _binding_scope(leaf: tree.Name):
    """The node whose scope a definition binds in: a comprehension's variable its comprehension,
    a parameter its function, a function's or class's name the scope around it."""
    definition = leaf.get_definition()
    if definition is not None and definition.type in _COMPREHENSIONS:
        node = definition
        while node.parent is not None and node.parent.type in _COMPREHENSIONS + ("comp_if",):
            node = node.parent
        return node.parent
    node = leaf.parent
    if definition is not None and definition.type in ("funcdef", "classdef"):
        node = definition.parent
    elif definition is not None and definition.type == "namedexpr_test":
        node = definition  # a walrus binds in the function around it, comprehensions not counted
    while node.type not in _SCOPES:
        node = node.parent
    return node


def _bound(leaf: tree.Name, scopes) -> bool:
    """Whether one of `scopes` (ids of binding nodes) encloses the read `leaf` as Python looks
    names up: a class's names only for its body's own statements."""
    if not scopes:
        return False
    in_function = False
    node = leaf.parent
    while node is not None:
        if id(node) in scopes and not (node.type == "classdef" and in_function):
            return True
        if node.type in _FUNCTIONS:
            in_function = True
        node = node.parent
    return False


def _errors(module) -> int:
    """How many error nodes and leaves parso's tree holds (where it recovered from code it can't
    read)."""
    n, stack = 0, [module]
    while stack:
        node = stack.pop()
        if node.type in ("error_node", "error_leaf"):
            n += 1
        stack.extend(getattr(node, "children", ()))
    return n


def _cursor_scope(module, line: int, column: int):
    """The scope (a `_SCOPES` node) holding the cursor's line."""
    leaf = module.get_leaf_for_position((line + 1, column), include_prefixes=True)
    node = leaf if leaf is not None else module
    while node.type not in _SCOPES:
        node = node.parent
    return node


def _reaches(cursor, leaf: tree.Name, line: int) -> bool:
    """Whether a binding at the cursor (in scope `cursor`, 0-based `line`) would bind the read
    `leaf`: it is in `cursor`'s scope (a class's own statements only), after the line or inside
    a function there."""
    in_function = False
    node = leaf.parent
    while node is not None and node is not cursor:
        if node.type in _FUNCTIONS:
            in_function = True
        node = node.parent
    if node is None or (cursor.type == "classdef" and in_function):
        return False
    return in_function or leaf.start_pos[0] > line + 1
