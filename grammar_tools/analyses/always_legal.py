"""`is_always_legal(X, S)`: S is legal after *every* prefix that ends in X.

Undecidable in general; shown (soundly) by the seed's unlimited-credit exploration of the
grammar's pushdown automaton (`exploration`): run the recognizer's LALR table from every
state that X leads into, borrowing the stack entries a reduction needs from below what is
known; if every branch reads S, S is always legal after X. The mask store streamlining merges
such a row into its lexer state's unconditional row (`mask_store.streamline`).
"""

from __future__ import annotations

from .contexts import context_from_name, parse_names
from .exploration import Verdict, explorer
from ..grammar import Grammar


def is_always_legal(grammar: Grammar, x, seq, python: bool = True) -> bool:
    """Sound: True means `seq` is legal after every prefix that ends in `x` (a terminal name or
    id, or a `Context`); False means it could not be shown. `python`: the recognizer's guards
    and layout, for every Python version (else a plain LALR parser)."""
    ctx = context_from_name(grammar, x)
    return explorer(grammar, python).verdict(ctx, parse_names(grammar, seq)) is Verdict.ALWAYS
