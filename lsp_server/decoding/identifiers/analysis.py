"""What is in scope at a cursor, and which attributes the receivers known there have: one jedi
analysis of a document (jedi: the analysis jedi-language-server and IPython use; it reads
incomplete code, follows imports into the environment and typeshed, and never runs the code).

    scope = analyse(text, line, path)        # seconds cold (jedi loads builtins), ~0.1 s warm
    scope.names.with_prefix(b"cus")          # the names in scope that start so
    scope.receivers[b"os"].closed            # True: nothing but these attributes can follow `os.`

The cursor's line is analysed as its indentation and `pass` (in a `def`'s parameters spread over
lines, as an annotation's place: `_: `), so one analysis serves every text that differs from it
only on that line (the user typing there): `analyses.line_key(text, line)`.

Closed receivers (where decoding may mask what leaves every attribute): a module that defines no
module-level `__getattr__` (its attributes: what jedi lists but the names only its
`if __name__ == "__main__":` blocks bind, `main_block`); a class of this file (and `self`/`cls` in its methods) with no bases
but `object`, builtins and closed classes of this file, no metaclass, no decorator but
`dataclass` (a class that has another, or whose base has, is `Receiver.decorated`: lowered, not
masked), no `__getattr__`/`__getattribute__`/`setattr(`/`__dict__` in its body, and no class of
this file deriving from it (its methods may use what a subclass defines); an instance of such a
class (`shop = Shop(...)`; `shop.` closed) when every binding of its name in the document is a
call of that class, jedi infers that class there, and the document neither calls `setattr` nor
assigns an attribute through any receiver but `self`/`cls` that the class does not list.
A class of another file of the workspace read as a receiver (`Style.` after `from .style import
Style`) is closed by the same rules applied to its own file (`_workspace_class_closed`). Anything
else jedi lists is known but open: biased towards, never masked; so are names bound to
instances of classes of other modules of the workspace (`h = parse_header(x)`, jedi infers util's
`Header`: `h.` lists its methods and attributes, but the instance may be a subclass's;
docs/context.md). Names imported from the
workspace's modules and those modules' attributes (`from . import util`; `util.`) come from jedi
like any import's, the document's path letting it follow relative imports.
"""

from __future__ import annotations

import bisect
import builtins
import enum
import keyword
import os
import re
import sys
import sysconfig
import threading
from dataclasses import dataclass, field

import jedi

from .line_place import line_place
from .main_block import main_only
from .parso_disk import memory_only
from .unbound import IMPLICIT, unbound_at

MAX_RECEIVERS = 48  # receivers analysed per cursor (~10-30 ms each, warm)
MAX_WANTED = 64  # names the document reads and nothing defines, kept per analysis
_KEYWORD_NAME = re.compile(r"[(,]\s*([^\W\d]\w*)\s*=(?!=)")
_DYNAMIC = re.compile(r"__getattr__|__getattribute__|\bsetattr\s*\(|__dict__")
_HEADER = re.compile(r"class\s+\w+\s*(?:\[[^\]]*\])?\s*(?:\((?P<bases>[^)]*)\))?\s*:")
_ALLOWED_DECORATOR = re.compile(r"@\s*(?:dataclasses\.)?dataclass\b")
# an attribute assigned through a receiver (`shop.extra = 1`, `a.b.c += 1`): group 1 the receiver, 2 the attribute
_ATTRIBUTE_ASSIGNED = re.compile(r"((?:[^\W\d]\w*\s*\.\s*)*[^\W\d]\w*)\s*\.\s*([^\W\d]\w*)\s*"
                                 r"(?:[-+*/%@&|^]|//|\*\*|<<|>>)?=(?!=)")
# what makes names jedi does not list: a star import (its module may not resolve), names made at
# run time (globals(), exec, vars, locals, __builtins__), type parameters (`def f[T]`, `type X`)
_OPEN_SCOPE = re.compile(r"import\s*\*|\b(?:globals|exec|vars|locals)\s*\(|\b__builtins__\b"
                         r"|^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+\w+[ \t]*\[|^[ \t]*type[ \t]+\w+", re.M)
# jedi's inference state (the environment's compiled modules, its caches) is not thread-safe:
# two analyses at once (two engines, a test beside a server's thread) broke inside it
_JEDI = threading.Lock()
_OWN = ("self", "cls")


