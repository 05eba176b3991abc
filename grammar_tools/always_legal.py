"""`is_always_legal(X, S)`: the seed's "unlimited credit" exploration, over the LALR table.

Whether S is legal after *every* prefix that ends in X is undecidable in general. The seed's
method: run the grammar's pushdown automaton from X with an empty stack, and when a step needs
to pop a stack symbol that isn't there, *borrow* it (every symbol that could be there is a
branch); bound the stack so that the search ends. If every branch reads S, S is always legal
after X.

Here the pushdown automaton is the LALR(1) parser itself (the recognizer's table), so the
answer holds for the parser that checks the rows at run time. A branch is a *frame*: the top
of a parser stack, with nothing known below its bottom entry. It starts from a state that X
leads into. A reduction that pops more than is known borrows: the states below are any states
from which the rule's right side leads to what is known (found by walking the automaton's
transitions backwards; the possible bases are kept as one set per goto target). Every such
path is part of some real parser stack, so the frames cover every real context, and no more
than the automaton allows. Each branch ends in one of:

- ACC: S was read to its end;
- REJ: some step is an error (no action), or *may* be one: a guard of the recognizer that the
  frame can't decide (`return` outside a function, an assignment target below what is known),
  a feature of another Python version, a bracket depth or an indentation that could fail;
- CUT: the borrowing budget ran out (unknown).

`outcome(context, seq)` is the set of endings over all branches. ACC alone: S is always legal
(sound: every real context is covered and nothing uncertain happens). REJ alone (or nothing):
S is never legal (sound as well: a real accepting context would be a branch that ends in ACC).
The search stops as soon as the answer can't be either (ACC together with REJ or CUT).

The recognizer's own bookkeeping is followed where a frame knows it: each entry carries the
bracket depths it can have (zero, positive: a fixpoint over the automaton, refined on the way)
and the guard attribute of its node (`guards.py`: a valid target, a single target...) when
computed from known entries, so that `x =` after a name is known to pass the target guard.
Python's layout is part of the parser: a `_NEWLINE` is dropped inside brackets, and a line's
indentation is fed as `_INDENT`/`_DEDENT`s (see `contexts`).

`signature(frames, S)` goes one step further (`are_jointly_legal`): over frames refined by
making a few more stack entries known, two sequences whose outcomes agree frame by frame, each
frame deciding them, are legal after exactly the same prefixes.
"""

from __future__ import annotations

import functools
import heapq
from dataclasses import dataclass

from .contexts import AFTER, Context, Layout
from .grammar import BRACKET_CLOSE, BRACKET_OPEN, END, Grammar

ACC, REJ, CUT = 1, 2, 4
D0, DP = 1, 2  # bracket depth zero / positive
UNKNOWN = -1  # an attribute that the frame doesn't know
UNKNOWN_NO_AS = -2  # ... but known not to carry HAS_AS
NOT_SINGLE = -3  # unknown, but not a single target (a tuple, a list, a starred target)
NOT_SINGLE_NO_AS = -4  # ... and not carrying HAS_AS
MAY_HAVE_AS = (UNKNOWN, NOT_SINGLE)
DEFAULT_BUDGET = 20  # borrowings per terminal fed
MAX_DEDENTS = 4  # dedents an indentation may stand for before the search gives up

# attribute rules (the recognizer's `_reduce`); NONE: attributes are not tracked
A_NONE, A_CONST, A_PASS, A_GROUP, A_STAR_EXPR, A_PARTIAL, A_COMPLETE = range(7)


