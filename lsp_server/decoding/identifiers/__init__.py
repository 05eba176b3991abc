"""Names that exist: scope- and type-aware identifiers while decoding (monitor-guided decoding on
top of the grammar). See docs/identifiers.md.

- `analysis.py`: what jedi says is in scope at a cursor and which attributes known receivers
  have (`ScopeAnalysis`), computed off the request path;
- `analyses.py`: those analyses cached per document and cursor line, computed on a background
  thread (`NameAnalyses`), never waited for by a request;
- `slots.py`: where in the text an identifier is being written and what kind of place it is
  (`Slot`), from the text alone;
- `token_index.py`: the vocabulary read once as identifier pieces (`IdentifierTokens`);
- `guide.py`: the one object the decoding step calls (`IdentifierGuide.shape`).
"""

from .modes import IdentifierMode

__all__ = ["IdentifierMode"]
