"""Parsing: the recognizer (its tables, guards, look-ahead, versions), the incremental prefix
parser with its layout widths and recovery, the edit check, f-string fields and the whole-file
check. Imports the grammar, the cache and `lexing`."""
