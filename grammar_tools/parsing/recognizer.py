"""An LALR(1) recognizer over lark's parse table: int states on a persistent stack, no tree.

A parser configuration is one `Node`: the top of a linked stack of immutable nodes. Feeding a
terminal never changes a node, it returns a new top (or None), so a snapshot is just a
reference and branching or rolling back costs nothing. Each node also carries:

- `depth`: bracket nesting after it (newlines inside brackets are no statements);
- `indent`: the indentation stack, as a linked tuple `(col, altcol, parent)`, () at column 0;
- `attr` / `ctx`: the synthesized and inherited annotations of `guards` (the context also
  carries, for Python < 3.11, the *flows* of `guards`: what a comprehension's element holds).

Python's layout is fed as terminals: `feed_newline` (a `_NEWLINE`, ignored inside brackets) and
`feed_indentation(col, altcol)` (the `_INDENT`/`_DEDENT`s that the width of the next line calls
for, by CPython's rules: tab stops of 8, and the width with tabs counted as 1 (`altcol`) must
agree, else it is a TabError).

`feed_terminal` is the one door of a lexeme's terminal (layout included) for the prefix parser
and the matcher; `feed_cached` memoizes on the node itself. `feed` makes a run of one-symbol
reductions that pass the attribute on (a name reduced up to `test`) as one node (`_unit_chain`).
The guards are decided by `_check` (on the attributes below; `await` and the asynchronous
comprehensions in `guard_checks.py`). The tables are built in `parse_table.py`; which terminals
may come next is `lookahead.py`'s.
"""

from __future__ import annotations

from collections.abc import Iterable

from . import guards as G
from .guard_checks import GuardChecks
from .guards import (
    AS_ITEM,
    G_DEL,
    G_NOT_LONE_STAR,
    G_SINGLE,
    G_TARGET,
    HAS_AS,
    HAS_STAR,
    LONE_STAR,
    SINGLE,
    STAR,
    STARRED,
    TARGET,
)

_MISSING = object()
_FLOWS = G.FLOWS  # (hot paths: no module lookups)


# ---------------------------------------------------------------- attributes
# The synthesized attribute of a node from its children's, and the guards that read it: `guards`
# names the rule each grammar rule follows (CONST, PASS, GROUP, STAR_EXPR, LIST_PARTIAL,
# LIST_COMPLETE); these functions are the rules themselves, written once for both of their users:
# the recognizer, on the nodes of a real stack, and the exploration (`exploration`), on the
# entries of a frame whose children's attributes it knows (where it doesn't, it reasons about the
# possible values, `semantics`).


def group(inner: int) -> int:
    """`( x )`: a target or a single target when x is one (a parenthesized `x as y` is not)."""
    return inner & (TARGET | SINGLE)


def starred(operand: int) -> int:
    """`*x`: a starred target when x is a target (and not itself starred); any `*x` is a
    LONE_STAR till a comma makes it an element (`of_list` drops it)."""
    return (STAR if operand & TARGET and not operand & STAR else 0) | LONE_STAR


def of_list(complete: bool, children: Iterable[int]) -> int:
    """A tuple or list (`complete`) or a part of one, from its nonterminal children's
    attributes (in any order): a target if every child is one, with at most one starred
    child; a partial list carries its `x as y` items and its star up to the complete one,
    which holds `x as y` items (HAS_AS: parenthesized with-items) or a starred element."""
    all_target = True
    stars = 0
    as_item = 0
    for a in children:
        if not a & (TARGET | STAR):
            all_target = False
        if a & STAR:
            stars += 1
        if a & HAS_STAR:
            stars += 1
        as_item |= a & AS_ITEM
    attr = (HAS_AS if as_item else 0) if complete else as_item
    if all_target and stars <= 1:
        attr |= TARGET
    if stars:
        attr |= STARRED if complete else HAS_STAR
    return attr


def target_guard_holds(code: int, attr: int) -> bool:
    """The guards on the top node's attribute: an assignment target (`x =`, `for x in`, `with
    … as x`), a single target (`x +=`, `x: int`), a deletable target (`del x`), no starred
    expression standing alone (`x = *a`)."""
    if code == G_TARGET:
        return bool(attr & TARGET)
    if code == G_SINGLE:
        return bool(attr & SINGLE)
    if code == G_DEL:
        return bool(attr & TARGET) and not attr & (STAR | STARRED)
    if code == G_NOT_LONE_STAR:
        return not attr & LONE_STAR
    raise ValueError(f"guard code {code} does not read an attribute")


