"""Parsing: the recognizer (LALR table, guards, attributes, versions), layout, the
incremental prefix parser, recovery, the edit check and f-string fields. Imports the
grammar, the cache and `lexing`."""
