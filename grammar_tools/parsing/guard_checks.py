"""The guards' checks on a stack, and the attribute rules they read.

`guards` names the rule each grammar rule follows (CONST, PASS, GROUP, STAR_EXPR,
LIST_PARTIAL, LIST_COMPLETE) and where a terminal's shift is guarded; the functions here are the
rules themselves, written once for both of their users: the recognizer, on the nodes of a
real stack, and the exploration (`exploration`), on the entries of a frame whose children's
attributes it knows (where it doesn't, it reasons about the possible values, `semantics`).
`GuardChecks` is the part of the recognizer that reads a stack to decide a guard: the targets'
attributes, the context, `await` and the asynchronous comprehensions (their *flows* before
3.11, `guards`' docstring).
"""

from __future__ import annotations

from collections.abc import Iterable

from . import guards as G
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
from .parse_table import ParseTable


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


class GuardChecks(ParseTable):
    """The guards' checks of `Recognizer` on its nodes (`_check`), and the flows its shifts and
    reductions carry (`_shift_flows`, `_reduce_flows`)."""

    def _shift_flows(self, parent, state: int, t: int) -> int:
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

    def _reduce_flows(self, top, base, r: int) -> int:
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

    def _await_ok(self, node) -> bool:
        """Whether `await` may come right after `node`: in an async function's own code, or in
        a comprehension's conditions, targets or later iterables that may be asynchronous."""
        return self._scope_allows(node, False)

    def _async_comp_ok(self, node) -> bool:
        """Whether an asynchronous list, set or dict comprehension may stand right after `node`."""
        return self._scope_allows(node, not self.nested_async_comp)

    def _scope_allows(self, n, strict: bool) -> bool:
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

    def _in_own_part(self, path: list) -> bool:
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

    def _comp_bracket(self, node):
        """The opening bracket of the comprehension whose `for` part `node` ends."""
        n = node
        while n is not None and not (n.state in self.region_open and n.depth == node.depth):
            n = n.parent
        return n

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

    def _comp_start_ok(self, node) -> bool:
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