TARGET_GUARDS = frozenset({G_TARGET, G_SINGLE, G_DEL, G_NOT_LONE_STAR})  # the codes `target_guard_holds` decides


class Node:
    """One stack entry; the top node stands for the whole configuration."""

    __slots__ = ("state", "parent", "attr", "ctx", "depth", "indent", "memo", "acc")

    def __init__(self, state, parent, attr, ctx, depth, indent):
        self.state = state
        self.parent = parent
        self.attr = attr
        self.ctx = ctx
        self.depth = depth
        self.indent = indent
        self.memo = None
        self.acc = None

    def states(self) -> list[int]:
        """The state stack, bottom first (for debugging and cache keys)."""
        out = []
        n = self
        while n is not None:
            out.append(n.state)
            n = n.parent
        return out[::-1]

    def key(self) -> tuple:
        """A hashable key for everything a future parse depends on."""
        out = []
        n = self
        while n is not None:
            out.append((n.state, n.attr, n.ctx))
            n = n.parent
        return (tuple(out), self.depth, self.indent)

    def __repr__(self) -> str:
        return f"Node(states={self.states()}, depth={self.depth}, indent={self.indent})"


ACCEPTED = Node(-1, None, 0, 0, 0, ())  # what feeding `$END` returns on a complete input


class Recognizer(GuardChecks):
    """The parse table (`ParseTable`) and the operations on nodes. Immutable; one per (grammar,
    version): `Recognizer(grammar, python_version, semantic_checks)`."""

    # ------------------------------------------------------------------ nodes

    def initial(self) -> Node:
        return Node(self.start_state, None, 0, 0, 0, ())

    def is_stack(self, node: Node) -> bool:
        """Whether `node`'s stack is one this table can make: its root in the start state,
        each node's state one its parent's shifts or gotos enter. For stacks that come from
        elsewhere (a team server's request): the feeding functions index the tables by the
        states they meet and would fail on any other."""
        successors = self.successors
        while node.parent is not None:
            parent = node.parent
            if not 0 <= parent.state < len(successors) or node.state not in successors[parent.state]:
                return False
            node = parent
        return node.state == self.start_state

    def _push(self, parent: Node, state: int, attr: int, depth: int, indent, flows: int = -1) -> Node:
        """A node on `parent`; `flows`: those of the new node, -1: the parent's."""
        eff = self.ctx_effect[state]
        if eff is None:
            ctx = parent.ctx
        else:
            dist, and_mask, or_mask, async_check = eff
            base = parent
            for _ in range(dist - 1):
                base = base.parent
            ctx = (base.ctx & and_mask) | or_mask
            if async_check and self.accessing[base.state] == "ASYNC":
                ctx |= G.ASYNC
        if flows >= 0:
            ctx = (ctx & ~_FLOWS) | (flows if depth else 0)
        elif eff is not None:
            ctx = (ctx & ~_FLOWS) | (parent.ctx & _FLOWS if depth else 0)
        elif not depth and ctx & _FLOWS:
            ctx &= ~_FLOWS
        return Node(state, parent, attr, ctx, depth, indent)
    def _check(self, code: int, arg: int, node) -> bool:
        if code in TARGET_GUARDS:
            return target_guard_holds(code, node.attr)
        if code == G.G_CTX:
            return bool(node.ctx & arg) if arg > 0 else not node.ctx & -arg
        if code == G.G_AWAIT:  # arg: where a target starts (never)
            return not arg and self._await_ok(node)
        if code == G.G_COMP_ASYNC:  # `async for` in a comprehension
            if node.state in self.comp_elements and not self._comp_start_ok(node):
                return False
            b = self._comp_bracket(node)
            if b is None:
                return False
            return self.region_open[b.state] == G.GENEXP_KIND or self._async_comp_ok(b.parent)
        if code == G.G_COMP_START:
            return self._comp_start_ok(node)
        if code == G.G_AS_IN_WITH:
            # only in a parenthesis that opens the with statement's item list
            n = node.parent
            for _ in range(8):
                if n is None:
                    return False
                if self.accessing[n.state] == "LPAR":
                    return n.parent is not None and self.accessing[n.parent.state] == "WITH"
                n = n.parent
            return False
        raise AssertionError(code)

    def feed(self, node: Node, t: int) -> Node | None:
        """The configuration after terminal `t`, or None if `t` can't come next."""
        action = self.action
        guard = self.guard
        while True:
            st = node.state
            a = action[st].get(t)
            if a is None:
                return ACCEPTED if (t == self.END and st == self.end_state) else None
            if guard:
                gd = guard.get(st * 1024 + t)
                if gd is not None and not self._check(gd[0], gd[1], node):
                    return None
            if a >= 0:
                return self._shift(node, a, t)
            if self.unit_pass[~a]:
                node = self._unit_chain(node, t, ~a)
            else:
                node = self._reduce(node, ~a)

    def _unit_chain(self, node: Node, t: int, r: int) -> Node:
        """`node` reduced by the one-symbol rule r that passes its attribute, and on by every
        such reduction the look-ahead `t` makes next, in one node: each pops the node the last
        made and pushes one on the same parent, with the top's attribute and the parent's
        context (`_reduce`'s common case), so only the last state matters (`expr` -> ... ->
        `test` after a name: 15 reductions). It stops before a state with a guard on `t` (the
        guard reads the node there) and before one with context effects."""
        base = node.parent
        f = self._chain_end(node.state, base.state, t, r)
        if f < 0:
            return self._reduce(node, r)
        ctx = base.ctx
        depth = base.depth
        if not depth and ctx & _FLOWS:
            ctx &= ~_FLOWS
        return Node(f, base, node.attr, ctx, depth, base.indent)

    def _chain_end(self, st: int, ps: int, t: int, r: int) -> int:
        """The state where `_unit_chain` stops from state st on a parent in state ps with
        look-ahead t (reducing first by rule r), or -1 where the first reduction is no such;
        memoized in `_chains` (the tables decide it)."""
        key = (st * self._n_states + ps) * 1024 + t
        f = self._chains.get(key)
        if f is None:
            f = self._chains[key] = self._chain_end_from_tables(ps, t, r)
        return f

    def _chain_end_from_tables(self, ps: int, t: int, r: int) -> int:
        action, goto, lhs, guard = self.action, self.goto, self.rule_lhs, self.guard
        s = goto[ps][lhs[r]]
        if self.ctx_effect[s] is not None:
            return -1
        while s * 1024 + t not in guard:
            a = action[s].get(t)
            if a is None or a >= 0 or not self.unit_pass[~a]:
                break
            s2 = goto[ps][lhs[~a]]
            if self.ctx_effect[s2] is not None:
                break
            s = s2
        return s

    def _shift(self, node: Node, a: int, t: int) -> Node | None:
        """`node` shifting terminal `t` into state `a` (its guards passed), or None where the
        semantic checks, the brackets or the indentation refuse it."""
        if node.attr & G.HAS_AS and self.semantic_checks:
            if not (t == self.COLON and node.state in self.with_colon):
                return None
        depth = node.depth + self.bracket_delta.get(t, 0)
        if depth < 0:
            return None
        indent = node.indent
        if t == self.INDENT:
            # a width-less INDENT (feed_indentation passes the real width): one column in
            col, alt = (indent[0], indent[1]) if indent else (0, 0)
            indent = (col + 1, alt + 1, indent)
        elif t == self.DEDENT:
            if not indent:
                return None
            indent = indent[2]
        flows = self._shift_flows(node, a, t) if a in self.flow_shift_states else -1
        return self._push(node, a, 0, depth, indent, flows)

    def _reduce(self, node: Node, r: int) -> Node:
        top = node
        n = self.rule_len[r]
        kind = self.rule_kind[r]
        if kind == G.CONST:
            attr = self.rule_const[r]
            for _ in range(n):
                node = node.parent
        elif kind == G.PASS:
            attr = node.attr
            node = node.parent
        elif kind == G.GROUP:
            attr = group(node.parent.attr)
            node = node.parent.parent.parent
        elif kind == G.STAR_EXPR:
            attr = starred(node.attr)
            node = node.parent.parent
        else:  # LIST_PARTIAL / LIST_COMPLETE: from the nonterminal children
            nt_state = self.nt_state
            children = []
            for _ in range(n):
                if nt_state[node.state]:
                    children.append(node.attr)
                node = node.parent
            attr = of_list(kind == G.LIST_COMPLETE, children)
        goto = self.goto[node.state][self.rule_lhs[r]]
        if not self.track_flows:
            flows = -1
        elif self.rule_flow[r]:  # a rule that changes the flows
            flows = self._reduce_flows(top, node, r)
        elif (top.ctx ^ node.ctx) & _FLOWS:
            flows = top.ctx & _FLOWS
        else:
            flows = -1
        if flows < 0 and self.ctx_effect[goto] is None:  # `_push`'s common case, inline
            ctx = node.ctx
            depth = node.depth
            if not depth and ctx & _FLOWS:
                ctx &= ~_FLOWS
            return Node(goto, node, attr, ctx, depth, node.indent)
        return self._push(node, goto, attr, node.depth, node.indent, flows)

    def feed_cached(self, node: Node, t: int) -> Node | None:
        memo = node.memo
        if memo is None:
            memo = node.memo = {}
        else:
            r = memo.get(t, _MISSING)
            if r is not _MISSING:
                return r
        r = memo[t] = self.feed(node, t)
        return r

    # ------------------------------------------------------------------ layout

    def feed_newline(self, node: Node) -> Node | None:
        """A `_NEWLINE` lexeme: a statement end at depth 0, nothing inside brackets."""
        if node.depth > 0:
            return node
        return self.feed(node, self.NEWLINE)

    def indentation_terminals(self, node: Node, col: int, alt: int) -> list[int] | None:
        """The `_INDENT`/`_DEDENT`s that a line of width (col, altcol) calls for after a
        `_NEWLINE`, or None for an indentation error (CPython's rules, tabs included)."""
        top = node.indent
        tcol, talt = (top[0], top[1]) if top else (0, 0)
        if col == tcol:
            return [] if alt == talt else None
        if col > tcol:
            return [self.INDENT] if alt > talt else None
        out = []
        while col < tcol:
            out.append(self.DEDENT)
            top = top[2]
            tcol, talt = (top[0], top[1]) if top else (0, 0)
        if col != tcol or alt != talt:
            return None
        return out

    def feed_indentation(self, node: Node, col: int, alt: int) -> Node | None:
        if node.depth > 0:
            return node
        terms = self.indentation_terminals(node, col, alt)
        if terms is None:
            return None
        for t in terms:
            node = self.feed(node, t)
            if node is None:
                return None
            if t == self.INDENT:
                node.indent = (col, alt, node.indent[2])  # the real width, on a fresh node
        return node

    def can_end(self, node: Node, *, after_newline: bool = False) -> bool:
        """Whether the text may end after `node`: CPython's implicit NEWLINE (not when the
        text's last lexeme is a newline, already fed with `feed_newline`: `after_newline`),
        the DEDENTs back to column 0, then `$END`. The one "can the text end here" check:
        the prefix parser, the matcher and the f-string fields close their open lexeme their
        own way, then ask this."""
        if not after_newline:
            node = self.feed_newline(node)
        node = node and self.feed_indentation(node, 0, 0)
        return node is not None and self.feed(node, self.END) is ACCEPTED

    def feed_terminal(self, node: Node, t: int, width: tuple[int, int] | None = None,
                      cached: bool = False) -> Node | None:
        """The terminal `t` of a lexeme, its layout included: a newline (`feed_newline`, then,
        when the next line's width (col, altcol) is known, `feed_indentation`), an ignored
        terminal (nothing), else `feed` (`cached`: `feed_cached`). The prefix parser's and the
        matcher's one door to feeding."""
        if t == self.NEWLINE:
            node = self.feed_newline(node)
            if node is None or width is None:
                return node
            return self.feed_indentation(node, width[0], width[1])
        if t in self.ignored:
            return node
        return self.feed_cached(node, t) if cached else self.feed(node, t)
