"""Where an identifier is being written, read from the text before the next token.

`slot_at(text)` looks at the end of `text` (the text before the cursor and what decoding wrote
since): the identifier written so far (`partial`, possibly empty), and what kind of place it is
in (`SlotKind`). Binding places (names being defined) are `BINDING` or `FREE`: nothing restricts
them. The reading is lexical and errs towards `FREE`: a place it cannot tell is never restricted.
The caller has already asked the grammar matcher that the text does not end inside a string or a
comment.
"""

from __future__ import annotations

import enum
import keyword
import re
from dataclasses import dataclass

from .token_index import is_name_byte


class SlotKind(enum.Enum):
    NONE = "none"  # not an identifier (a number, a string prefix, inside a bracket we can't read)
    FREE = "free"  # a binding or a place we can't tell from one: never restricted
    BINDING = "binding"  # a name surely being bound (`for` target, `def`/`class`/`import`/`as` name): never
    # restricted; the names the document reads and binds nowhere are favoured there
    PARAMETER = "parameter"  # a parameter's name in a `def` header (not its annotation or default): as BINDING
    STATEMENT = "statement"  # a statement's start: a target or a load, told by what follows the name
    NAME = "name"  # a name read in an expression (a load) inside a bracket or a string: a comprehension's
    # variable (`[x for x in ...]`) or a walrus target (`if n := ...`) may be bound after it
    LOAD = "load"  # a name read in an expression outside brackets and strings, in a parameter's annotation or
    # default at the `def`'s own parenthesis (read where the function is defined), or at a subscript's own
    # level (no comprehension binds there): it must exist already
    ARGUMENT = "argument"  # the start of a call's argument: a load, or a keyword of the callee
    ATTRIBUTE = "attribute"  # after `receiver.`, read (not assigned)
    ATTRIBUTE_TARGET = "attribute-target"  # after `receiver.` at a statement's start: maybe assigned


@dataclass(frozen=True)
class Slot:
    kind: SlotKind
    partial: bytes = b""  # the identifier's bytes written so far
    receiver: bytes = b""  # ATTRIBUTE*: the dotted names before the dot ("os.path", "self")


NONE = Slot(SlotKind.NONE)
_RECEIVER = re.compile(rb"((?:[A-Za-z_][A-Za-z0-9_]*[ \t]*\.[ \t]*)*[A-Za-z_][A-Za-z0-9_]*)[ \t]*\.[ \t]*\Z")
_BINDING_KEYWORD = re.compile(rb"(?:^|[^\w.])(?:def|class|as|import)\Z")
_FREE_KEYWORD = re.compile(rb"(?:^|[^\w.])(?:global|nonlocal|from|del)\Z")
_FOR_TARGET = re.compile(rb"(?:^|[^\w.])for\b(?:(?!\bin\b)[^=])*\Z")
_LAMBDA_PARAMS = re.compile(rb"(?:^|[^\w.])lambda\b[^:]*\Z")
_DEF_HEADER = re.compile(rb"^[ \t]*(?:async[ \t]+)?def[ \t]")
_COMPOUND_HEADER = re.compile(rb"^[ \t]*(?:async[ \t]+)?(?:if|elif|else|for|while|with|try|except|finally|def|class"
                              rb"|match|case)\b")
_CASE_HEADER = re.compile(rb"^[ \t]*case(?:\Z|[ \t]+(?![=.(\[:]))")  # a match's case: its names are captures
_TYPE_ALIAS = re.compile(rb"^[ \t]*type\Z")  # `type Alias = ...` (3.12): the alias' name
_WALRUS_PLACE = re.compile(rb"(?:^|[^\w.])(?:if|elif|while|match)\Z")  # `if n := len(a) ...`: maybe a target
# before a `(` that opens an expression, not a tuple of targets: an operator (not `=`) or a keyword that reads
_READS_BEFORE = re.compile(rb"(?:[-+*/%&|^~<>!@]|==|(?:^|[^\w.])(?:in|not|is|and|or|return|if|elif|while|yield|await"
                           rb"|assert|else|raise))\Z")
_PARAMETER_BEFORE = re.compile(rb"[(,]\s*(?:\*\*?)?\Z")  # in a def's parentheses, a parameter's name follows
_IMPORT_LINE = re.compile(rb"^[ \t]*(?:import|from)[ \t]")
_TYPE_PARAMETERS = re.compile(rb"^\s*(?:(?:async[ \t]+)?def|class|type)[ \t]+\w+[ \t]*\Z")  # `class Box[T]`
_OPEN = b"([{"
_CLOSE = b")]}"


WINDOW = 4000  # bytes read back from the end: a logical line longer than this is read in part


