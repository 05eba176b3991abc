"""The walk of a group's rows: the rows whose terminal sequences the parser accepts from a node.

A configuration's mask is the union of the masks of the rows of its NFA state's group whose
terminal sequence the recognizer accepts after the configuration's node (`collect`), walked as
a trie (`group_trie`) so that a shared prefix is checked once; a run of an operator cycle
(`operator_runs`) is walked without checks. What may follow a node is memoized on it
(`lookahead.accepted`), and for the nodes a walk makes, across walks, by the fields of the
stack's top two nodes where that is all it depends on (`top_accepted`); the walk's nodes are its
own (freed when it ends). The compiled grammar (`compiled.CompiledGrammar.config_bits`) walks
only for a mask it has not memoized: a warm request reads its masks without walking. `comp`,
the functions' first argument, is that `CompiledGrammar` (its store, recognizer and memo).
"""

from __future__ import annotations

from grammar_tools.parsing.lookahead import accepted, feed_all
from grammar_tools.parsing.recognizer import Node, Recognizer

from .operator_runs import in_cycle

TOP_ACCEPTED_SIZE = 32768  # entries of `top_accepted`'s memo (~200 bytes each)


class Trie:
    __slots__ = ("masks", "children")

    def __init__(self) -> None:
        self.masks: list[int] = []
        self.children: dict[int, Trie] = {}


def group_trie(comp, group: int) -> Trie:
    """The rows of `group` as a trie of their terminal sequences (built on first use, kept in
    the compiled grammar's memo)."""
    t = comp.memo.tries.get(group)
    if t is None:
        t = Trie()
        s = comp.store
        lo, hi = int(s.group_start[group]), int(s.group_start[group + 1])
        starts = s.row_seq_start
        seq = s.seq
        masks = s.row_mask
        for r in range(lo, hi):
            node = t
            for e in seq[starts[r] : starts[r + 1]].tolist():
                nxt = node.children.get(e)
                if nxt is None:
                    nxt = node.children[e] = Trie()
                node = nxt
            node.masks.append(int(masks[r]))
        comp.memo.tries[group] = t
    return t


def collect(comp, group: int, node: Node, width, out: list[int]) -> None:
    """Append the mask ids of the rows of `group` that the parser accepts from `node`.

    A walk item is (trie node, parser node, run terminal, run length): with a run terminal
    e, the parser node is in a cycle of `operator_runs` for e and stands for itself fed e
    `run length` more times (the same terminals may follow each: its own `accepted`); the
    run is fed for real only where a row leaves it (`_run_fed`)."""
    rec = comp.recognizer
    T, NL = comp.T, comp.NL
    indents = comp.store.indents
    runs = comp.runs
    tops = comp.memo.top_accepted
    if len(tops) > TOP_ACCEPTED_SIZE:
        tops.clear()
    stack = [(group_trie(comp, group), node, -1, 0)]
    checks = 0
    while stack:
        trie, p, run, k = stack.pop()
        out.extend(trie.masks)
        if not trie.children:
            continue
        # within a run: the run's first node's, memoized on it; the walk's own nodes' by
        # their top two nodes' fields, across walks, when that is all the set depends on
        acc = p.acc
        if acc is None:
            acc = accepted(rec, p) if p is node else top_accepted(rec, p, tops)
        checks += not k
        depth0 = p.depth == 0
        fed = []  # the children whose terminal is fed to p: all at once (`feed_all`)
        indents_fed = []
        for e, child in trie.children.items():
            if e < T:
                if e == NL and not depth0:
                    stack.append((child, p, run, k))  # newlines inside brackets are nothing
                    continue
                if not acc >> e & 1:
                    continue
                if not child.children:
                    out.extend(child.masks)
                    continue
                if e == run:
                    stack.append((child, p, run, k + 1))  # the run goes on: no check
                    continue
                fed.append((e, child))
            elif not depth0:
                stack.append((child, p, run, k))
            else:
                indents_fed.append((e, child))
        if not fed and not indents_fed:
            continue
        if k:
            p = _run_fed(rec, p, run, k)
            checks += k
        if fed:
            # not memoized on p: the walk's nodes are its own, freed (by reference counts)
            # when it ends; a node memoized on the configuration's own would hold the walk's
            # tree as long as the configuration lives (a matcher's history: the cycle
            # collector's work)
            checks += len(fed)
            if len(fed) == 1:
                e, child = fed[0]
                after = {e: rec.feed(p, e)}
            else:
                after = {}
                feed_all(rec, p, [e for e, _ in fed], after)
            for e, child in fed:
                p2 = after[e]
                if p2 is not None:
                    if runs and (p2.state, e) in runs and in_cycle(runs, p, p2, e, rec):
                        stack.append((child, p2, e, 0))
                    else:
                        stack.append((child, p2, -1, 0))
        for e, child in indents_fed:
            col, alt = indents[e - T].width(width)
            p2 = rec.feed_indentation(p, col, alt)
            checks += 1
            if p2 is not None:
                stack.append((child, p2, -1, 0))
    comp.memo.stats["parser_checks"] += checks

def _run_fed(rec: Recognizer, p: Node, run: int, k: int) -> Node:
    """The parser node `p` fed the terminal `run` k times (in a cycle: each is accepted)."""
    for _ in range(k):
        p = rec.feed(p, run)
    return p


class _BelowTop(Exception):
    """A computation on a stack's top two nodes (`top_accepted`) read below them
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


def top_accepted(rec: Recognizer, node: Node, memo: dict) -> int:
    """`accepted(rec, node)`, memoized in `memo` (the caller's, shared by all stacks) by the
    fields of the node and its parent, their indentation left out, when computing it read
    nothing else: it is computed on copies of the two, their indentation hidden, on a
    bottom, and any read of those raises (`_BelowTop`: then it is computed on the stack
    itself, each time). A name pushed on a `(` reduces to an argument there and stops,
    whatever lies below and however deep the block: the new nodes of the mask walks are
    mostly such, and their sets recur at every position."""
    below = node.parent
    if below is None:
        return accepted(rec, node)
    key = (node.state, node.attr, node.ctx, node.depth, below.state, below.attr, below.ctx, below.depth)
    acc = memo.get(key)
    if acc is None:
        top = Node(node.state, Node(below.state, _BOTTOM, below.attr, below.ctx, below.depth, _HIDDEN),
                   node.attr, node.ctx, node.depth, _HIDDEN)
        try:
            acc = accepted(rec, top)
        except _BelowTop:
            acc = -1  # it reads deeper
        memo[key] = acc
    if acc < 0:
        return accepted(rec, node)
    node.acc = acc
    return acc
