"""What the run-time parser adds to the bare LALR table, as the exploration sees it.

The recognizer (`recognizer.py`) checks guards before some shifts and carries a synthesized
attribute on each node (`guards`, `attributes`). The exploration (`exploration`) runs the same
table on *frames*: stack tops with nothing known below, for every Python version at once. So:

- a guard that reads the top node's attribute is decided where the frame knows the attribute
  (`target_guards`); every other guard, and every action that some Python version removes, is
  *uncertain*: it may fail (`uncertain`);
- an attribute computed from children that the frame knows is computed by the recognizer's
  own rules (`attributes`); one that depends on what the frame doesn't know is an *abstract*
  value, the set of attributes it may be (`UNKNOWN`, and three that the rules can still narrow:
  without HAS_AS, not a single target, neither). `synthesized` is that one step, `admits` the
  meaning of an abstract value.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..parsing import recognizer as attributes
from ..parsing import guards as G
from ..grammar import BRACKET_CLOSE, BRACKET_OPEN, Grammar

# abstract attributes (a known attribute is >= 0)
UNKNOWN = -1  # any attribute
UNKNOWN_NO_AS = -2  # ... but not carrying HAS_AS
NOT_SINGLE = -3  # not a single target (a tuple, a list, a starred target)
NOT_SINGLE_NO_AS = -4  # ... and not carrying HAS_AS
MAY_HAVE_AS = (UNKNOWN, NOT_SINGLE)
NOT_TRACKED = -1  # the rule kind of a grammar without the recognizer's attributes


def admits(value: int, attr: int) -> bool:
    """Whether the (abstract or known) attribute `value` stands for the attribute `attr`."""
    if value >= 0:
        return value == attr
    if value not in MAY_HAVE_AS and attr & G.HAS_AS:
        return False
    return not (value in (NOT_SINGLE, NOT_SINGLE_NO_AS) and attr & G.SINGLE)


@dataclass(frozen=True)
class Semantics:
    """What the run-time parser adds to the bare LALR table (keys: state * 1024 + terminal)."""

    uncertain: frozenset[int]  # decided by something unknown here
    target_guards: dict  # -> guard code on the top node's attribute (`attributes`)
    rule_attr: tuple  # per rule: (a `guards` rule kind or NOT_TRACKED, constant)
    terminals: frozenset[str]  # the grammar's terminal names (children that carry no attribute)
    may_has_as: frozenset[str]  # symbols whose node may carry HAS_AS
    may_as_item: frozenset[str]  # symbols whose node may carry AS_ITEM
    with_colon: frozenset[int]
    colon: int
    opens: frozenset[int]
    closes: frozenset[int]
    tracks_attributes: bool  # the recognizer's attributes (False: a plain LALR parser)
    # -> (guard, removed by some version): every check that the recognizer makes before
    # acting on a terminal, whichever version (lockstep runs compare them)
    step_checks: dict
    # the states that the parent of a node carrying HAS_AS can be in (None: not known), see
    # `has_as_parent_states`
    has_as_parents: frozenset | None

    @classmethod
    def plain(cls, grammar: Grammar) -> Semantics:
        """A plain LALR parser (toy grammars): no guards, no attributes."""
        return cls(
            uncertain=frozenset(), target_guards={}, rule_attr=tuple((NOT_TRACKED, 0) for _ in grammar.rules),
            terminals=frozenset(grammar.terminals), may_has_as=frozenset(), may_as_item=frozenset(),
            with_colon=frozenset(), colon=-1, opens=frozenset(), closes=frozenset(), tracks_attributes=False,
            step_checks={}, has_as_parents=None,
        )

    @classmethod
    def of_recognizer(cls, grammar: Grammar) -> Semantics:
        """The Python recognizer of `recognizer.py` for *any* Python version and with or
        without semantic checks: guards on attributes are evaluated where the frame knows the
        attribute, every other guard and every action some version removes is uncertain."""
        gt = G.build_guard_tables(grammar, (3, 0))  # the oldest version removes the most
        uncertain = {s * 1024 + t for s, t in gt.removed}
        target_guards = {}
        for (s, t), (code, _) in gt.guards.items():
            if code in attributes.TARGET_GUARDS:
                target_guards[s * 1024 + t] = code
            else:
                uncertain.add(s * 1024 + t)
        rule_attr = tuple(zip(gt.rule_kind, gt.rule_const))
        may_has_as, may_as_item = _may_carry_as(grammar, rule_attr)
        tid = grammar.term_id
        return cls(
            uncertain=frozenset(uncertain),
            target_guards=target_guards,
            rule_attr=rule_attr,
            terminals=frozenset(grammar.terminals),
            may_has_as=may_has_as,
            may_as_item=may_as_item,
            with_colon=gt.with_colon_states,
            colon=tid.get("COLON", -1),
            opens=frozenset(tid[n] for n in BRACKET_OPEN if n in tid),
            closes=frozenset(tid[n] for n in BRACKET_CLOSE if n in tid),
            tracks_attributes=True,
            step_checks={
                s * 1024 + t: (gt.guards.get((s, t)), (s, t) in gt.removed)
                for s, t in set(gt.guards) | set(gt.removed)
            },
            has_as_parents=has_as_parent_states(grammar, gt, may_as_item),
        )

    def synthesized(self, r: int, rhs: tuple[str, ...], children) -> int:
        """The attribute of the node that reducing rule r (right side `rhs`) makes from
        `children` (their attributes, bottom first, abstract where unknown): the recognizer's
        rule (`attributes`) where the attributes it reads are known, else the abstract value
        of what it can give."""
        kind, const = self.rule_attr[r]
        if kind == G.CONST:
            return const
        if kind == NOT_TRACKED:
            return UNKNOWN
        if kind == G.PASS:
            a = children[-1]
            if a in MAY_HAVE_AS and rhs[-1] not in self.may_has_as:
                return UNKNOWN_NO_AS if a == UNKNOWN else NOT_SINGLE_NO_AS
            return a
        if kind == G.GROUP:
            a = children[-2]
            if a in (NOT_SINGLE, NOT_SINGLE_NO_AS):
                return NOT_SINGLE_NO_AS
            return UNKNOWN_NO_AS if a < 0 else attributes.group(a)
        if kind == G.STAR_EXPR:
            a = children[-1]
            return NOT_SINGLE_NO_AS if a < 0 else attributes.starred(a)  # STAR or nothing
        # lists: the nonterminal children's attributes
        known = []
        unknown = False
        item_possible = False
        for sym, a in zip(rhs, children):
            if sym in self.terminals:
                continue
            if a < 0:
                unknown = True
                item_possible |= sym in self.may_as_item
            else:
                known.append(a)
        complete = kind == G.LIST_COMPLETE
        if not unknown:
            return attributes.of_list(complete, known)
        # a list is never a single target; a complete one may hold `x as y` items
        if complete and (item_possible or any(a & G.AS_ITEM for a in known)):
            return NOT_SINGLE
        return NOT_SINGLE_NO_AS


def _may_carry_as(grammar: Grammar, rule_attr) -> tuple[frozenset[str], frozenset[str]]:
    """The symbols whose node may carry HAS_AS, and AS_ITEM (a fixpoint over the rules)."""
    may_as_item: set[str] = set()
    may_has_as: set[str] = set()
    changed = True
    while changed:
        changed = False
        for r, rule in enumerate(grammar.rules):
            kind, const = rule_attr[r]
            kids_item = any(s in may_as_item for s in rule.rhs)
            item = has = False
            if kind == G.CONST:
                item, has = bool(const & G.AS_ITEM), bool(const & G.HAS_AS)
            elif kind == G.PASS:
                item, has = rule.rhs[0] in may_as_item, rule.rhs[0] in may_has_as
            elif kind == G.LIST_PARTIAL:
                item = kids_item
            elif kind == G.LIST_COMPLETE:
                has = kids_item
            if item and rule.lhs not in may_as_item:
                may_as_item.add(rule.lhs)
                changed = True
            if has and rule.lhs not in may_has_as:
                may_has_as.add(rule.lhs)
                changed = True
    return frozenset(may_has_as), frozenset(may_as_item)


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
    return frozenset(s for s, sym in enumerate(G.accessing_symbols(grammar)) if sym == "WITH")
