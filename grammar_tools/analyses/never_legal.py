"""`is_never_legal(X, S)`: no prefix that ends in X goes on with S. Two tests, two guarantees.

- `is_never_legal`: exact for the grammar, by the Bar-Hillel construction and CFG emptiness
  (`bar_hillel`): L ∩ Σ*XSΣ* = ∅. The recognizer accepts a sublanguage of the grammar (its
  guards only reject more), so the answer True holds for it too. Milliseconds a query (the
  grammar's normal form made once), cached on disk; `bar_hillel.decide` for batches.
- `is_never_legal_shown`: sound but incomplete, by the unlimited-credit exploration
  (`exploration`): True means never legal, False may mean "not shown". Cheap; it knows the
  recognizer's guards, so it shows some sequences never legal that the grammar allows.

`may_be_never_legal` says where the exploration leaves the question open: what the mask store
streamlining asks the exact test (`mask_store.streamline`).
"""

from __future__ import annotations

from . import bar_hillel
from .contexts import context_from_name, parse_names
from .exploration import Verdict, explorer
from ..grammar import Grammar


def is_never_legal(grammar: Grammar, x, seq) -> bool:
    """Exact for the grammar: True iff no sentence has `x` (a terminal name or id, or a
    `Context`) directly followed by `seq` (names or ids). Cached on disk."""
    ctx = context_from_name(grammar, x)
    seq = parse_names(grammar, seq)
    return bar_hillel.decide(grammar, [(ctx, seq)], processes=1)[(ctx, seq)]


def is_never_legal_shown(grammar: Grammar, x, seq, python: bool = True) -> bool:
    """Sound but incomplete, by the exploration (cheap): True means no prefix that ends in `x`
    goes on with `seq`; False means it could not be shown (`is_never_legal` decides exactly).
    `python`: the recognizer's guards and layout, for every Python version."""
    ctx = context_from_name(grammar, x)
    return explorer(grammar, python).verdict(ctx, parse_names(grammar, seq)) is Verdict.NEVER


def may_be_never_legal(grammar: Grammar, x, seq, python: bool = True) -> bool:
    """Whether the exploration leaves "never legal" open: it read `seq` on no branch but cut
    some (neither shown never legal nor seen legal anywhere), so only the exact test can say."""
    ctx = context_from_name(grammar, x)
    return explorer(grammar, python).verdict(ctx, parse_names(grammar, seq)) is Verdict.UNDECIDED
