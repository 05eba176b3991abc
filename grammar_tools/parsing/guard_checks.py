"""The guards that read a stack further than its top node: `await` and the asynchronous
comprehensions (their scopes, and before 3.11 the *flows* the shifts and reductions carry:
`guards`' docstring). `Recognizer._check` decides a guard, here when it is one of these.
"""

from __future__ import annotations

from . import guards as G
from .parse_table import ParseTable


class GuardChecks(ParseTable):
    """The scopes of `await` and of asynchronous comprehensions on `Recognizer`'s nodes, and the
    flows its shifts and reductions carry (`_shift_flows`, `_reduce_flows`)."""

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