class Names:
    """A sorted set of identifiers (UTF-8 bytes), queried by prefix."""

    __slots__ = ("_sorted", "_set")

    def __init__(self, names) -> None:
        self._set = frozenset(n.encode() if isinstance(n, str) else n for n in names)
        self._sorted = sorted(self._set)

    def __contains__(self, name: bytes) -> bool:
        return name in self._set

    def __len__(self) -> int:
        return len(self._set)

    def __iter__(self):
        return iter(self._sorted)

    def with_prefix(self, prefix: bytes) -> list[bytes]:
        i = bisect.bisect_left(self._sorted, prefix)
        out = []
        while i < len(self._sorted) and self._sorted[i].startswith(prefix):
            out.append(self._sorted[i])
            i += 1
        return out

    def union(self, other) -> Names:
        return Names(self._set | frozenset(other))


@dataclass(frozen=True)
class Receiver:
    """The attributes jedi lists after `name.`, and whether nothing else can follow."""

    attributes: Names
    closed: bool
    # not closed only for a decorator of its class (or of a base) other than `dataclass`: one may
    # add attributes (rich's `@rich_repr` adds `__rich_repr__`), seldom any that code reads after
    # the class's name, so what leaves the attributes is lowered there, not masked
    decorated: bool = False


class Closure(enum.Enum):
    """What the rules for a class of a file say of its attributes (`_closed`)."""

    CLOSED = "closed"  # nothing but what jedi lists
    DECORATED = "decorated"  # the same, but for a decorator other than `dataclass` (`Receiver.decorated`)
    OPEN = "open"


class _Kind(enum.Enum):
    """What a receiver is: which rule says whether it is closed (module docstring)."""

    MODULE = "module"
    CLASS = "class"  # a class, read through its name
    OWN = "own"  # `self`/`cls` in a method of the class holding the cursor
    INSTANCE = "instance"  # a name bound to an instance of a class of this file
    WORKSPACE = "workspace"  # a name jedi infers as an instance of a class of another module of the workspace


class NameSet(enum.Enum):
    """Whether `ScopeAnalysis.names` holds every name a load at the cursor may read."""

    CLOSED = "closed"  # yes: a name outside it does not exist (decoding may mask it where sure)
    OPEN = "open"  # the document makes names jedi can't list (`_OPEN_SCOPE`): favoured, never masked


@dataclass(frozen=True)
class ScopeAnalysis:
    names: Names  # in scope at the cursor: locals, parameters, enclosing, globals (later ones too), builtins, keywords,
    # and every name the document defines in any scope (a superset: masking never refuses one that exists)
    document_names: Names  # the keyword names the document writes (`f(name=`, `def f(name=`): keyword arguments
    receivers: dict[bytes, Receiver] = field(default_factory=dict)  # "os", "os.path", "self", "Config"
    name_set: NameSet = NameSet.OPEN
    wanted: Names = field(default_factory=lambda: Names(()))  # read where nothing binds them, and a binding at
    # the cursor would bind them (`unbound.unbound_at`): what the cursor's line may be about to bind (favoured
    # at sure binding places, parameters and a statement's start)


    def to_json(self) -> dict:
        """This analysis as JSON (the jedi process's answer, `scope_job`; names are identifiers:
        UTF-8 both ways)."""
        return {"names": _strs(self.names), "document_names": _strs(self.document_names),
                "receivers": {k.decode(): [_strs(r.attributes), r.closed, r.decorated]
                              for k, r in self.receivers.items()},
                "name_set": self.name_set.value, "wanted": _strs(self.wanted)}

    @classmethod
    def from_json(cls, d: dict) -> ScopeAnalysis:
        return cls(Names(d["names"]), Names(d["document_names"]),
                   {k.encode(): Receiver(Names(attrs), closed, decorated)
                    for k, (attrs, closed, decorated) in d["receivers"].items()},
                   NameSet(d["name_set"]), Names(d["wanted"]))


def _strs(names: Names) -> list[str]:
    return [n.decode() for n in names]


MEMOS_KEPT = 8  # documents whose module receivers the jedi process keeps (`scope_job`)


def scope_job(job: dict, memos: dict) -> dict:
    """The jedi process's handler (`jedi_process.serve`): `analyse` of the job's text at its line,
    as JSON; `memos`: the module receivers of the last `MEMOS_KEPT` documents (the child's state)."""
    document = job["document"]
    memo = memos.pop(document, None) or {}
    memos[document] = memo  # the most recently used last
    while len(memos) > MEMOS_KEPT:
        memos.pop(next(iter(memos)))
    return analyse(job["text"], job["line"], job["path"], memo).to_json()


