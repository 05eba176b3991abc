"""What a context-free LALR(1) grammar can't say about Python, checked by the recognizer.

CPython's parser rejects `f() = 1`, `for f() in x`, `del *a` and `with (a as b) + c:`; its
compiler rejects `return` outside a function, `break` outside a loop, `await` outside an async
function. A grammar that says all that would be many times larger, so the recognizer carries two
small annotations on each stack node and checks them where a terminal is shifted:

- an *attribute* of the symbol a node stands for, computed when a rule is reduced (a synthesized
  attribute): is it a valid assignment target (`TARGET`), a single target (`SINGLE`), a starred
  target (`STAR`), does it hold a parenthesized `x as y` (`HAS_AS`)...;
- a *context* (an inherited attribute) computed when a node is pushed: inside a function, an
  async function, a loop, a lambda, a class.

Both are derived here from the grammar's rules and the LR(0) kernel items of each state, by rule
name, so they follow the grammar file.

`await` and asynchronous comprehensions follow CPython's compiler (its symbol table): a
comprehension is a scope of its own, except for its first iterable, evaluated where the
comprehension stands; `await` or `async for` in it makes it asynchronous. An asynchronous
generator expression is allowed anywhere; an asynchronous list, set or dict comprehension only
directly in an async function, and from 3.11 also inside another comprehension (which becomes
asynchronous in turn; before 3.11 not even there). So `await` is allowed where the innermost
enclosing scope is an async function, or a comprehension's own part (its targets, conditions,
later iterables: context `COMP`, the stack tells which by `Recognizer._scope_allows`) that
may become asynchronous. A comprehension's element comes before its `for`, so while it is read
the recognizer can't know that it is one: there it follows the enclosing scope (sound, not
exact: it refuses `(await x for x in y)` in a sync function, which CPython accepts; allowing it
would take guards on the `)` and `,` that end a parenthesis's element, which the mask store's
analyses can't decide: 2.5 % more rows). Before 3.11 the element of a list comprehension that
awaits (it becomes asynchronous) and any element that holds an asynchronous list
comprehension are checked where the `for` comes (G_COMP_START); what an element holds is
carried as *flows* in the context: bits set left to right (`F_*`), reset at a
comprehension's opening bracket and merged at its closing one (`rule_flow`).

A starred expression is no expression of its own: CPython's compiler refuses it where it
stands alone (no comma after it) as a `star_expressions`, in every version: `x = *a`,
`x += *a`, `x: int = *a`, `return *a`, `yield *a`, `for x in *a:`, `*a` as a statement
("can't use starred expression here"). Its node carries LONE_STAR up to that
`star_expressions`, whose reduction (on whatever terminal ends it: NEWLINE, `;`, `=`, `:`,
`)`...) is guarded (G_NOT_LONE_STAR); a comma makes it a tuple's element (`x = *a,`), and
`[*a]`, `f(*a)`, `a[*b]` are other rules.

Checks happen before a terminal is shifted, so a mask never allows a token after which no
valid continuation exists. The constructs newer than the target version (`versions.FEATURES`)
are removed from the table: a shift is dropped when the state it leads to is made only of the
construct's rules, or when it shifts one of its terminals.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..grammar import Grammar
from .versions import features_after

# ---- attributes (synthesized)
TARGET = 1  # a valid (star-)assignment target: name, attribute, subscript, tuple/list of them
SINGLE = 2  # a single target: name, attribute, subscript, or one of those in parentheses
NAME_ONLY = 4  # a bare name
STAR = 8  # `*t` with t a target: valid as an element of a target tuple or list
HAS_STAR = 16  # a partial list holding one starred element
HAS_AS = 32  # a parenthesized tuple holding `x as y` (parenthesized with-items)
STARRED = 64  # a complete tuple or list with a starred element (can't be deleted)
AS_ITEM = 128  # `x as y` inside parentheses, or a partial list holding one
LONE_STAR = 256  # a starred expression `*x` (any x), as long as no comma makes it an element

# how a rule computes its node's attribute from its children
CONST, PASS, LIST_PARTIAL, LIST_COMPLETE, GROUP, STAR_EXPR = range(6)

# ---- contexts (inherited)
FUNC = 1  # inside a def body: return, yield, nonlocal
ASYNC = 2  # inside an async def body: await, async for, async with
LOOP = 4  # inside a loop body: break, continue
LAMBDA = 8  # inside a lambda body: yield
NOT_MODULE = 16  # inside a def or class body: no `import *`
NESTED = 32  # inside a def, perhaps in a class in it: nonlocal
COMP = 64  # inside a comprehension's `for` part (its first iterable too): `Recognizer._scope_allows`
# flows (Python < 3.11), set left to right within a comprehension's brackets
F_AW = 128  # an `await` in the element read so far (in the first iterable: till its clause ends)
F_AWO = 256  # an `await` in a first iterable: evaluated where the comprehension stands
F_LA = 512  # this comprehension is asynchronous
F_AC = 1024  # an asynchronous list, set or dict comprehension in the element (before 3.11)
FLOWS = F_AW | F_AWO | F_LA | F_AC

# comprehension brackets (`region_open`) and elements (`comp_elements`): their kind
GENEXP_KIND, LISTCOMP_KIND = 1, 2
# how a rule's reduction computes its flows (`rule_flow`)
FLOW_PASS, FLOW_CLOSE, FLOW_CLOSE_LISTCOMP, FLOW_CLAUSE, FLOW_IF = range(5)  # FLOW_PASS is 0

# guard codes, evaluated on the top node before a shift (or reduce)
G_TARGET, G_SINGLE, G_DEL, G_AS_IN_WITH, G_CTX, G_AWAIT, G_COMP_ASYNC, G_COMP_START, G_NOT_LONE_STAR = range(1, 10)

NOT_AUGMENTED = ("EQUAL", "EQEQUAL", "NOTEQUAL", "LESSEQUAL", "GREATEREQUAL", "COLONEQUAL")  # *EQUAL, no `x op=`
BODY_RULES_LOOP = {"for_stmt", "while_stmt"}


@dataclass(frozen=True)
class GuardTables:
    rule_kind: tuple[int, ...]  # per rule: CONST/PASS/...
    rule_const: tuple[int, ...]  # per rule: the attribute of CONST rules
    # per state: None (inherit the parent's context) or (distance, and_mask, or_mask, async_check)
    ctx_effect: tuple[tuple[int, int, int, bool] | None, ...]
    # (state, terminal) -> (guard code, argument)
    guards: dict[tuple[int, int], tuple[int, int]]
    with_colon_states: frozenset[int]  # states where COLON ends `with <items>`
    accessing: tuple[str, ...]  # per state, the symbol that leads into it
    removed: frozenset[tuple[int, int]] = field(default_factory=frozenset)  # newer constructs
    # the states entered by a comprehension's opening bracket (a call's parenthesis included),
    # -> GENEXP_KIND or LISTCOMP_KIND (list, set, dict)
    region_open: dict[int, int] = field(default_factory=dict)
    # the states after a comprehension's element, where its `for` may come -> its kind
    comp_elements: dict[int, int] = field(default_factory=dict)
    comp_async_states: frozenset[int] = frozenset()  # entered by `async` in a comprehension
    comp_iterable_states: frozenset[int] = frozenset()  # entered by a comprehension's `in`
    rule_flow: tuple[int, ...] = ()  # per rule: FLOW_PASS/...


def accessing_symbols(g: Grammar) -> tuple[str, ...]:
    out = []
    for kernel in g.kernels:
        syms = {g.rules[r].rhs[d - 1] for r, d in kernel if d > 0}
        assert len(syms) <= 1
        out.append(syms.pop() if syms else "")
    return tuple(out)


def _rule_kind(rule) -> tuple[int, int]:
    lhs, rhs, alias = rule.lhs, rule.rhs, rule.alias
    if alias == "var":
        return CONST, TARGET | SINGLE | NAME_ONLY
    if alias in ("getattr", "getitem"):
        return CONST, TARGET | SINGLE
    if alias == "group":
        return GROUP, 0
    if alias in ("tuple", "list"):
        if len(rhs) == 2:  # () and []
            return CONST, TARGET
        return LIST_COMPLETE, 0
    if alias == "with_paren":
        return CONST, HAS_AS
    if lhs == "with_as_item":
        return CONST, AS_ITEM
    if alias in ("tuple_expr", "target_tuple") or (lhs == "star_expressions" and len(rhs) == 2):
        return LIST_COMPLETE, 0
    if lhs in ("star_named_expressions", "_paren_elems", "_paren_elem") and len(rhs) > 1:
        return LIST_PARTIAL, 0
    if lhs.startswith("__") and lhs != "__ANON":
        return LIST_PARTIAL, 0
    if lhs == "star_expr":
        return STAR_EXPR, 0
    if len(rhs) == 1 and not rhs[0].isupper() and not rhs[0].startswith("$"):
        return PASS, 0
    return CONST, 0


def build_guard_tables(g: Grammar, python_version: tuple[int, int]) -> GuardTables:
    kinds = [_rule_kind(r) for r in g.rules]
    acc = accessing_symbols(g)
    tid = g.term_id

    def items(state):
        return [(g.rules[r], d) for r, d in g.kernels[state]]

    # ---- contexts
    effects: list[tuple[int, int, int, bool] | None] = []
    for s in range(g.n_states):
        eff = None
        for rule, d in items(s):
            before = rule.rhs[:d]
            after = rule.rhs[d:]
            if not before:
                continue
            at_body = before[-1] == "COLON" and after[:1] == ("suite",)
            if at_body and rule.lhs == "funcdef":
                eff = (d, ~(LOOP | LAMBDA | ASYNC), FUNC | NOT_MODULE | NESTED, True)
            elif at_body and rule.lhs == "classdef":
                eff = (d, ~(FUNC | ASYNC | LOOP | LAMBDA), NOT_MODULE, False)
            elif at_body and rule.lhs in BODY_RULES_LOOP and "else_clause" not in before:
                eff = (d, ~0, LOOP, False)
            elif rule.lhs in BODY_RULES_LOOP and before[-1] == "suite":
                eff = (d, ~0, 0, False)  # the loop's else clause runs outside the loop
            elif rule.lhs == "lambdef" and before[-1] == "COLON":
                eff = (d, ~(ASYNC | LOOP | COMP), LAMBDA, False)
            elif (rule.lhs == "_comp_for_clause" and d == 1) or (rule.lhs == "comp_for" and before == ("_comp_for_clause",)):
                eff = (1, ~0, COMP, False)  # the `for` (or `async`) of a comprehension, and its later part
        effects.append(eff)

    # ---- comprehensions
    region_open: dict[int, int] = {}
    comp_elements: dict[int, int] = {}
    comp_async = set()
    comp_iterables = set()
    for s in range(g.n_states):
        for rule, d in items(s):
            kind = COMP_KINDS.get(rule.alias) if rule.lhs in ("atom", "arguments") else None
            if rule.lhs == "atom" and d == 1 and rule.rhs[0] in REGION_BRACKETS:
                region_open[s] = GENEXP_KIND if rule.rhs[0] == "LPAR" else LISTCOMP_KIND
            if rule.alias == "funccall" and d >= 1 and rule.rhs[d - 1] == "LPAR":
                region_open[s] = GENEXP_KIND  # a call's arguments: `f(x for x in y)` (CPython
                # has no generator expression among a class's bases: none is asynchronous there)
            if kind and rule.rhs[d:d + 1] == ("comp_for",):
                comp_elements[s] = kind
            if rule.lhs == "_comp_for_clause" and rule.rhs[:d] == ("ASYNC",):
                comp_async.add(s)
            if rule.lhs == "_comp_for_clause" and rule.rhs[d - 1] == "IN":
                comp_iterables.add(s)
    rule_flow = tuple(_rule_flow(r) for r in g.rules)

    # ---- guards
    guards: dict[tuple[int, int], tuple[int, int]] = {}
    ctx_need = {
        "RETURN": FUNC,
        "NONLOCAL": NESTED,
        "YIELD": FUNC | LAMBDA,
        "BREAK": LOOP,
        "CONTINUE": LOOP,
    }
    with_colon = set()
    lone_star_rules = {~r for r, rule in enumerate(g.rules) if rule.lhs == "star_expressions" and rule.rhs == ("test_or_star",)}
    for s in range(g.n_states):
        row = g.action[s]
        for t, a in row.items():
            if a in lone_star_rules:  # `star_expressions: test_or_star` reduced: no comma came
                guards[(s, t)] = (G_NOT_LONE_STAR, 0)
        for rule, d in items(s):
            before, after = rule.rhs[:d], rule.rhs[d:]
            nxt = after[0] if after else None
            if (rule.lhs == "assign" and before == ("star_expressions",)) or (
                rule.lhs.startswith("__assign") and nxt == "EQUAL"
            ):
                # `x = ...`, and in a chain `x = y = ...` every right side but the last
                guards[(s, tid["EQUAL"])] = (G_TARGET, 0)
            if rule.lhs == "annassign" and before == ("star_expressions",):
                guards[(s, tid["COLON"])] = (G_SINGLE, 0)
            if rule.lhs == "augassign" and before == ("star_expressions",):
                for t in row:
                    if g.terminals[t].endswith("EQUAL") and g.terminals[t] not in NOT_AUGMENTED:
                        guards[(s, t)] = (G_SINGLE, 0)
            if nxt == "IN" and before and before[-1] == "targets":
                guards[(s, tid["IN"])] = (G_TARGET, 0)
            if rule.lhs == "del_stmt" and nxt is None:
                for t, a in row.items():
                    if a < 0:
                        guards[(s, t)] = (G_DEL, 0)
            if rule.lhs in ("with_item", "with_as_item") and before[-2:-1] == ("AS",) and nxt is None:
                for t, a in row.items():
                    if a < 0:
                        guards[(s, t)] = (G_TARGET, 0)
            if rule.lhs == "with_as_item" and before == ("test",):
                guards[(s, tid["AS"])] = (G_AS_IN_WITH, 0)
            if rule.lhs == "with_stmt" and before == ("WITH", "with_item") and nxt == "COLON":
                with_colon.add(s)
            if rule.lhs == "async_stmt" and before == ("ASYNC",):
                for name in ("FOR", "WITH"):
                    if tid[name] in row:
                        guards[(s, tid[name])] = (G_CTX, ASYNC)
            if rule.lhs == "import_from" and nxt == "import_targets" and tid["STAR"] in row:
                guards[(s, tid["STAR"])] = (G_CTX, -NOT_MODULE)
            if s in comp_elements and python_version < (3, 11) and row.get(tid["FOR"], -1) >= 0:
                guards[(s, tid["FOR"])] = (G_COMP_START, 0)
        if row.get(tid["AWAIT"], -1) >= 0:
            # no target starts with `await` (`for await x in y` has no valid continuation)
            target_start = all(r.rhs[d:d + 1] in (("targets",), ("target_elem",)) or (
                d == len(r.rhs) and (r.lhs == "targets" or r.lhs.startswith("__targets"))) for r, d in items(s))
            guards[(s, tid["AWAIT"])] = (G_AWAIT, int(target_start))
        a = row.get(tid["ASYNC"], -1)
        if a >= 0 and a in comp_async:
            guards[(s, tid["ASYNC"])] = (G_COMP_ASYNC, 0)
        for name, need in ctx_need.items():
            t = tid[name]
            if t in row and row[t] >= 0:
                guards[(s, t)] = (G_CTX, need)

    removed = version_removed_shifts(g, python_version)
    return GuardTables(
        rule_kind=tuple(k for k, _ in kinds),
        rule_const=tuple(c for _, c in kinds),
        ctx_effect=tuple(effects),
        guards=guards,
        with_colon_states=frozenset(with_colon),
        accessing=acc,
        removed=frozenset(removed),
        region_open=region_open,
        comp_elements=comp_elements,
        comp_async_states=frozenset(comp_async),
        comp_iterable_states=frozenset(comp_iterables),
        rule_flow=rule_flow,
    )


REGION_BRACKETS = ("LPAR", "LSQB", "LBRACE")
COMP_KINDS = {"genexp": GENEXP_KIND, "genexp_argument": GENEXP_KIND, "listcomp": LISTCOMP_KIND,
              "setcomp": LISTCOMP_KIND, "dictcomp": LISTCOMP_KIND}


def _rule_flow(rule) -> int:
    """How reducing `rule` computes the flows of its node (see the module docstring)."""
    if rule.lhs == "_comp_for_clause":
        return FLOW_CLAUSE
    if rule.lhs == "comp_if":
        return FLOW_IF
    if rule.alias == "funccall" or (rule.lhs == "atom" and rule.rhs[0] in REGION_BRACKETS):
        return FLOW_CLOSE_LISTCOMP if COMP_KINDS.get(rule.alias) == LISTCOMP_KIND else FLOW_CLOSE
    return FLOW_PASS


def version_removed_shifts(g: Grammar, python_version) -> frozenset[tuple[int, int]]:
    """The (state, terminal) shifts into constructs newer than `python_version`: into a state
    whose kernel items all belong to the construct's rules (or to the helper rules lark makes
    of their repetitions, `__<rule>_plus_<n>`), or of one of its terminals."""
    newer = features_after(python_version)
    names = {r for f in newer for r in f.rules}
    terms = {g.term_id[t] for f in newer for t in f.terminals if t in g.term_id}

    def gated(lhs: str) -> bool:
        return lhs in names or (lhs.startswith("__") and lhs[2:].rsplit("_", 2)[0] in names)

    rule_gated = [gated(r.lhs) for r in g.rules]
    removed = set()
    for s in range(g.n_states):
        for t, a in g.action[s].items():
            if a < 0:
                continue
            if t in terms or (g.kernels[a] and all(rule_gated[r] for r, _ in g.kernels[a])):
                removed.add((s, t))
    return frozenset(removed)
