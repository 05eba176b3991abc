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

`accepted(node)` (the bitset of terminals that may come next) and `feed_cached` memoize on the
node itself, so a mask computation that asks the same node twice pays once; `top_accepted`
memoizes `accepted` in a caller's dict by the fields of the top two nodes, where computing it
reads nothing else (the mask walks' new nodes). `feed` makes a run of one-symbol reductions that
pass the attribute on (a name reduced up to `test`) as one node (`_unit_chain`); `feed_all` feeds
one node several terminals, their common reductions made once.
"""

from __future__ import annotations

from ..grammar import (
    BRACKET_CLOSE,
    BRACKET_OPEN,
    DEDENT,
    END,
    INDENT,
    NEWLINE,
    Grammar,
    load_grammar,
)
from . import attributes as A
from . import guards as G
from .versions import NEWEST, checked

_MISSING = object()
_FLOWS = G.FLOWS  # (hot paths: no module lookups)


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


class _BelowTop(Exception):
    """A computation on a stack's top two nodes (`Recognizer.top_accepted`) read below them
    or their indentation."""


def _read_below(self, value=None):
    raise _BelowTop


class _Bottom(Node):
    """Below a copied top: reading or writing any field raises `_BelowTop`."""

    __slots__ = ()
    state = parent = attr = ctx = depth = indent = memo = acc = property(_read_below, _read_below)


_BOTTOM = object.__new__(_Bottom)


class _HiddenIndent(tuple):
    """The indentation stack of a copied top node: reading it raises `_BelowTop` (the
    copies' sets hold for any indentation when nothing reads it)."""

    __slots__ = ()

    def _hidden(self, *args):
        raise _BelowTop

    __len__ = __bool__ = __getitem__ = __iter__ = __eq__ = __ne__ = __hash__ = _hidden


_HIDDEN = _HiddenIndent()


class Recognizer:
    """The parse table and the operations on nodes. Immutable; one per (grammar, version).

    `python_version`: the Python the document targets (`versions.SUPPORTED`, default the newest);
    the constructs of later versions are not accepted."""

    def __init__(self, grammar: Grammar | None = None, python_version=None, semantic_checks=True):
        g = self.grammar = grammar or load_grammar()
        self.python_version = checked(python_version or NEWEST)
        self.semantic_checks = semantic_checks
        gt = self.guards = G.build_guard_tables(g, self.python_version)
        tid = g.term_id
        nt_ids = {n: i for i, n in enumerate(g.nonterminals)}
        self.action = [dict(row) for row in g.action]
        for s, t in gt.removed:
            del self.action[s][t]
        self.goto = [{nt_ids[n]: s for n, s in row.items()} for row in g.goto]
        self.rule_lhs = [nt_ids[r.lhs] for r in g.rules]
        self.rule_len = [len(r.rhs) for r in g.rules]
        self.rule_kind = list(gt.rule_kind)
        self.rule_const = list(gt.rule_const)
        self.ctx_effect = list(gt.ctx_effect)
        self.guard = {s * 1024 + t: v for (s, t), v in gt.guards.items()} if semantic_checks else {}
        self.with_colon = gt.with_colon_states
        self.accessing = gt.accessing
        self.region_open = gt.region_open
        self.comp_elements = gt.comp_elements
        self.comp_async = gt.comp_async_states
        self.comp_iterables = gt.comp_iterable_states
        self.rule_flow = gt.rule_flow
        # before 3.11 an asynchronous list comprehension may stand in no comprehension
        self.nested_async_comp = self.python_version >= (3, 11)
        self.track_flows = semantic_checks and not self.nested_async_comp
        # the states whose shift may change the flows (`_shift_flows`)
        self.flow_shift_states = frozenset(
            s for s, sym in enumerate(gt.accessing)
            if s in gt.region_open or s in gt.comp_async_states or s in gt.comp_iterable_states
            or sym in ("AWAIT", "FOR", "ASYNC")
        ) if self.track_flows else frozenset()
        self.AWAIT = tid["AWAIT"]
        self.FOR = tid["FOR"]
        self.ASYNC = tid["ASYNC"]
        self.start_state = g.start_state
        self.end_state = g.end_state
        self.n_terminals = g.n_terminals
        self.END = tid[END]
        self.NEWLINE = tid[NEWLINE]
        self.INDENT = tid[INDENT]
        self.DEDENT = tid[DEDENT]
        self.COLON = tid["COLON"]
        self.opens = frozenset(tid[n] for n in BRACKET_OPEN if n in tid)
        self.closes = frozenset(tid[n] for n in BRACKET_CLOSE if n in tid)
        self.bracket_delta = {t: 1 for t in self.opens} | {t: -1 for t in self.closes}
        # per state: the terminals it shifts, and its reductions grouped by rule
        self.shift_mask = []
        self.reduce_groups = []
        for row in self.action:
            sm = 0
            groups: dict[int, int] = {}
            for t, a in row.items():
                if a >= 0:
                    sm |= 1 << t
                else:
                    groups[~a] = groups.get(~a, 0) | 1 << t
            self.shift_mask.append(sm)
            self.reduce_groups.append(tuple(groups.items()))
        self.guarded_mask = [0] * len(self.action)
        for key in self.guard:
            s, t = divmod(key, 1024)
            self.guarded_mask[s] |= 1 << t
        # rules whose reduction keeps the node's attribute and pops it alone (when nothing
        # tracks the flows: `_accepted` knows their node without making it)
        self.unit_pass = [n == 1 and k == G.PASS and not self.track_flows
                          for n, k in zip(self.rule_len, self.rule_kind)]
        # `_unit_chain`'s ends, by (state, parent's state, look-ahead): filled as walks meet them
        self._n_states = len(self.action)
        self._chains: dict[int, int] = {}
        # states entered by a nonterminal (their nodes carry attributes)
        self.nt_state = [bool(sym) and not sym.isupper() for sym in self.accessing]

    # ------------------------------------------------------------------ nodes

    def initial(self) -> Node:
        return Node(self.start_state, None, 0, 0, 0, ())

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

    def _shift_flows(self, parent: Node, state: int, t: int) -> int:
        """The flows after shifting `t` from `parent` into `state`."""
        if state in self.region_open:
            return 0  # a comprehension's bracket, perhaps: its element starts
        flows = parent.ctx & G.FLOWS
        if t == self.AWAIT:
            return flows | G.F_AW
        if (t == self.FOR or t == self.ASYNC) and parent.state in self.comp_elements:  # a comprehension's element
            flows = (flows & ~G.F_AW) | (G.F_LA if flows & G.F_AW else 0)
        if state in self.comp_async:
            flows |= G.F_LA
        if state in self.comp_iterables and flows & G.F_AW:  # the targets are the comprehension's
            flows = (flows & ~G.F_AW) | G.F_LA
        return flows

    def _reduce_flows(self, top: Node, base: Node, r: int) -> int:
        """The flows of the node that reducing rule r from `top` puts on `base`."""
        flows = top.ctx & G.FLOWS
        kind = self.rule_flow[r]
        if kind == G.FLOW_PASS:
            return flows
        if kind == G.FLOW_CLAUSE or kind == G.FLOW_IF:
            if not flows & G.F_AW:
                return flows
            first = kind == G.FLOW_CLAUSE and base.state in self.comp_elements
            return (flows & ~G.F_AW) | (G.F_AWO if first else G.F_LA)
        # a bracket closes: what it holds is the enclosing element's (an asynchronous
        # comprehension's `await`s stay inside it, but an asynchronous list comprehension
        # is one more thing its enclosing element holds)
        out = base.ctx & G.FLOWS
        if flows & (G.F_AW | G.F_AWO):
            out |= G.F_AW
        if flows & G.F_AC:
            out |= G.F_AC
        if flows & G.F_LA and kind == G.FLOW_CLOSE_LISTCOMP:
            out |= G.F_AC
        return out

    # ------------------------------------------------------------------ await

    def _await_ok(self, node: Node) -> bool:
        """Whether `await` may come right after `node`: in an async function's own code, or in
        a comprehension's conditions, targets or later iterables that may be asynchronous."""
        return self._scope_allows(node, False)

    def _async_comp_ok(self, node: Node) -> bool:
        """Whether an asynchronous list, set or dict comprehension may stand right after `node`."""
        return self._scope_allows(node, not self.nested_async_comp)

    def _scope_allows(self, n: Node, strict: bool) -> bool:
        """`await` (strict: an asynchronous list comprehension before 3.11, which no
        comprehension may hold) right after `n`: walk out through the comprehensions that
        the position is in the own part of (their brackets: `region_open`); a generator
        expression takes it, a list comprehension becomes asynchronous in turn."""
        while True:
            if not n.ctx & G.COMP:  # in no comprehension's own part: the function decides
                return bool(n.ctx & G.ASYNC)
            path = []
            while n.state not in self.region_open:
                path.append(n)
                if n.parent is None:  # a stack started in a context (an f-string's field)
                    return self._detached(n.ctx, strict)
                n = n.parent
            if self._in_own_part(path):
                if strict:
                    return False
                if self.region_open[n.state] == G.GENEXP_KIND:
                    return True
                strict = not self.nested_async_comp
            n = n.parent

    def _detached(self, ctx: int, strict: bool) -> bool:
        """`_scope_allows` where the stack below is not known, only its context `ctx` (a
        field of an f-string is parsed on a stack of its own): in an async function's code,
        from 3.11 any comprehension may be asynchronous; before, only where none is around."""
        if not ctx & G.ASYNC:
            return False
        if strict:
            return not ctx & G.COMP
        return self.nested_async_comp or not ctx & G.COMP

    def _in_own_part(self, path: list[Node]) -> bool:
        """Whether the nodes above a bracket (`path`, top first) are in the own part of a
        comprehension in it: after its element, and not in its first iterable."""
        if len(path) < 2 or path[-1].state not in self.comp_elements:
            return False
        acc = self.accessing[path[-2].state]
        if acc in ("_comp_for_clause", "comp_for"):
            return True
        k = 4 if acc == "FOR" else 5 if acc == "ASYNC" else 0
        if not k:
            return False
        return not (len(path) >= k and self.accessing[path[-k].state] == "IN")

    def _comp_bracket(self, node: Node) -> Node | None:
        """The opening bracket of the comprehension whose `for` part `node` ends."""
        n = node
        while n is not None and not (n.state in self.region_open and n.depth == node.depth):
            n = n.parent
        return n

    def _check(self, code: int, arg: int, node: Node) -> bool:
        if code in A.TARGET_GUARDS:
            return A.target_guard_holds(code, node.attr)
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

    def _comp_start_ok(self, node: Node) -> bool:
        """Before 3.11: may a comprehension's `for` follow its element (`node`)? Not if the
        element holds an asynchronous list comprehension; a list comprehension whose element
        awaits is asynchronous, where the comprehension stands must allow that."""
        if self.nested_async_comp:
            return True
        flows = node.ctx & G.FLOWS
        if flows & G.F_AC:
            return False
        if flows & G.F_AW and self.comp_elements[node.state] == G.LISTCOMP_KIND:
            return self._async_comp_ok(node.parent.parent)
        return True

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

    def feed_all(self, node: Node, terminals, out: dict) -> None:
        """`out[t] = feed(node, t)` for every terminal of `terminals`, the reductions that
        several of them make from the same node made once (a mask walk feeds a node every
        terminal its trie node goes on with: after a name, `(`, `.`, `[`, `,` ... all reduce the
        name alike before their ways part)."""
        action = self.action
        guard = self.guard
        unit_pass = self.unit_pass
        work = [(node, terminals)]
        while work:
            node, ts = work.pop()
            st = node.state
            row = action[st]
            groups = None
            for t in ts:
                a = row.get(t)
                if a is None:
                    out[t] = ACCEPTED if (t == self.END and st == self.end_state) else None
                    continue
                if guard:
                    gd = guard.get(st * 1024 + t)
                    if gd is not None and not self._check(gd[0], gd[1], node):
                        out[t] = None
                        continue
                if a >= 0:
                    out[t] = self._shift(node, a, t)
                    continue
                r = ~a
                if unit_pass[r]:  # by where its chain ends (`_unit_chain`): a key >= 0
                    f = self._chain_end(st, node.parent.state, t, r)
                    gk = f if f >= 0 else ~r
                else:
                    gk = ~r
                if groups is None:
                    groups = {gk: [t]}
                else:
                    g = groups.get(gk)
                    if g is None:
                        groups[gk] = [t]
                    else:
                        g.append(t)
            if groups is not None:
                for gk, ts2 in groups.items():
                    t0 = ts2[0]
                    work.append((self._unit_chain(node, t0, ~row[t0]) if gk >= 0 else self._reduce(node, ~gk), ts2))

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
            attr = A.group(node.parent.attr)
            node = node.parent.parent.parent
        elif kind == G.STAR_EXPR:
            attr = A.starred(node.attr)
            node = node.parent.parent
        else:  # LIST_PARTIAL / LIST_COMPLETE: from the nonterminal children
            nt_state = self.nt_state
            children = []
            for _ in range(n):
                if nt_state[node.state]:
                    children.append(node.attr)
                node = node.parent
            attr = A.of_list(kind == G.LIST_COMPLETE, children)
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

    # ------------------------------------------------------------------ queries

    def accepts(self, node: Node, terminals) -> bool:
        for t in terminals:
            node = self.feed(node, t)
            if node is None:
                return False
        return True

    def accepted(self, node: Node) -> int:
        """Bitset of the terminals that can come next (INDENT/DEDENT as the table says)."""
        acc = node.acc
        if acc is None:
            acc = node.acc = self._accepted(node, -1)
        return acc

    def top_accepted(self, node: Node, memo: dict) -> int:
        """`accepted(node)`, memoized in `memo` (the caller's, shared by all stacks) by the
        fields of the node and its parent, their indentation left out, when computing it read
        nothing else: it is computed on copies of the two, their indentation hidden, on a
        bottom, and any read of those raises (`_BelowTop`: then it is computed on the stack
        itself, each time). A name pushed on a `(` reduces to an argument there and stops,
        whatever lies below and however deep the block: the new nodes of the mask walks are
        mostly such, and their sets recur at every position."""
        below = node.parent
        if below is None:
            return self.accepted(node)
        key = (node.state, node.attr, node.ctx, node.depth, below.state, below.attr, below.ctx, below.depth)
        acc = memo.get(key)
        if acc is None:
            top = Node(node.state, Node(below.state, _BOTTOM, below.attr, below.ctx, below.depth, _HIDDEN),
                       node.attr, node.ctx, node.depth, _HIDDEN)
            try:
                acc = self.accepted(top)
            except _BelowTop:
                acc = -1  # it reads deeper
            memo[key] = acc
        if acc < 0:
            return self.accepted(node)
        node.acc = acc
        return acc

    def _accepted(self, node: Node, cands: int) -> int:
        st = node.state
        result = self.shift_mask[st] & cands
        guard = self.guard
        if guard:
            guarded = self.guarded_mask[st]
            risky = result if node.attr & G.HAS_AS else result & guarded
            while risky:
                low = risky & -risky
                risky ^= low
                if not self._shift_ok(node, st, low.bit_length() - 1):
                    result ^= low
        else:
            guarded = 0
        for r, tmask in self.reduce_groups[st]:
            sub = tmask & cands
            if not sub:
                continue
            g = sub & guarded
            if g:
                while g:  # a guard on the reduction reads this node, as feed() does before reducing
                    low = g & -g
                    g ^= low
                    gd = guard[st * 1024 + low.bit_length() - 1]
                    if not self._check(gd[0], gd[1], node):
                        sub ^= low
                if not sub:
                    continue
            # many configurations reduce onto the same deeper node: memoized there by what the
            # reduced node holds (the ctx: the flows come from the top)
            if self.unit_pass[r]:  # its node is known without making it: the memo is asked first
                base = node.parent
                gs = self.goto[base.state][self.rule_lhs[r]]
                if self.ctx_effect[gs] is None:
                    ctx = base.ctx
                    if not base.depth and ctx & _FLOWS:
                        ctx &= ~_FLOWS
                    key = (gs, node.attr, ctx, sub)
                    red = None
                else:
                    red = self._reduce(node, r)
                    key = (red.state, red.attr, red.ctx, sub)
            else:
                red = self._reduce(node, r)
                base = red.parent
                key = (red.state, red.attr, red.ctx, sub)
            memo = base.memo
            if memo is None:
                memo = base.memo = {}
            hit = memo.get(key)
            if hit is None:
                if red is None:  # `_reduce`'s common case (the unit rule's node), inline
                    red = Node(gs, base, node.attr, ctx, base.depth, base.indent)
                hit = memo[key] = self._accepted(red, sub)
            result |= hit
        if cands >> self.END & 1 and st == self.end_state:
            result |= 1 << self.END
        return result

    def _shift_ok(self, node: Node, st: int, t: int) -> bool:
        """The guards of shifting `t` from `node` (whose state `st` shifts it)."""
        if node.attr & G.HAS_AS and not (t == self.COLON and st in self.with_colon):
            return False
        gd = self.guard.get(st * 1024 + t)
        if gd is not None and not self._check(gd[0], gd[1], node):
            return False
        if t in self.bracket_delta and node.depth + self.bracket_delta[t] < 0:
            return False
        return not (t == self.DEDENT and not node.indent)
