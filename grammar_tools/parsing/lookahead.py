"""Which terminals may come next after a node, and one node fed many terminals at once: the
recognizer's look-ahead, which the mask walk (`mask_store.mask_walk`) and the terminal-level
checks ask, and a request whose masks are memoized does not.

`accepted(rec, node)` (the bitset of terminals that may come next) memoizes on the node itself,
so a mask computation that asks the same node twice pays once; the reductions it makes are
memoized on the node they reduce onto, by what the reduced node holds. `feed_all` feeds one node
several terminals, their common reductions made once.
"""

from __future__ import annotations

from . import guards as G
from .recognizer import ACCEPTED, Node, Recognizer

_FLOWS = G.FLOWS  # (hot paths: no module lookups)


def accepted(rec: Recognizer, node: Node) -> int:
    """Bitset of the terminals that can come next (INDENT/DEDENT as the table says)."""
    acc = node.acc
    if acc is None:
        acc = node.acc = accepted_among(rec, node, -1)
    return acc

def accepted_among(rec: Recognizer, node: Node, cands: int) -> int:
    """The terminals of `cands` (a bitset, -1: all) that can come after `node` (not memoized on
    it: `accepted` is)."""
    st = node.state
    result = rec.shift_mask[st] & cands
    guard = rec.guard
    if guard:
        guarded = rec.guarded_mask[st]
        risky = result if node.attr & G.HAS_AS else result & guarded
        while risky:
            low = risky & -risky
            risky ^= low
            if not _shift_ok(rec, node, st, low.bit_length() - 1):
                result ^= low
    else:
        guarded = 0
    for r, tmask in rec.reduce_groups[st]:
        sub = tmask & cands
        if not sub:
            continue
        g = sub & guarded
        if g:
            while g:  # a guard on the reduction reads this node, as feed() does before reducing
                low = g & -g
                g ^= low
                gd = guard[st * 1024 + low.bit_length() - 1]
                if not rec._check(gd[0], gd[1], node):
                    sub ^= low
            if not sub:
                continue
        # many configurations reduce onto the same deeper node: memoized there by what the
        # reduced node holds (the ctx: the flows come from the top)
        if rec.unit_pass[r]:  # its node is known without making it: the memo is asked first
            base = node.parent
            gs = rec.goto[base.state][rec.rule_lhs[r]]
            if rec.ctx_effect[gs] is None:
                ctx = base.ctx
                if not base.depth and ctx & _FLOWS:
                    ctx &= ~_FLOWS
                key = (gs, node.attr, ctx, sub)
                red = None
            else:
                red = rec._reduce(node, r)
                key = (red.state, red.attr, red.ctx, sub)
        else:
            red = rec._reduce(node, r)
            base = red.parent
            key = (red.state, red.attr, red.ctx, sub)
        memo = base.memo
        if memo is None:
            memo = base.memo = {}
        hit = memo.get(key)
        if hit is None:
            if red is None:  # `_reduce`'s common case (the unit rule's node), inline
                red = Node(gs, base, node.attr, ctx, base.depth, base.indent)
            hit = memo[key] = accepted_among(rec, red, sub)
        result |= hit
    if cands >> rec.END & 1 and st == rec.end_state:
        result |= 1 << rec.END
    return result

def _shift_ok(rec: Recognizer, node: Node, st: int, t: int) -> bool:
    """The guards of shifting `t` from `node` (whose state `st` shifts it)."""
    if node.attr & G.HAS_AS and not (t == rec.COLON and st in rec.with_colon):
        return False
    gd = rec.guard.get(st * 1024 + t)
    if gd is not None and not rec._check(gd[0], gd[1], node):
        return False
    if t in rec.bracket_delta and node.depth + rec.bracket_delta[t] < 0:
        return False
    return not (t == rec.DEDENT and not node.indent)


def feed_all(rec: Recognizer, node: Node, terminals, out: dict) -> None:
    """`out[t] = feed(node, t)` for every terminal of `terminals`, the reductions that
    several of them make from the same node made once (a mask walk feeds a node every
    terminal its trie node goes on with: after a name, `(`, `.`, `[`, `,` ... all reduce the
    name alike before their ways part)."""
    action = rec.action
    guard = rec.guard
    unit_pass = rec.unit_pass
    work = [(node, terminals)]
    while work:
        node, ts = work.pop()
        st = node.state
        row = action[st]
        groups = None
        for t in ts:
            a = row.get(t)
            if a is None:
                out[t] = ACCEPTED if (t == rec.END and st == rec.end_state) else None
                continue
            if guard:
                gd = guard.get(st * 1024 + t)
                if gd is not None and not rec._check(gd[0], gd[1], node):
                    out[t] = None
                    continue
            if a >= 0:
                out[t] = rec._shift(node, a, t)
                continue
            r = ~a
            if unit_pass[r]:  # by where its chain ends (`_unit_chain`): a key >= 0
                f = rec._chain_end(st, node.parent.state, t, r)
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
                work.append((rec._unit_chain(node, t0, ~row[t0]) if gk >= 0 else rec._reduce(node, ~gk), ts2))