def analyse(text: str, line: int, path: str | None = None, memo: dict | None = None) -> ScopeAnalysis:
    """The analysis of `text` at 0-based `line` (see the module docstring). `memo`: module
    receivers kept across analyses of one document, keyed by the document's import lines (what
    a module's name refers to does not depend on the cursor). The server runs it in a process of
    its own (`scope_job`, `analyses.NameAnalyses`). parso's disk cache is off first
    (`parso_disk.memory_only`: no pickle is read or written)."""
    memory_only()
    with _JEDI:
        return _analyse(text, line, path, {} if memo is None else memo)


def _analyse(text: str, line: int, path: str | None, memo: dict) -> ScopeAnalysis:
    imports = "\n".join(re.findall(r"^[ \t]*(?:import|from)[ \t].*$", text, re.M))
    lines = text.split("\n")
    line = min(max(line, 0), len(lines) - 1)
    indent = re.match(r"[ \t]*", lines[line]).group()
    # where the cursor's line continues a `def`'s parameters, it is read as a parameter's
    # annotation (jedi completes nothing where a parameter's name goes)
    where = line_place("\n".join(lines[:line]) + "\n")
    parameters = where.parameters
    lead = indent + ("_: " if parameters else "")

    def script_with(cursor_text: str) -> jedi.Script:
        return jedi.Script("\n".join(lines[:line] + [cursor_text] + lines[line + 1 :]), path=path)

    # a statement (a block the cursor line alone makes stays one), or a parameter
    script = script_with(lead + ("None," if parameters else "pass"))
    here = script.complete(line + 1, len(lead))
    definitions = script.get_names(all_scopes=True, definitions=True)
    names = Names([c.name for c in here] + [d.name for d in definitions] + keyword.kwlist + keyword.softkwlist + dir(builtins)
                  + list(IMPLICIT))
    open_scope = _OPEN_SCOPE.search(text) is not None
    document_names = Names(_KEYWORD_NAME.findall(text))
    visible = {c.name for c in here}  # what jedi finds bound at the cursor is not wanted
    wanted = Names(()) if open_scope else Names(
        n for n in unbound_at(text, line, MAX_WANTED, where) if n not in visible)
    classes = _file_classes(definitions, lines)
    candidates: list[tuple[str, _Kind]] = []
    instances: dict[str, str] = {}  # name -> the class of this file every binding of it calls
    for c in here:
        if c.type == "module":
            candidates.append((c.name, _Kind.MODULE))
        # "instance" too: jedi types a name by the first of what it infers, in no fixed order
        # (rich's decorated `Style`: the class and an instance of Callable)
        elif c.type in ("class", "instance") and (c.name in classes or re.search(rf"\b{re.escape(c.name)}\s*\.", text)):
            candidates.append((c.name, _Kind.CLASS))
        elif c.type == "statement" and c.name not in _OWN and re.search(rf"\b{re.escape(c.name)}\s*\.", text):
            made = _made_by(c.name, definitions, classes)
            if made is not None:
                instances[c.name] = made
                candidates.append((c.name, _Kind.INSTANCE))
            elif path is not None:  # `h = parse_header(x)` with `from .util import parse_header`: util's Header?
                candidates.append((c.name, _Kind.WORKSPACE))
    enclosing = _enclosing_class(script, line + 1, len(lead))
    for own in _OWN:
        if own in (c.name for c in here if c.type == "param") and enclosing is not None:
            candidates.insert(0, (own, _Kind.OWN))
    receivers: dict[bytes, Receiver] = {}
    queue = candidates[:MAX_RECEIVERS]
    while queue and len(receivers) < MAX_RECEIVERS:
        name, kind = queue.pop(0)
        key = (name, imports)
        if kind is _Kind.MODULE and key in memo:
            if memo[key] is not None:
                receivers[name.encode()] = memo[key]
            continue
        synthetic = script_with(f"{lead}{name}.")
        if kind is _Kind.WORKSPACE and not _workspace_instance(synthetic.infer(line + 1, len(lead) + len(name))):
            continue
        listed = synthetic.complete(line + 1, len(lead) + len(name) + 1)
        if not listed:
            if kind is _Kind.MODULE:
                memo[key] = None
            continue  # jedi can't read it: unknown, not empty
        inferred = synthetic.infer(line + 1, len(lead) + len(name)) if kind is _Kind.MODULE else []
        hidden = _main_only(inferred, memo)  # a module's names bound only when it runs as a script
        attributes = Names(c.name for c in listed if c.name not in hidden)
        closure = Closure.OPEN
        if kind is _Kind.MODULE:
            if b"__getattr__" not in attributes and ("." not in name or all(d.type == "module" for d in inferred)):
                closure = Closure.CLOSED
            for c in listed:  # what the document reads through it (`os.path.`)
                if re.search(rf"\b{re.escape(name)}\s*\.\s*{re.escape(c.name)}\s*\.", text):
                    queue.append((f"{name}.{c.name}", _Kind.MODULE))
        elif kind is _Kind.INSTANCE:
            made = instances[name]
            inferred = synthetic.infer(line + 1, len(lead) + len(name))
            if (bool(inferred) and all(d.type == "instance" and d.name == made for d in inferred)
                    and _nothing_added(text, attributes)):
                closure = _closed(made, classes, text, set())
        elif kind is _Kind.WORKSPACE:
            pass  # its class's rules are another file's: favoured, never masked
        elif kind is _Kind.CLASS and name not in classes and path is not None:  # a class of another file
            if _nothing_added_to(name, text, attributes):
                closure = _workspace_class_closed(synthetic.infer(line + 1, len(lead) + len(name)), memo)
        elif _nothing_added(text, attributes):
            closure = _closed(enclosing if kind is _Kind.OWN else name, classes, text, set())
        receivers[name.encode()] = Receiver(attributes, closure is Closure.CLOSED, closure is Closure.DECORATED)
        if kind is _Kind.MODULE:
            memo[key] = receivers[name.encode()]
    return ScopeAnalysis(names, document_names, receivers, NameSet.OPEN if open_scope else NameSet.CLOSED, wanted)


