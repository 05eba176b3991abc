"""Runs of one terminal that the parser reads the same way each time (`- - - -`, `~ ~ ~`).

A 151k vocabulary has tokens such as `//----------...----\\n` (C-style rulers): after a name
their rows are `// - - ... - _NEWLINE`, up to 80 terminals, and the matcher's trie walk fed
every `-` and asked what comes next at every level (two parser checks a level, three such
chains after a name: ~450 of a mask's ~560 checks).

In the LALR table the second and later unary minuses are a two-step cycle: from the state s
after `-` (`_unary_op: MINUS .`), reading `-` reduces the one-symbol rule `_unary_op -> MINUS`
onto the node below, whose state g goes to g again on `_unary_op`, then shifts `-` into s. Once
a run is in that cycle (the node reached is in s on a node in g on a node in g, each with the
same fields as the one before it, outside comprehensions: `in_cycle`), every further `-` makes
the same two nodes again: what the recognizer reads to feed it, or to say what comes next, is
those nodes' fields and their states, nothing below (`cycles` checks that statically:
one-symbol reductions, guards that read their own node only, no bracket or layout terminal,
no context effects: each node takes its parent's context bits).
So the next terminals are the same after every further `-` of the run, and a row's `-` there
is accepted without feeding it: the matcher walks the rest of the run without parser checks
and feeds the run only where a row leaves it for another terminal (`GrammarMatcher.collect`).
"""

from __future__ import annotations

from grammar_tools.parsing import guards as G
from grammar_tools.parsing.recognizer import TARGET_GUARDS, Node, Recognizer

# guards that read the node they are checked on and nothing below it: its attribute, its context
# bits, `await` outside a comprehension (the function's context bit; `in_cycle` asks for no
# comprehension around)
_OWN_NODE_GUARDS = TARGET_GUARDS | {G.G_CTX, G.G_AWAIT}


def _inherits(rec: Recognizer, state: int) -> bool:
    """A node pushed in `state` takes its parent's context bits (the flows aside)."""
    return rec.ctx_effect[state] is None


def _own_guards(rec: Recognizer, state: int) -> bool:
    """Every guard of the state reads only the node it is checked on."""
    mask = rec.guarded_mask[state]
    return all(rec.guard[state * 1024 + t][0] in _OWN_NODE_GUARDS for t in range(mask.bit_length()) if mask >> t & 1)


def _settled(rec: Recognizer, state: int) -> bool:
    """A state that says what comes next from its own node alone: no reductions, guards that
    read that node only."""
    return not rec.reduce_groups[state] and state != rec.end_state and _own_guards(rec, state)


def cycles(rec: Recognizer) -> dict[tuple[int, int], frozenset[int]]:
    """(s, e) -> the states g of the two-step cycles described in the module doc: s reduces a
    one-symbol rule on e, g goes to g on its left side and shifts e into s."""
    out: dict[tuple[int, int], frozenset[int]] = {}
    layout = {rec.NEWLINE, rec.INDENT, rec.DEDENT, rec.END}
    loops: dict[int, list[int]] = {}  # nonterminal -> the states that go to themselves on it
    for g, row in enumerate(rec.goto):
        for lhs, target in row.items():
            if target == g:
                loops.setdefault(lhs, []).append(g)
    for s, row in enumerate(rec.action):
        if s == rec.end_state or not _inherits(rec, s) or not _own_guards(rec, s):
            continue
        groups = rec.reduce_groups[s]
        if not groups or any(rec.rule_len[r] != 1 for r, _ in groups):
            continue
        for e, a in row.items():
            if a >= 0 or e in layout or e in rec.bracket_delta:
                continue
            lhs = rec.rule_lhs[~a]
            gs = frozenset(
                g for g in loops.get(lhs, ())
                if rec.action[g].get(e) == s and g * 1024 + e not in rec.guard
                and _inherits(rec, g)
                # what comes next after s: its shifts, and after each of its reductions onto g
                and all(_settled(rec, h) and _inherits(rec, h)
                        for h in (rec.goto[g].get(rec.rule_lhs[r]) for r, _ in groups) if h is not None)
            )
            if gs:
                out[(s, e)] = gs
    return out


def _fields(n: Node) -> tuple:
    return n.state, n.attr, n.ctx, n.depth, n.indent


def _scope_settled(rec: Recognizer, node: Node) -> bool:
    """In a comprehension, whether `await` after `node` is decided the same way however many
    nodes the run adds on top: `Recognizer._scope_allows` walks up to the comprehension's
    bracket and reads the nodes nearest the bracket (`_in_own_part`: the last, the one before,
    the fourth or fifth from the end) and whether the path is that long; once the path holds
    five nodes, or its last is no comprehension's element, more nodes on top change nothing
    (what lies beyond the bracket is below the run)."""
    n, length = node, 0
    while n is not None and n.state not in rec.region_open:
        length += 1
        last = n
        n = n.parent
    if n is None:  # a stack started in a context (an f-string's field): the context decides
        return True
    return length >= 5 or (length >= 2 and last.state not in rec.comp_elements)


def in_cycle(table: dict, before: Node, after: Node, e: int, rec: Recognizer | None = None) -> bool:
    """Whether `after` (= feeding `e` from `before`) is in a cycle of `table`: every further
    `e` makes nodes with the same fields on the same states, and the same terminals may follow.
    Inside a comprehension only with the recognizer `rec`, when `await` is settled there
    (`_scope_settled`)."""
    gs = table.get((after.state, e))
    if gs is None or after.state != before.state:
        return False
    below, below_before = after.parent, before.parent
    return (below is not None and below_before is not None and below.parent is below_before
            and below.state in gs and below_before.state == below.state
            and _fields(after) == _fields(before) and _fields(below) == _fields(below_before)
            and (not (after.ctx | below.ctx) & G.COMP or rec is not None and _scope_settled(rec, after)))
