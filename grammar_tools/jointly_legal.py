"""`are_jointly_legal(X, S1, S2)`: after every prefix ending in X, S1 is legal iff S2 is.

Then the mask store can keep one row for both (the OR of their token sets, checked with S1).
Like `is_always_legal` (which is `are_jointly_legal(X, S, ())`), it is undecidable in general;
these are the cases where it can be shown (sound; False means "not shown"):

- S1 and S2 are images of each other under interchangeable terminals (`interchangeable`);
- one extends the other, S2 = S1 + T, and wherever S1 is legal after X, T is legal after it:
  the unlimited-credit exploration (`always_legal`) reads S1 from X's states and then T from
  every branch that read S1. This refines the seed's rule (is_always_legal(Y, T) for the last
  terminal Y of S1), since it knows what came before Y;
- both are always legal, or both never legal;
- fed in lockstep on the same stacks, the recognizer treats them alike: the same checks and
  reductions until both shift into the same state, and where they part, both always or
  both never accepted (`Explorer.accepted_alike`): `x and` / `x or`, `f(x).` / `f(x) **`.
"""

from __future__ import annotations

from .always_legal import ACC, REJ, explorer
from .contexts import Context, context_from_name, parse_names
from .grammar import Grammar
from .interchangeable import canonical_map, interchangeable_classes, recognizer_classes


def canonical(grammar: Grammar, seq: tuple[int, ...], python: bool = True) -> tuple[int, ...]:
    """`seq` with every terminal replaced by the first member of its interchangeable class
    (`python`: the classes that the recognizer's guards keep)."""
    classes = recognizer_classes(grammar) if python else interchangeable_classes(grammar)
    cmap = canonical_map(grammar, classes)
    return tuple(cmap.get(e, e) for e in seq)


def extends_jointly(grammar: Grammar, context: Context, prefix, suffix, python: bool = True) -> bool:
    """Wherever `prefix` is legal after `context`, `prefix + suffix` is too."""
    return explorer(grammar, python).extension_outcome(context, tuple(prefix), tuple(suffix)) == ACC


def are_jointly_legal(grammar: Grammar, x, s1, s2, python: bool = True) -> bool:
    """Sound: True means S1 and S2 are legal after exactly the same prefixes ending in `x`."""
    ctx = context_from_name(grammar, x)
    a, b = parse_names(grammar, s1), parse_names(grammar, s2)
    if a == b or canonical(grammar, a, python) == canonical(grammar, b, python):
        return True
    if len(a) > len(b):
        a, b = b, a
    if b[: len(a)] == a and extends_jointly(grammar, ctx, a, b[len(a) :], python):
        return True
    ex = explorer(grammar, python)
    oa, ob = ex.outcome(ctx, a), ex.outcome(ctx, b)
    if oa == ACC and ob == ACC:
        return True
    if oa & ~REJ == 0 and ob & ~REJ == 0:
        return True
    return ex.accepted_alike_after(ctx, a, b)
