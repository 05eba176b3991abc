"""One byte-level DFA per lexer terminal of the grammar.

- literal terminals (keywords, operators): a chain of their bytes;
- NAME: Python identifiers exactly as `str.isidentifier()` defines them (PEP 3131), in UTF-8;
- the six string terminals: `string_automata` (exact, with prefixes and escapes);
- COMMENT and _NEWLINE: written here, so that comments hold any valid UTF-8 but newlines/NUL;
- the rest (numbers, WS, LINE_CONT): lark's regex through interegular.
No terminal ever matches a NUL byte (CPython rejects source that contains one).
"""

from __future__ import annotations

import functools

import numpy as np

from .byte_automaton import (
    ByteDFA,
    ByteNFA,
    codepoint_ranges,
    determinize,
    dfa_from_regex,
    literal_dfa,
    minimize,
)
from ..grammar import Grammar
from .string_automata import STRING_TERMINALS, string_dfa

NO_NEWLINE_CHARS = [(0x01, 0x09), (0x0B, 0x0C), (0x0E, 0x10FFFF)]  # not \n, \r or NUL


@functools.lru_cache(maxsize=1)
def identifier_ranges() -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Code point ranges that may start, and that may continue, a Python identifier."""
    start = codepoint_ranges(lambda c: c.isidentifier())
    cont = codepoint_ranges(lambda c: ("a" + c).isidentifier())
    return start, cont


def name_dfa() -> ByteDFA:
    start_ranges, cont_ranges = identifier_ranges()
    nfa = ByteNFA()
    s = nfa.add_state()
    acc = nfa.add_state(accepting=True)
    nfa.add_codepoints(s, start_ranges, acc)
    nfa.add_codepoints(acc, cont_ranges, acc)
    return minimize(determinize(nfa))


def _comment_into(nfa: ByteNFA, src: int, dst: int) -> None:
    """`#` then any characters but newlines, from src to dst (dst is the comment's body)."""
    nfa.add_edge(src, ord("#"), ord("#"), dst)
    nfa.add_codepoints(dst, NO_NEWLINE_CHARS, dst)


def comment_dfa() -> ByteDFA:
    nfa = ByteNFA()
    s = nfa.add_state()
    body = nfa.add_state(accepting=True)
    _comment_into(nfa, s, body)
    return minimize(determinize(nfa))


def newline_dfa() -> ByteDFA:
    """_NEWLINE: ( \\r?\\n[\\t ]* | COMMENT )+ -- blank lines and comment lines join the newline."""
    nfa = ByteNFA()
    s = nfa.add_state()
    after_nl = nfa.add_state(accepting=True)  # after a newline, in the indentation
    cr = nfa.add_state()
    comment = nfa.add_state(accepting=True)
    for src in (s, after_nl, comment):
        nfa.add_edge(src, 0x0A, 0x0A, after_nl)
        nfa.add_edge(src, 0x0D, 0x0D, cr)
    nfa.add_edge(cr, 0x0A, 0x0A, after_nl)
    nfa.add_edge(after_nl, ord(" "), ord(" "), after_nl)
    nfa.add_edge(after_nl, ord("\t"), ord("\t"), after_nl)
    for src in (s, after_nl):
        nfa.add_edge(src, ord("#"), ord("#"), comment)
    nfa.add_codepoints(comment, NO_NEWLINE_CHARS, comment)
    return minimize(determinize(nfa))


def _without_nul(dfa: ByteDFA) -> ByteDFA:
    table = dfa.table.copy()
    table[:, 0] = -1
    return ByteDFA(table, dfa.accepting)


def terminal_dfas(grammar: Grammar) -> dict[str, ByteDFA]:
    """A minimal byte DFA for every lexer terminal of `grammar` (declared ones have none)."""
    out: dict[str, ByteDFA] = {}
    for name, d in grammar.terminal_defs.items():
        if d.kind == "str":
            out[name] = literal_dfa(d.value.encode())
        elif name == "NAME":
            out[name] = name_dfa()
        elif name in STRING_TERMINALS:
            out[name] = string_dfa(*STRING_TERMINALS[name])
        elif name == "COMMENT":
            out[name] = comment_dfa()
        elif name == "_NEWLINE":
            out[name] = newline_dfa()
        else:
            out[name] = _without_nul(dfa_from_regex(d.value))
    for name, dfa in out.items():
        assert not np.any(dfa.table[:, 0] >= 0), name
    return out