def _scan(text: bytes) -> tuple[int, list[tuple[int, int]], bool]:
    """Where the logical line that `text` ends in starts (physical lines joined while a bracket
    is open or after a backslash), (position, bracket byte) of its brackets still open, and
    whether it ends inside a quote (an f-string's field: its brackets are not counted).
    Read forward from a line start `WINDOW` bytes back; quotes are skipped on one line
    (a triple-quoted string that spans lines miscounts, and the slot is then read wrongly but
    only ever towards a place that is restricted less or not at all: see `slot_at`)."""
    base = text.rfind(b"\n", 0, max(len(text) - WINDOW, 0)) + 1
    start = base
    stack: list[tuple[int, int]] = []
    i = base
    n = len(text)
    while i < n:
        b = text[i]
        if b in b"'\"#":
            i = _past_literal(text, i)  # n + 1: the text ends inside a string
            continue
        if b in _OPEN:
            stack.append((i, b))
        elif b in _CLOSE:
            if stack:
                stack.pop()
        elif b == 0x0A and not stack and not text[:i].endswith(b"\\"):
            start = i + 1
        i += 1
    return start, [(p - start, b) for p, b in stack], i > n


def _past_literal(text: bytes, i: int) -> int:
    """From a quote or a `#` at `i`: where the code goes on after that string or comment, as
    the scanners here read them: a string on one line (a backslash escapes the next byte; a
    newline ends it, the newline read with it), a comment to its line's end (the newline not
    read). len(text) + 1 when the text ends inside the string."""
    n = len(text)
    if text[i] == 0x23:
        j = text.find(b"\n", i)
        return n if j < 0 else j
    quote, i = text[i], i + 1
    while i < n:
        b = text[i]
        if b == 0x5C:
            i += 2
            continue
        if b == quote or b == 0x0A:
            return i + 1
        i += 1
    return n + 1


def _logical_line(text: bytes) -> bytes:
    return text[_scan(text)[0] :]


def slot_at(text: bytes) -> Slot:
    """The identifier place at the end of `text` (see the module docstring)."""
    n = len(text)
    i = n
    while i > 0 and is_name_byte(text[i - 1]):
        i -= 1
    partial = text[i:]
    if partial[:1].isdigit():
        return NONE  # a number
    head = text[:i]
    stripped = head.rstrip(b" \t")
    begin, open_, quoted = _scan(stripped)
    line = stripped[begin:]
    if stripped.endswith(b"."):
        m = _RECEIVER.search(head)
        if m is None:
            return NONE  # `f().x`, `"s".x`, `1..x`: a receiver we don't read
        before = head[: m.start()]
        # the receiver we read is the tail of a longer one (`a.b.x` read as `b.x`, `f()`, `"s"`)
        longer = before[-1:] in (b".", b")", b"]", b"'", b'"') or (before and is_name_byte(before[-1]))
        if longer:
            return NONE
        receiver = re.sub(rb"[ \t]", b"", m.group(1))
        lead = _logical_line(before.rstrip(b" \t"))
        at_start = not lead.strip() or lead.rstrip().endswith(b";") or _ends_header(lead)
        kind = SlotKind.ATTRIBUTE_TARGET if at_start or _binds(lead) else SlotKind.ATTRIBUTE
        return Slot(kind, partial, receiver)
    if _binds_surely(line):
        return Slot(SlotKind.BINDING, partial)
    if _is_parameter(line, open_):
        return Slot(SlotKind.PARAMETER, partial)
    unbroken = line.lstrip(b"\n")  # the logical line without the newline it starts after
    any_name = (_FREE_KEYWORD.search(line.rstrip(b" \t")) or _binds(line) or _TYPE_ALIAS.match(unbroken)
                or _CASE_HEADER.match(unbroken))  # a binding place, or one where reading and binding both fit
    if any_name:
        return Slot(SlotKind.FREE, partial)
    if _parameter_value(line, open_):
        return Slot(SlotKind.LOAD, partial)
    body = line.strip()
    if body.endswith(b"@") and not open_:
        return Slot(SlotKind.FREE, partial)
    statement_start = not body or body.endswith((b";", b":")) and not open_
    if statement_start:
        return Slot(SlotKind.STATEMENT, partial)  # an assignment target or a load
    if not open_:
        if b"=" not in line.replace(b"==", b"") and body.endswith(b","):
            return Slot(SlotKind.FREE, partial)  # `a, b` before `=`: a tuple of targets
        if quoted or _WALRUS_PLACE.search(body):
            return Slot(SlotKind.NAME, partial)
        return Slot(SlotKind.LOAD, partial)
    pos, bracket = open_[-1]
    if bracket == 0x28 and body.endswith((b"(", b",")):
        called = pos > 0 and (is_name_byte(line[pos - 1]) or line[pos - 1] in b")]")  # `f(`, `g()(`, `a[0](`
        if called:
            return Slot(SlotKind.ARGUMENT, partial)  # a call's argument, maybe a keyword's name
        if _READS_BEFORE.search(line[:pos].rstrip(b" \t")):
            return Slot(SlotKind.NAME, partial)  # `not in (`, `+ (`: an expression (maybe a generator's variable)
        return Slot(SlotKind.FREE, partial)  # a parenthesised tuple: maybe targets
    if bracket == 0x5B and not quoted and _is_subscript(line[:pos]):
        return Slot(SlotKind.LOAD, partial)
    return Slot(SlotKind.NAME, partial)


