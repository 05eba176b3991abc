"""What the analyses ask about: a *context* (what the parser was just fed) and a *sequence*.

The grammar analyses (`follow_graph`, `always_legal`, `never_legal`, `jointly_legal`) answer
questions of the form "after context C, is the terminal sequence S legal?". A mask store row
is checked in one of four contexts, depending on the terminal X of its lexer state:

- `after(X)`: X is a parser terminal and was the last terminal fed (the common case);
- `ANY`: X is ignored (spaces, comments, a line continuation): nothing is known about what came
  before;
- `NEWLINE`: X is `_NEWLINE`; the parser was fed it unless inside brackets, where Python drops
  newlines (then, again, nothing is known);
- `NEWLINE_INDENTED`: after a `_NEWLINE` and the `_INDENT`/`_DEDENT`s of the next line's width
  (or, inside brackets, after nothing).

A sequence is a tuple of ints. Ids below `grammar.n_terminals` are terminals, with one layout
rule of Python's: a `_NEWLINE` inside brackets is dropped. An id at or above `n_terminals`
stands for *the indentation of a line* whose width is not known to the analysis: nothing,
one `_INDENT`, one or more `_DEDENT`s, or an indentation error (and, inside brackets, nothing).
This is how the mask store writes the indentation that a token's newline sets.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..grammar import DEDENT, INDENT, NEWLINE, Grammar

AFTER = "after"


@dataclass(frozen=True)
class Context:
    kind: str  # "after" | "any" | "newline" | "newline_indented"
    terminal: int = -1  # for "after"

    def key(self, grammar: Grammar) -> str:
        """A stable text key (for caches and reports)."""
        return f"after:{grammar.terminals[self.terminal]}" if self.kind == AFTER else self.kind

    def describe(self, grammar: Grammar) -> str:
        return self.key(grammar)


ANY = Context("any")
AFTER_NEWLINE = Context("newline")
AFTER_NEWLINE_INDENTED = Context("newline_indented")


def after(terminal: int) -> Context:
    return Context(AFTER, terminal)


def context_of(grammar: Grammar, terminal: int, indented: bool = False) -> Context:
    """The context in which the rows of a lexer state for `terminal` are checked: the terminal
    was just announced (`indented`: and, for a newline, its indentation applied)."""
    if terminal in grammar.ignored:
        return ANY
    if grammar.terminals[terminal] == NEWLINE:
        return AFTER_NEWLINE_INDENTED if indented else AFTER_NEWLINE
    return after(terminal)


@dataclass(frozen=True)
class Layout:
    """The terminal ids of Python's layout, or -1 where a grammar has none (toy grammars)."""

    newline: int
    indent: int
    dedent: int
    n_terminals: int

    @classmethod
    def of(cls, grammar: Grammar) -> Layout:
        tid = grammar.term_id
        return cls(tid.get(NEWLINE, -1), tid.get(INDENT, -1), tid.get(DEDENT, -1), grammar.n_terminals)

    def is_indentation(self, element: int) -> bool:
        return element >= self.n_terminals


def parse_names(grammar: Grammar, seq) -> tuple[int, ...]:
    """A sequence given by terminal names (or ids) as ids; "<indent>" is an indentation."""
    out = []
    for e in seq:
        if isinstance(e, int):
            out.append(e)
        elif e == "<indent>":
            out.append(grammar.n_terminals)
        else:
            out.append(grammar.term_id[e])
    return tuple(out)


def context_from_name(grammar: Grammar, x) -> Context:
    """`after(X)` for a terminal name or id; the four kinds by name ("any", "newline", ...)."""
    if isinstance(x, Context):
        return x
    if isinstance(x, int):
        return context_of(grammar, x)
    for c in (ANY, AFTER_NEWLINE, AFTER_NEWLINE_INDENTED):
        if x == c.kind:
            return c
    return context_of(grammar, grammar.term_id[x])