# the environment's files (the stdlib, installed packages, jedi's typeshed): not the workspace's
_ENVIRONMENT = tuple(sorted({os.path.normpath(p) + os.sep for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                                                    sysconfig.get_paths()["stdlib"])}))


def _in_workspace(d) -> bool:
    """jedi's definition `d` lies in a Python file of the workspace (not the environment's
    packages, the stdlib or typeshed's stubs)."""
    path = str(d.module_path) if d.module_path is not None else ""
    return (path.endswith(".py") and not os.path.normpath(path).startswith(_ENVIRONMENT)
            and not any(part in ("site-packages", "dist-packages", "typeshed") for part in path.split(os.sep)))


def _workspace_instance(inferred: list) -> bool:
    """jedi infers instances of classes defined in files of the workspace only: the receivers
    this adds."""
    return bool(inferred) and all(d.type == "instance" and _in_workspace(d) for d in inferred)


def _workspace_class_closed(inferred: list, memo: dict) -> Closure:
    """A class of another file of the workspace read as a receiver (`Style.` after `from .style
    import Style`) is closed where jedi infers that one class and its own file's rules close it
    (`_closed` over that file: the same rules as for a class of the document); memoized by the
    file's path and modification time. Where jedi infers instances beside the class (what a
    decorator's annotations say it returns), it is at most closed but for its decorator."""
    classes = [d for d in inferred if d.type == "class"]
    if len(classes) != 1 or not _in_workspace(classes[0]) or any(d.type != "instance" for d in inferred
                                                                   if d is not classes[0]):
        return Closure.OPEN
    d = classes[0]
    if len(inferred) > 1:  # what its decorator returns too (rich's `Style`: the class and an instance
        # of `Callable`, the decorator's overloads): no more than closed but for the decorator
        closure = _workspace_class_closed([d], memo)
        return closure if closure is Closure.DECORATED else Closure.OPEN
    path = str(d.module_path)
    try:
        key = ("class", path, d.name, os.stat(path).st_mtime_ns)
    except OSError:
        return Closure.OPEN
    if key not in memo:
        try:
            with open(path, encoding="utf-8") as f:
                source = f.read()
            names = jedi.Script(source, path=path).get_names(all_scopes=True, definitions=True)
            memo[key] = _closed(d.name, _file_classes(names, source.split("\n")), source, set())
        except (OSError, UnicodeDecodeError, ValueError):
            memo[key] = Closure.OPEN
    return memo[key]


def _main_only(inferred: list, memo: dict) -> frozenset[str]:
    """The names the module jedi infers (one module of a Python file) binds only in its
    `if __name__ == "__main__":` blocks (`main_block.main_only`); memoized by its path."""
    if len(inferred) != 1 or inferred[0].type != "module" or inferred[0].module_path is None:
        return frozenset()
    path = str(inferred[0].module_path)
    key = ("main-only", path)
    if key not in memo:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                memo[key] = main_only(f.read()) if path.endswith(".py") else frozenset()
        except OSError:
            memo[key] = frozenset()
    return memo[key]