@dataclass(frozen=True)
class Semantics:
    """What the run-time parser adds to the bare LALR table."""

    uncertain: frozenset[int]  # state * 1024 + terminal: decided by something unknown here
    target_guards: dict  # state * 1024 + terminal -> guard code on the top node's attribute
    rule_attr: tuple  # per rule: (A_* kind, constant)
    may_has_as: frozenset[str]  # symbols whose node may carry HAS_AS
    may_as_item: frozenset[str]  # symbols whose node may carry AS_ITEM
    with_colon: frozenset[int]
    colon: int
    opens: frozenset[int]
    closes: frozenset[int]
    bits: dict  # the attribute bits of guards.py that the checks use
    # state * 1024 + terminal -> (guard, removed by some version): every check that the
    # recognizer makes before acting on a terminal, whichever version (see `same_acceptance`)
    step_checks: dict = None
    # the states that the parent of a node carrying HAS_AS can be in (None: not known), see
    # `has_as_parent_states`
    has_as_parents: frozenset | None = None

    @classmethod
    def plain(cls, grammar: Grammar) -> "Semantics":
        """A plain LALR parser (toy grammars): no guards, no attributes."""
        return cls(
            frozenset(), {}, tuple((A_NONE, 0) for _ in grammar.rules), frozenset(), frozenset(),
            frozenset(), -1, frozenset(), frozenset(), {}, {},
        )

    @classmethod
    def of_recognizer(cls, grammar: Grammar) -> "Semantics":
        """The Python recognizer of `recognizer.py` for *any* Python version and with or
        without semantic checks: guards on attributes are evaluated where the frame knows the
        attribute, every other guard and every action some version removes is uncertain."""
        from . import guards as G

        gt = G.build_guard_tables(grammar, (3, 0))  # the oldest version removes the most
        target_codes = {G.G_TARGET, G.G_SINGLE, G.G_DEL}
        uncertain = {s * 1024 + t for s, t in gt.removed}
        target_guards = {}
        for (s, t), (code, _) in gt.guards.items():
            if code in target_codes:
                target_guards[s * 1024 + t] = code
            else:
                uncertain.add(s * 1024 + t)
        kind_map = {
            G.CONST: A_CONST, G.PASS: A_PASS, G.GROUP: A_GROUP, G.STAR_EXPR: A_STAR_EXPR,
            G.LIST_PARTIAL: A_PARTIAL, G.LIST_COMPLETE: A_COMPLETE,
        }
        rule_attr = tuple(
            (kind_map.get(k, A_NONE), c) for k, c in zip(gt.rule_kind, gt.rule_const)
        )
        # which nonterminals may carry HAS_AS (a fixpoint over the attribute rules)
        may_as_item: set[str] = set()
        may_has_as: set[str] = set()
        changed = True
        while changed:
            changed = False
            for r, rule in enumerate(grammar.rules):
                kind, const = rule_attr[r]
                kids_item = any(s in may_as_item for s in rule.rhs)
                item = has = False
                if kind in (A_CONST,):
                    item, has = bool(const & G.AS_ITEM), bool(const & G.HAS_AS)
                elif kind == A_PASS:
                    item, has = rule.rhs[0] in may_as_item, rule.rhs[0] in may_has_as
                elif kind == A_PARTIAL:
                    item = kids_item
                elif kind == A_COMPLETE:
                    has = kids_item
                elif kind == A_NONE:
                    item = has = True
                if item and rule.lhs not in may_as_item:
                    may_as_item.add(rule.lhs)
                    changed = True
                if has and rule.lhs not in may_has_as:
                    may_has_as.add(rule.lhs)
                    changed = True
        tid = grammar.term_id
        bits = {
            "G_TARGET": G.G_TARGET, "G_SINGLE": G.G_SINGLE, "G_DEL": G.G_DEL,
            "TARGET": G.TARGET, "SINGLE": G.SINGLE, "STAR": G.STAR, "STARRED": G.STARRED,
            "HAS_STAR": G.HAS_STAR, "HAS_AS": G.HAS_AS, "AS_ITEM": G.AS_ITEM,
        }
        return cls(
            uncertain=frozenset(uncertain),
            target_guards=target_guards,
            rule_attr=rule_attr,
            may_has_as=frozenset(may_has_as),
            may_as_item=frozenset(may_as_item),
            with_colon=gt.with_colon_states,
            colon=tid.get("COLON", -1),
            opens=frozenset(tid[n] for n in BRACKET_OPEN if n in tid),
            closes=frozenset(tid[n] for n in BRACKET_CLOSE if n in tid),
            bits=bits,
            has_as_parents=has_as_parent_states(grammar, gt, frozenset(may_as_item)),
            step_checks={
                s * 1024 + t: (gt.guards.get((s, t)), (s, t) in gt.removed)
                for s, t in set(gt.guards) | set(gt.removed)
            },
        )


def has_as_parent_states(grammar: Grammar, gt, may_as_item: frozenset) -> frozenset | None:
    """The states that the parent of a node carrying HAS_AS (a parenthesized `x as y` tuple)
    can be in, shown from the rules and the guard tables: the states entered by `WITH`.
    None if the rules don't show it.

    Why: HAS_AS is made only by a rule that starts with `(` (the tuple's node replaces the
    `(` and what follows, so its parent is the `(`'s parent), from children that carry
    AS_ITEM, made only by `x as y` rules; a PASS rule keeps its child's parent. The `as` of
    such an item is shifted only where the guard G_AS_IN_WITH finds, among the nodes below,
    a first `(` whose parent is a `WITH`. If no rule on the way from the tuple's `(` down to
    the item has a `(` of its own, that first `(` is the tuple's: its parent, the tuple's
    parent, is a `WITH` state."""
    from . import guards as G

    lpar = "LPAR"
    # the symbols all of whose rules make an `x as y` item
    by_lhs: dict[str, list[int]] = {}
    for r, rule in enumerate(grammar.rules):
        by_lhs.setdefault(rule.lhs, []).append(r)
    items = {
        lhs for lhs, rs in by_lhs.items()
        if all(gt.rule_kind[r] == G.CONST and gt.rule_const[r] & G.AS_ITEM for r in rs)
    }
    for r, rule in enumerate(grammar.rules):
        kind, const = gt.rule_kind[r], gt.rule_const[r]
        carries = any(sym in may_as_item for sym in rule.rhs)
        makes_has_as = (kind == G.CONST and const & G.HAS_AS) or (kind == G.LIST_COMPLETE and carries)
        if makes_has_as and (rule.rhs[:1] != (lpar,) or lpar in rule.rhs[1:]):
            return None
        if kind == G.CONST and const & G.HAS_AS and not any(sym in items for sym in rule.rhs):
            return None  # a constant HAS_AS needs an `x as y` item inside
        makes_item = (kind == G.CONST and const & G.AS_ITEM) or (
            kind in (G.PASS, G.LIST_PARTIAL) and rule.lhs in may_as_item
        )
        if makes_item and lpar in rule.rhs:
            return None
        if kind == G.CONST and const & G.AS_ITEM:
            if "AS" not in rule.rhs:
                return None
            d = rule.rhs.index("AS")
            # every state that shifts this `as` checks the guard
            for s_, kernel in enumerate(grammar.kernels):
                if any(grammar.rules[k] is rule and dd == d for k, dd in kernel):
                    if gt.guards.get((s_, grammar.term_id["AS"])) != (G.G_AS_IN_WITH, 0):
                        return None
        if kind not in (G.CONST, G.PASS, G.LIST_PARTIAL, G.LIST_COMPLETE, G.GROUP, G.STAR_EXPR):
            return None
        if kind == G.PASS and len(rule.rhs) != 1:
            return None
    return frozenset(s for s, sym in enumerate(accessing_symbols(grammar)) if sym == "WITH")