def _is_subscript(before: bytes) -> bool:
    """A `[` after `before` opens a subscript (`t.List[`, `rows[i][`, `f()[`), not a list (`= [`,
    `return [`) nor type parameters (`class Box[`, `def first[`, `type Pair[`): what is read at
    its own level is read where it stands, since no comprehension can bind a name there (`a[x
    for x in y]` is no Python; a comprehension needs brackets of its own)."""
    if not before or not (is_name_byte(before[-1]) or before[-1:] in (b")", b"]")):
        return False
    word = re.search(rb"[A-Za-z_0-9]*\Z", before).group()
    return not keyword.iskeyword(word.decode("ascii", "replace")) and _TYPE_PARAMETERS.match(before) is None


def _ends_header(line: bytes) -> bool:
    """The logical line so far is a compound statement's header (`if x:`, `else:`, `with f() as
    g:`), so what follows starts a statement; not an annotation's colon (`self.kind: types.` reads
    the attribute), a lambda's, a slice's or a dict's."""
    return (line.rstrip().endswith(b":") and not _scan(line)[1]
            and _COMPOUND_HEADER.match(line.lstrip(b"\n")) is not None)


def _binds_surely(line: bytes) -> bool:
    """The next name is surely bound, not read: after `def`/`class`/`as`/`import` (not after a
    dot), a `for`'s target before its `in` (no bracket open: a default or a subscript reads),
    the names of an import line."""
    body = line.rstrip(b" \t")
    if _scan(line)[1]:
        return False
    return bool(_BINDING_KEYWORD.search(body) or _FOR_TARGET.search(body) or _IMPORT_LINE.match(line.lstrip(b"\n"))
                and not re.search(rb"^[ \t]*from[ \t]+[\w.]*\Z", line.lstrip(b"\n")))


def _is_parameter(line: bytes, open_: list[tuple[int, int]]) -> bool:
    """The next name is a parameter's (not an annotation or a default): the logical line is a
    `def` header whose only open bracket is its first `(`, and the text ends with that `(` or a
    `,` in it (`*`/`**` after them)."""
    return _in_def_parens(line, open_) and _PARAMETER_BEFORE.search(line) is not None


def _binds(line: bytes) -> bool:
    """The logical line so far puts the next name in a binding place: after def/class/as/import,
    a for's target, lambda's or a def's parameters, an import line."""
    body = line.rstrip(b" \t")
    if _BINDING_KEYWORD.search(body) or _FOR_TARGET.search(body) or _LAMBDA_PARAMS.search(body):
        return True
    if _IMPORT_LINE.match(line.lstrip(b"\n")):
        return True
    if _DEF_HEADER.match(line.lstrip(b"\n")):
        # a parameter's name (its annotation, its default and the return annotation are loads)
        open_ = _scan(line)[1]
        return _in_def_parens(line, open_) and not _after_colon_or_equals(line[open_[0][0] + 1 :])
    return False


def _in_def_parens(line: bytes, open_: list[tuple[int, int]]) -> bool:
    """The only bracket open is a `def` header's own parenthesis."""
    return (len(open_) == 1 and open_[0] == (line.find(b"("), 0x28)
            and _DEF_HEADER.match(line.lstrip(b"\n")) is not None)


def _after_colon_or_equals(params: bytes) -> bool:
    """In `params` (a `def`'s parameters so far, after its `(`), the last parameter has its `:`
    or `=` already (at its own level: not a slice's, a dict's or a keyword's in brackets; not in
    a string or a comment: read as `_scan` reads them)."""
    depth, colon = 0, False
    i, n = 0, len(params)
    while i < n:
        b = params[i]
        if b in b"'\"#":  # a string, a comment (`a,  # the size: in bytes`)
            i = _past_literal(params, i)
            continue
        if b in _OPEN:
            depth += 1
        elif b in _CLOSE:
            depth -= 1
        elif depth == 0 and b == 0x2C:
            colon = False
        elif depth == 0 and b in b":=":
            colon = True
        i += 1
    return colon


def _parameter_value(line: bytes, open_: list[tuple[int, int]]) -> bool:
    """The next name is read in a parameter's annotation or default of a `def` header, at the
    `def`'s own parenthesis (a deeper bracket there is read as any bracket): a default is
    evaluated where the function is defined, and so is an annotation unless annotations are
    postponed, where it still names what the module binds somewhere."""
    return _in_def_parens(line, open_) and _after_colon_or_equals(line[open_[0][0] + 1 :])