def _file_classes(definitions: list, lines: list[str]) -> dict[str, str]:
    """The classes defined in the document (`definitions`: jedi's names of every scope; not the
    classes it imports): name -> source (decorators included). A name defined twice is left out
    (which one applies depends on where)."""
    out: dict[str, str] = {}
    seen: set[str] = set()
    for n in definitions:
        if n.type != "class":
            continue
        if n.name in seen:
            out.pop(n.name, None)
            continue
        seen.add(n.name)
        start, end = n.get_definition_start_position(), n.get_definition_end_position()
        if start is None or end is None:
            continue
        first = start[0] - 1
        if not re.match(rf"[ \t]*class[ \t]+{re.escape(n.name)}\b", lines[first] if first < len(lines) else ""):
            continue  # an imported class (jedi types the import's name as the class): not defined here
        while first > 0 and lines[first - 1].lstrip().startswith("@"):
            first -= 1
        out[n.name] = "\n".join(lines[first : end[0]])
    return out


def _made_by(name: str, definitions: list, classes: dict[str, str]) -> str | None:
    """The class of this file that every binding of `name` in the document calls (`name =
    Shop(...)`), or None (a parameter, a loop's target, any other value)."""
    made = set()
    for d in definitions:
        if d.name != name:
            continue
        m = re.match(rf"[ \t]*{re.escape(name)}[ \t]*=[ \t]*([^\W\d]\w*)[ \t]*\(", d.get_line_code())
        if m is None or m.group(1) not in classes or d.type != "statement":
            return None
        made.add(m.group(1))
    return made.pop() if len(made) == 1 else None


def _nothing_added(text: str, attributes: Names) -> bool:
    """The document adds no attribute from outside a class to an instance (`shop.extra = 1`):
    no `setattr`, and every attribute it assigns through a receiver but `self`/`cls` is listed."""
    if re.search(r"\bsetattr\s*\(", text):
        return False
    for m in _ATTRIBUTE_ASSIGNED.finditer(text):
        if m.group(1).split(".")[0].strip() not in _OWN and m.group(2).encode() not in attributes:
            return False
    return True


def _nothing_added_to(name: str, text: str, attributes: Names) -> bool:
    """The document adds no attribute to `name` (`Style.extra = 1`, `setattr(Style, ...)`)."""
    if re.search(rf"\bsetattr\s*\(\s*{re.escape(name)}\b", text):
        return False
    return all(m.group(2).encode() in attributes for m in _ATTRIBUTE_ASSIGNED.finditer(text)
               if re.sub(r"\s", "", m.group(1)) == name)


def _enclosing_class(script: jedi.Script, line: int, column: int) -> str | None:
    """The class whose method holds the cursor."""
    try:
        context = script.get_context(line, column)
    except (ValueError, AttributeError):
        return None
    if context is None or context.type != "function":
        return None
    parent = context.parent()
    return parent.name if parent is not None and parent.type == "class" else None


def _closed(name: str | None, classes: dict[str, str], text: str, visiting: set[str]) -> Closure:
    """Whether class `name` of this file has no attributes but those jedi lists (module
    docstring), or would have but for a decorator of its own or of a base (`Closure.DECORATED`)."""
    source = classes.get(name) if name else None
    if source is None or name in visiting:
        return Closure.OPEN
    visiting.add(name)
    if _DYNAMIC.search(source):
        return Closure.OPEN
    if re.search(rf"^[ \t]*class\s+\w+\s*\([^)]*\b{re.escape(name)}\b", text, re.M):
        return Closure.OPEN  # a subclass in this file: the methods may use its attributes
    header = _HEADER.search(source)
    if header is None:
        return Closure.OPEN
    closure = Closure.CLOSED
    decorators = re.split(r"^[ \t]*class\b", source, maxsplit=1, flags=re.M)[0]  # not `dataclass`'s "class"
    for decorator in re.findall(r"^[ \t]*@.*$", decorators, re.M):
        if not _ALLOWED_DECORATOR.match(decorator.strip()):
            closure = Closure.DECORATED
    for base in filter(None, (b.strip() for b in (header.group("bases") or "").split(","))):
        if "=" in base or base.startswith("*"):
            return Closure.OPEN  # metaclass=, **kwargs
        if base in classes:
            below = _closed(base, classes, text, visiting)
            if below is Closure.OPEN:
                return Closure.OPEN
            if below is Closure.DECORATED:
                closure = Closure.DECORATED
        elif not isinstance(getattr(builtins, base, None), type):
            return Closure.OPEN
    return closure