def accessing_symbols(grammar: Grammar) -> list[str]:
    """The symbol that leads into each LALR state ("" for the start state)."""
    out = []
    for kernel in grammar.kernels:
        syms = {grammar.rules[r].rhs[d - 1] for r, d in kernel if d > 0}
        out.append(syms.pop() if len(syms) == 1 else "")
    return out


_ANY = "any"  # a frame about which nothing is known: (_ANY, depths)


class Explorer:
    """Unlimited-credit exploration of one grammar's LALR parser; results are memoized.

    A frame is a tuple of entries (state, depths, attribute), bottom first; the bottom state
    may be a frozenset (borrowed: one of them). `(_ANY, depths)` is a frame with nothing known.
    """

    def __init__(self, grammar: Grammar, semantics: Semantics | None = None, budget: int = DEFAULT_BUDGET):
        self.grammar = grammar
        self.sem = sem = semantics or Semantics.plain(grammar)
        self.budget = budget
        self.layout = lay = Layout.of(grammar)
        self.T = grammar.n_terminals
        self.action = grammar.action
        nts = {n: i for i, n in enumerate(grammar.nonterminals)}
        self.goto = [{nts[n]: s for n, s in row.items()} for row in grammar.goto]
        self.rule_len = [len(r.rhs) for r in grammar.rules]
        self.rule_lhs = [nts[r.lhs] for r in grammar.rules]
        self.rules = grammar.rules
        acc = accessing_symbols(grammar)
        self.accessing = acc
        self.is_nt = [bool(sym) and sym not in grammar.term_id for sym in acc]
        self.maybe_as = [sym in sem.may_has_as for sym in acc]
        n = grammar.n_states
        preds: list[list[int]] = [[] for _ in range(n)]
        for p in range(n):
            for a in grammar.action[p].values():
                if a >= 0:
                    preds[a].append(p)
            for s in grammar.goto[p].values():
                preds[s].append(p)
        self.preds = [sorted(set(x)) for x in preds]
        self.states_after: dict[int, list[int]] = {}
        tid = grammar.term_id
        for s, sym in enumerate(acc):
            if sym in tid:
                self.states_after.setdefault(tid[sym], []).append(s)
        self._layout_terms = {lay.newline, lay.indent, lay.dedent} - {-1}
        # bracket depths each state can be entered at (a fixpoint)
        poss = [0] * n
        poss[grammar.start_state] = D0
        changed = True
        while changed:
            changed = False
            for p in range(n):
                fp = poss[p]
                if not fp:
                    continue
                for t, a in grammar.action[p].items():
                    if a >= 0:
                        f = self._shift_depth(fp, t, None)
                        if f & ~poss[a]:
                            poss[a] |= f
                            changed = True
                for s in grammar.goto[p].values():
                    if fp & ~poss[s]:
                        poss[s] |= fp
                        changed = True
        self.poss = poss
        self._memo: dict = {}
        self._feed_memo: dict = {}
        self._adv_memo: dict = {}
        self._alike_memo: dict = {}
        self._has_as = sem.bits.get("HAS_AS", 0)
        self.stats = {"runs": 0, "memo_hits": 0, "borrows": 0}

    def _shift_depth(self, df: int, t: int, target: int | None) -> int:
        """Depths after shifting terminal t from depths df (into state `target`)."""
        sem = self.sem
        if t in sem.opens:
            return DP
        if t in sem.closes:
            if not df & DP:
                return 0
            return (D0 | DP) if target is None else self.poss[target]
        if t in self._layout_terms:
            return df & D0
        return df

    # ---------------------------------------------------------------- public

    def outcome(self, context: Context, seq: tuple[int, ...]) -> int:
        """The set (ACC | REJ | CUT bits) of endings of all branches; see the module doc."""
        seq = tuple(seq)
        res = 0
        for frame in self.start_frames(context):
            res |= self._run(frame, seq)
            if _decided_mixed(res):
                break
        return res

    def is_always_legal(self, context: Context, seq) -> bool:
        return self.outcome(context, seq) == ACC

    def is_never_legal(self, context: Context, seq) -> bool:
        """True only when no branch can read `seq` (sound; `never_legal` decides exactly)."""
        return self.outcome(context, seq) & ~REJ == 0

    def extension_outcome(self, context: Context, prefix, suffix) -> int:
        """The endings of `suffix` over the branches that have read `prefix` after `context`
        (ACC alone: wherever `prefix` is legal, `prefix + suffix` is too)."""
        frames = self.frames_after(context, prefix)
        res = 0
        for f in frames:
            res |= self._run(f, tuple(suffix))
            if _decided_mixed(res):
                break
        return res

    def frames_after(self, context: Context, prefix) -> tuple:
        """The frames of the branches that read `prefix` after `context`."""
        frames = tuple(self.start_frames(context))
        for e in prefix:
            nxt: dict = {}
            for f in frames:
                for f2 in self.advance(f, e)[0]:
                    nxt[f2] = None
            frames = tuple(nxt)
        return frames

    def covering_frames(self, context: Context, prefix) -> tuple | None:
        """The frames after reading `prefix` after `context`, when together they stand for
        every stack on which the parser has read it (no branch was cut: None otherwise)."""
        frames = tuple(self.start_frames(context))
        for e in prefix:
            nxt: dict = {}
            for f in frames:
                got, bad = self.advance(f, e)
                if bad & CUT:
                    return None
                for f2 in got:
                    nxt[f2] = None
            frames = tuple(nxt)
        return frames

    def same_acceptance(self, frame, a: int, b: int, rest=(), refine: int = 0) -> bool:
        """Sound: True means that on every stack `frame` stands for, the recognizer accepts
        (a,) + rest exactly when it accepts (b,) + rest (any Python version, guards on).

        a and b are fed *in lockstep* on the same stack: as long as the recognizer does the
        same thing for both (the same checks, then both errors, both the same reduction, or
        both a shift alike), their runs agree whatever lies below the frame. Where they part,
        the exploration must decide both ways on that frame: both always or both never
        accepted; if it can't, the frame there is refined (`refine` times at most: one more
        stack entry made known, see `refine`) and each refined frame is compared the same way.
        Unlike `signature`, the stack below the point where they part needn't be known: a
        reduction chain that pops deep into the stack is followed for both at once."""
        if a == b:
            return True
        lay = self.layout
        layout = self._layout_terms | {self.grammar.term_id.get(END, -1)}
        if a in layout or b in layout or lay.is_indentation(a) or lay.is_indentation(b):
            return self._decided_alike(frame, (a,) + tuple(rest), (b,) + tuple(rest))
        if frame[0] == _ANY:
            return self._decided_alike(frame, (a,) + tuple(rest), (b,) + tuple(rest)) or all(
                self.same_acceptance(f, a, b, rest, refine) for f in self.any_top(frame[1])
            )
        sem = self.sem
        checks = sem.step_checks or {}
        closes, opens = sem.closes, sem.opens
        brackets_alike = (a in closes) == (b in closes) and (not rest or (a in opens) == (b in opens))
        work = [(-self.budget, 0, frame)]
        done: set = set()
        tick = 0
        while work:
            nb, _, fr = heapq.heappop(work)
            if fr in done:
                continue
            done.add(fr)
            budget = -nb
            st = fr[-1][0]
            ka, kb = st * 1024 + a, st * 1024 + b
            act_a, act_b = self.action[st].get(a), self.action[st].get(b)
            if checks.get(ka) == checks.get(kb):
                if act_a is None and act_b is None:
                    continue  # both errors
                if act_a is not None and act_b is not None:
                    if act_a >= 0 and act_b >= 0:
                        colon_alike = sem.colon not in (a, b) or st not in sem.with_colon
                        if brackets_alike and colon_alike and (not rest or act_a == act_b):
                            continue  # shifted alike (into the same state if more follows)
                    elif act_a == act_b:  # the same reduction
                        r = ~act_a
                        if self.rule_len[r] >= len(fr):
                            if budget <= 0:
                                return False
                            budget -= 1
                        for f2 in self._reduced(fr, r):
                            if f2 not in done:
                                tick += 1
                                heapq.heappush(work, (-budget, tick, f2))
                        continue
            if not self._decided_alike(fr, (a,) + tuple(rest), (b,) + tuple(rest)):
                if not all(self._decided_alike(f2, (a,) + tuple(rest), (b,) + tuple(rest)) for f2 in self.with_known_attribute(fr)) and (
                    not refine or not all(
                    self.same_acceptance(f2, a, b, rest, refine - 1) for f2 in self.refine([fr], 1)
                )):
                    return False
        return True

    def with_known_attribute(self, frame) -> list:
        """The frame split by the attribute of its top entry, where the frame doesn't know it:
        one frame per value of the attribute bits that the checks read (together they stand
        for the same stacks; each decides the guards on the top node)."""
        top, df, at = frame[-1]
        if at >= 0:
            return [frame]
        names = ("TARGET", "SINGLE", "STAR", "STARRED", "HAS_STAR", "AS_ITEM")
        if at in (NOT_SINGLE, NOT_SINGLE_NO_AS):
            names = tuple(n for n in names if n != "SINGLE")
        if at in MAY_HAVE_AS:
            names += ("HAS_AS",)
        bits = [self.sem.bits[n] for n in names if n in self.sem.bits]
        if not bits:
            return [frame]
        has_as = self.sem.bits.get("HAS_AS", 0)
        parents = self.sem.has_as_parents
        below_as = frame[:-1]
        if parents is not None and len(frame) > 1:
            # a node with HAS_AS sits on a WITH state: keep only those below it
            bs, bdf, ba = frame[-2]
            keep = ({bs} if isinstance(bs, int) else set(bs)) & parents
            if not keep:
                below_as = None
            else:
                below_as = frame[:-2] + ((min(keep) if len(keep) == 1 else frozenset(keep), bdf, ba),)
        out = []
        for k in range(1 << len(bits)):
            v = sum(bit for i, bit in enumerate(bits) if k >> i & 1)
            if v & has_as:
                if below_as is not None:
                    out.append(below_as + ((top, df, v),))
            else:
                out.append(frame[:-1] + ((top, df, v),))
        return out

    def accepted_alike_after(self, context: Context, s1, s2) -> bool:
        """Sound: True means that after every prefix of `context`, s1 is legal exactly when
        s2 is (`accepted_alike` on every start frame)."""
        return all(self.accepted_alike(f, s1, s2) for f in self.start_frames(context))

    def accepted_alike(self, frame, u, v) -> bool:
        """Sound: True means that on every stack `frame` stands for, the recognizer accepts
        the sequence u exactly when it accepts v (any Python version, guards on).

        Both are fed *in lockstep* on the same stack. A common first element is read once
        (every branch then compares the rests). Different first terminals a, b: as long as
        the recognizer does the same for both (the same checks, then both errors, or the same
        reduction), their runs are one run, whatever lies below the frame; when both shift
        alike (into the same state, the same bracket depth), the rests are compared from
        there. Where they part otherwise, the exploration must decide both ways on that
        frame: both always or both never accepted. Unlike `signature`, the stack below the
        point where they part needn't be known: a reduction chain that pops deep into the
        stack is followed for both at once. Memoized."""
        key = (frame, tuple(u), tuple(v))
        hit = self._alike_memo.get(key)
        if hit is None:
            hit = self._alike_memo[key] = self._accepted_alike(frame, key[1], key[2])
        return hit

    def _accepted_alike(self, frame, u: tuple, v: tuple) -> bool:
        if u == v:
            return True
        if not u or not v:
            return self._decided_alike(frame, u, v)
        if frame[0] == _ANY:
            return self._decided_alike(frame, u, v) or (
                u[0] != v[0] and all(self.accepted_alike(f, u, v) for f in self.any_top(frame[1]))
            )
        if u[0] == v[0]:
            got, bad = self.advance(frame, u[0])
            if bad & CUT:  # some stacks are not covered by `got`
                return self._decided_alike(frame, u, v)
            return all(self.accepted_alike(f, u[1:], v[1:]) for f in got)
        a, b = u[0], v[0]
        lay = self.layout
        special = self._layout_terms | {self.grammar.term_id.get(END, -1)}
        if a in special or b in special or lay.is_indentation(a) or lay.is_indentation(b):
            return self._decided_alike(frame, u, v)
        sem = self.sem
        checks = sem.step_checks or {}
        closes, opens = sem.closes, sem.opens
        more = len(u) > 1 or len(v) > 1
        brackets_alike = (a in closes) == (b in closes) and (not more or (a in opens) == (b in opens))
        work = [(-self.budget, 0, frame)]
        done: set = set()
        tick = 0
        while work:
            nb, _, fr = heapq.heappop(work)
            if fr in done:
                continue
            done.add(fr)
            budget = -nb
            st, df, _ = fr[-1]
            act_a, act_b = self.action[st].get(a), self.action[st].get(b)
            if checks.get(st * 1024 + a) == checks.get(st * 1024 + b):
                if act_a is None and act_b is None:
                    continue  # both errors
                if act_a is not None and act_b is not None:
                    if act_a >= 0 and act_b >= 0:
                        colon_alike = sem.colon not in (a, b) or st not in sem.with_colon
                        if brackets_alike and colon_alike and (not more or act_a == act_b):
                            if not more:
                                continue  # both shifted
                            depth = self._shift_depth(df, a, act_a)
                            if depth and not self.accepted_alike(fr + ((act_a, depth, 0),), u[1:], v[1:]):
                                return False
                            continue
                    elif act_a == act_b:  # the same reduction
                        r = ~act_a
                        if self.rule_len[r] >= len(fr):
                            if budget <= 0:
                                return self._decided_alike(frame, u, v)
                            budget -= 1
                        for f2 in self._reduced(fr, r):
                            if f2 not in done:
                                tick += 1
                                heapq.heappush(work, (-budget, tick, f2))
                        continue
            if not self._decided_alike(fr, u, v) and not all(
                self._decided_alike(f2, u, v) for f2 in self.with_known_attribute(fr)
            ):
                return False
        return True

    def any_top(self, depths: int) -> list:
        """The frames of one known entry that together stand for every stack at `depths`
        (the `_ANY` frame) that rows are checked on: between two lexemes the parser has just
        shifted a terminal (its node carries no attribute) or read nothing yet, so one frame
        per state that a terminal leads into, and the start state."""
        tid = self.grammar.term_id
        out = []
        for s in range(len(self.poss)):
            d = self.poss[s] & depths
            if d and (self.accessing[s] in tid or s == self.grammar.start_state):
                out.append(((s, d, 0),))
        return out

    def _decided_alike(self, frame, s1, s2) -> bool:
        """Both sequences always accepted on `frame`, or both never."""
        o1 = self._run(frame, tuple(s1))
        if o1 != ACC and o1 & ~REJ:
            return False
        o2 = self._run(frame, tuple(s2))
        return o1 == o2 == ACC or (o1 & ~REJ == 0 and o2 & ~REJ == 0)

    def start_frames(self, context: Context) -> list:
        lay = self.layout
        if context.kind == AFTER:
            return [((s, self.poss[s], 0),) for s in self.states_after.get(context.terminal, [])]
        if context.kind == "any":
            return [(_ANY, D0 | DP)]
        # after a newline: fed at depth zero, dropped inside brackets (then nothing is known)
        fed = [lay.newline] if context.kind == "newline" else [lay.newline, lay.indent, lay.dedent]
        out = [((s, D0, 0),) for t in fed for s in self.states_after.get(t, []) if self.poss[s] & D0]
        out.append((_ANY, DP))
        return out

    def refined_frames(self, context: Context, depth: int = 1) -> tuple:
        """The start frames of `context` with `depth` more stack entries made known (see
        `refine`)."""
        return self.refine(self.start_frames(context), depth)

    def refine(self, frames, depth: int = 1) -> tuple:
        """The frames with `depth` more stack entries made known below each: one frame per
        path into its bottom state (a borrowed set of states splits into its members first).
        Together they stand for the same contexts, but each for fewer, so that outcomes split
        less (see `signature`)."""
        frames = tuple(frames)
        for _ in range(depth):
            out = []
            for f in frames:
                if f[0] == _ANY:
                    out.append(f)
                    continue
                bottom, bd, ba = f[0]
                for x in [bottom] if isinstance(bottom, int) else sorted(bottom):
                    if not self.preds[x]:
                        out.append(((x, bd & self.poss[x] or bd, ba),) + f[1:])
                        continue
                    for p in self.preds[x]:
                        g = self._redepth(((p, self.poss[p], UNKNOWN), (x, self.poss[x], ba)) + f[1:])
                        if g is not None:
                            out.append(g)
            frames = tuple(dict.fromkeys(out))
        return frames

    def _redepth(self, frame):
        """The frame with depths recomputed upward from its bottom (None: inconsistent)."""
        out = [frame[0]]
        df = frame[0][1]
        for s, d, a in frame[1:]:
            sym = self.accessing[s]
            t = self.grammar.term_id.get(sym)
            nd = (self._shift_depth(df, t, s) if t is not None else df) & self.poss[s] & d
            if not nd:
                return None
            out.append((s, nd, a))
            df = nd
        return tuple(out)

    def signature(self, frames, seq) -> tuple | None:
        """Per frame: True (every context of the frame accepts `seq`) or False (none does);
        None if some frame is undecided. Two sequences with the same signature over frames
        that cover a context are legal in exactly the same prefixes (`are_jointly_legal`)."""
        out = []
        seq = tuple(seq)
        for f in frames:
            o = self._run(f, seq)
            if o == ACC:
                out.append(True)
            elif o & ~REJ == 0:
                out.append(False)
            else:
                return None
        return tuple(out)

    # ---------------------------------------------------------------- search

    def _run(self, frame, seq: tuple[int, ...]) -> int:
        if not seq:
            return ACC
        key = (frame, seq)
        memo = self._memo
        r = memo.get(key)
        if r is not None:
            self.stats["memo_hits"] += 1
            return r
        self.stats["runs"] += 1
        frames, res = self.advance(frame, seq[0])
        rest = seq[1:]
        for f in frames:
            if _decided_mixed(res):
                break
            res |= self._run(f, rest)
        memo[key] = res
        return res

    def advance(self, frame, e: int):
        """All ways of reading one element from `frame`: (the frames after it, the endings
        of the branches that can't read it). Memoized."""
        key = (frame, e)
        hit = self._adv_memo.get(key)
        if hit is None:
            hit = self._adv_memo[key] = self._advance(frame, e)
        return hit

    def _advance(self, frame, e: int):
        lay = self.layout
        if frame[0] == _ANY:
            return self._advance_any(frame[1], e)
        if not (lay.is_indentation(e) or e == lay.newline):
            return self._feed(frame, e)
        top, df, at = frame[-1]
        out = []
        bad = 0
        if df & DP:  # inside brackets: nothing
            out.append(frame[:-1] + ((top, DP, at),))
        if not df & D0:
            return tuple(out), bad
        f0 = frame[:-1] + ((top, D0, at),)
        if e == lay.newline:
            got, bad = self._feed(f0, e)
            return tuple(out) + got, bad
        # an indentation: an error, the same level, one INDENT or some DEDENTs
        bad |= REJ
        out.append(f0)
        got, b2 = self._feed(f0, lay.indent)
        out.extend(got)
        bad |= b2
        cur = [f0]
        for _ in range(MAX_DEDENTS):
            nxt = []
            for f in cur:
                got, b2 = self._feed(f, lay.dedent)
                bad |= b2
                nxt.extend(got)
            out.extend(nxt)
            cur = nxt
            if not cur:
                break
        else:
            bad |= CUT
        return tuple(dict.fromkeys(out)), bad

    def _advance_any(self, df: int, e: int):
        """The first element after an unknown prefix (depths `df` possible)."""
        lay = self.layout
        bad = REJ  # some prefix rejects it (and for a layout element, some indentation)
        out = []
        if lay.is_indentation(e) or e == lay.newline:
            # inside brackets both are nothing; an indentation may also keep the level
            keep = df if lay.is_indentation(e) else df & DP
            if keep:
                out.append((_ANY, keep))
            if df & D0:
                fed = [lay.newline] if e == lay.newline else [lay.indent, lay.dedent]
                for t in fed:
                    for s in self.states_after.get(t, []):
                        if self.poss[s] & D0:
                            out.append(((s, D0, 0),))
            return tuple(out), bad
        for s in self.states_after.get(e, []):
            f = self._shift_depth(df, e, s) & self.poss[s]
            if f:
                out.append(((s, f, 0),))
        return tuple(out), bad

    def _feed(self, frame, t: int):
        """All ways of feeding terminal t: (frames after its shift, endings that failed).
        Memoized on (frame, t): sequences that share a prefix share the work."""
        key = (frame, t)
        hit = self._feed_memo.get(key)
        if hit is not None:
            return hit
        got, bad = self._feed_uncached(frame, t)
        r = self._feed_memo[key] = (tuple(dict.fromkeys(got)), bad)
        return r

    def _attr_ok(self, code: int, attr: int) -> bool:
        b = self.sem.bits
        if code == b["G_TARGET"]:
            return bool(attr & b["TARGET"])
        if code == b["G_SINGLE"]:
            return bool(attr & b["SINGLE"])
        # G_DEL
        return bool(attr & b["TARGET"]) and not attr & (b["STAR"] | b["STARRED"])

    def _feed_uncached(self, frame, t: int):
        sem = self.sem
        action = self.action
        uncertain = sem.uncertain
        target_guards = sem.target_guards
        has_as = sem.bits.get("HAS_AS", 0)
        out = []
        bad = 0
        # frames by remaining budget, highest first: each frame is expanded once, with the
        # most budget any path leaves it, so the result doesn't depend on the search order
        # (nor on how the LALR states happen to be numbered)
        work = [(-self.budget, 0, frame)]
        done: set = set()
        tick = 0
        while work:
            nb, _, fr = heapq.heappop(work)
            if fr in done:
                continue
            done.add(fr)
            b = -nb
            st, df, at = fr[-1]
            a = action[st].get(t)
            if a is None:
                bad |= REJ
                continue
            k = st * 1024 + t
            if k in uncertain:
                bad |= REJ
            code = target_guards.get(k)
            if code is not None:
                if at < 0:
                    bad |= REJ
                    if code == self.sem.bits.get("G_SINGLE") and at in (NOT_SINGLE, NOT_SINGLE_NO_AS):
                        continue  # known to fail
                elif not self._attr_ok(code, at):
                    bad |= REJ
                    continue
            if a >= 0:
                if at >= 0:
                    as_flag = at & has_as
                else:
                    as_flag = at in MAY_HAVE_AS and self.maybe_as[st]
                if as_flag and not (t == sem.colon and st in sem.with_colon):
                    bad |= REJ
                    if at >= 0:
                        continue
                if t in sem.closes and df & D0:
                    bad |= REJ  # at depth zero a closing bracket is an error
                if t == self.layout.dedent:
                    bad |= REJ  # the indentation stack may be empty
                f = self._shift_depth(df, t, a)
                if not f:
                    continue
                out.append(fr + ((a, f, 0),))
                continue
            r = ~a
            if self.rule_len[r] >= len(fr):  # it borrows what lies below the known part
                if b <= 0:
                    bad |= CUT
                    continue
                b -= 1
                self.stats["borrows"] += 1
            for f2 in self._reduced(fr, r):
                if f2 not in done:
                    tick += 1
                    heapq.heappush(work, (-b, tick, f2))
        return out, bad

    def _reduced(self, fr, r: int) -> list:
        """The frames after reducing rule r on frame `fr`: one, or, where the rule pops more
        than the frame knows (or reaches its borrowed bottom), one per goto target of the
        states that can lie below (found by walking the rule's right side backwards)."""
        goto = self.goto
        n = self.rule_len[r]
        lhs = self.rule_lhs[r]
        if n < len(fr):
            base = fr[: len(fr) - n]
            attr = self._reduce_attr(r, fr[len(fr) - n :])
            bs, bdf, _ = base[-1]
            if isinstance(bs, int):
                if not self._may_hold(bs, attr):
                    return []
                g = goto[bs].get(lhs)
                return [base + ((g, bdf, attr),)] if g is not None else []
            # the borrowed bottom: one branch per goto target
            bs = {x for x in bs if self._may_hold(x, attr)}
            return [f2[:-1] + ((f2[-1][0], f2[-1][1], attr),) for f2 in self._split(bs, lhs)]
        rhs = self.rules[r].rhs
        attr = self._reduce_attr(r, ((None, 0, UNKNOWN),) * (n - len(fr)) + fr)
        bottom = fr[0][0]
        cands = {bottom} if isinstance(bottom, int) else set(bottom)
        for i in range(n - len(fr) - 1, -1, -1):
            sym = rhs[i]
            cands = {x for c in cands for x in self.preds[c] if self.accessing[x] == sym}
        bases = {x for c in cands for x in self.preds[c] if self._may_hold(x, attr)}
        return [f2[:-1] + ((f2[-1][0], f2[-1][1], attr),) for f2 in self._split(bases, lhs)]

    def _may_hold(self, base: int, attr: int) -> bool:
        """Whether a node with attribute `attr` can be pushed on a node in state `base`: one
        carrying HAS_AS only on a WITH state (`has_as_parent_states`)."""
        parents = self.sem.has_as_parents
        return parents is None or attr < 0 or not attr & self._has_as or base in parents

    def _reduce_attr(self, r: int, children) -> int:
        """The attribute of the node that reducing rule r makes from `children` (entries,
        bottom first), as the recognizer's `_reduce` computes it; UNKNOWN / UNKNOWN_NO_AS
        where it depends on what the frame doesn't know."""
        kind, const = self.sem.rule_attr[r]
        if kind == A_CONST:
            return const
        if kind == A_NONE:
            return UNKNOWN
        b = self.sem.bits
        rhs = self.rules[r].rhs
        if kind == A_PASS:
            a = children[-1][2]
            if a in MAY_HAVE_AS and rhs[-1] not in self.sem.may_has_as:
                return UNKNOWN_NO_AS if a == UNKNOWN else NOT_SINGLE_NO_AS
            return a
        if kind == A_GROUP:
            a = children[-2][2]
            if a in (NOT_SINGLE, NOT_SINGLE_NO_AS):
                return NOT_SINGLE_NO_AS
            return UNKNOWN_NO_AS if a < 0 else a & (b["TARGET"] | b["SINGLE"])
        if kind == A_STAR_EXPR:
            a = children[-1][2]
            if a < 0:
                return NOT_SINGLE_NO_AS  # STAR or nothing
            return b["STAR"] if a & b["TARGET"] and not a & b["STAR"] else 0
        # lists: the nonterminal children's attributes
        all_target = True
        stars = 0
        as_item = 0
        unknown = False
        item_possible = False
        terms = self.grammar.term_id
        for sym, (_, _, a) in zip(rhs, children):
            if sym in terms:
                continue
            if a < 0:
                unknown = True
                item_possible |= sym in self.sem.may_as_item
                continue
            if not a & (b["TARGET"] | b["STAR"]):
                all_target = False
            if a & b["STAR"]:
                stars += 1
            if a & b["HAS_STAR"]:
                stars += 1
            as_item |= a & b["AS_ITEM"]
        if unknown:
            if kind == A_COMPLETE and (item_possible or as_item):
                return NOT_SINGLE
            return NOT_SINGLE_NO_AS  # a list's attribute has no SINGLE
        if kind == A_PARTIAL:
            attr = as_item
        else:
            attr = b["HAS_AS"] if as_item else 0
        if all_target and stars <= 1:
            attr |= b["TARGET"]
        if stars:
            attr |= b["HAS_STAR"] if kind == A_PARTIAL else b["STARRED"]
        return attr

    def _split(self, bases, lhs: int) -> list:
        """Frames (bases, goto) for a set of possible base states, grouped by goto target."""
        by_goto: dict[int, list[int]] = {}
        for x in bases:
            g = self.goto[x].get(lhs)
            if g is not None:
                by_goto.setdefault(g, []).append(x)
        out = []
        for g, xs in sorted(by_goto.items()):
            fl = 0
            for x in xs:
                fl |= self.poss[x]
            bottom = xs[0] if len(xs) == 1 else frozenset(xs)
            out.append(((bottom, fl, UNKNOWN), (g, fl, UNKNOWN)))
        return out


def _decided_mixed(res: int) -> bool:
    """Neither always nor never can come out of this any more."""
    return bool(res & ACC) and bool(res & (REJ | CUT))


@functools.lru_cache(maxsize=8)
def explorer(grammar: Grammar, python: bool = True, budget: int = DEFAULT_BUDGET) -> Explorer:
    """The explorer of a grammar; `python`: with the recognizer's guards and layout rules."""
    sem = Semantics.of_recognizer(grammar) if python else Semantics.plain(grammar)
    return Explorer(grammar, sem, budget)


def is_always_legal(grammar: Grammar, x, seq, python: bool = True) -> bool:
    """Sound: True means `seq` is legal after every prefix that ends in `x` (a terminal name or
    id, or a `Context`); False means it could not be shown."""
    from .contexts import context_from_name, parse_names

    return explorer(grammar, python).is_always_legal(context_from_name(grammar, x), parse_names(grammar, seq))
