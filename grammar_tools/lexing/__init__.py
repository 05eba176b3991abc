"""Lexing: byte automata, the string and terminal automata built from them, and the lexer
automaton (longest match over all terminals). Imports only the grammar and the cache."""
