"""The grammar analyses that streamline a mask store: contexts, the exploration and its
semantics, follow graph, interchangeable terminals, never/always/jointly legal, Bar-Hillel.
Imports the grammar, the cache, `lexing` and `parsing`."""
