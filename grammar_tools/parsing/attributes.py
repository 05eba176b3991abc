"""The synthesized attribute of a node from its children's, and the guards that read it.

`guards` names the rule each grammar rule follows (CONST, PASS, GROUP, STAR_EXPR,
LIST_PARTIAL, LIST_COMPLETE) and where a terminal's shift is guarded; these functions are the
rules themselves, written once for both of their users: the recognizer, on the nodes of a
real stack, and the exploration (`exploration`), on the entries of a frame whose children's
attributes it knows (where it doesn't, it reasons about the possible values, `semantics`).
"""

from __future__ import annotations

from collections.abc import Iterable

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
