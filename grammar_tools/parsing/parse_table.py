"""The tables a recognizer reads: lark's LALR(1) table for one target version, with the guards'
tables (`guards.build_guard_tables`), in the lists and masks the recognizer's hot loops index.

Built once per (grammar, version) when a `Recognizer` is made, never while a request runs;
`Recognizer` (recognizer.py) is this table with the operations on its nodes.
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
from . import guards as G
from .versions import NEWEST, checked


class ParseTable:
    """The parse table of one (grammar, version). Immutable but for `_chains`, the recognizer's
    memo of unit-rule chains (filled as walks meet them).

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
        # per state: the states a shift or a goto enters from it (what a stack may hold)
        self.successors = tuple(
            frozenset(a for a in acts.values() if a >= 0) | frozenset(gotos.values())
            for acts, gotos in zip(self.action, self.goto)
        )
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
        self.ignored = g.ignored  # terminals the parser never sees (spaces, comments)
