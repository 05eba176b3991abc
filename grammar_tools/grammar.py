"""The Python grammar: terminals, rules and the LALR(1) parse table, built by lark.

`load_grammar()` reads `grammars/python.lark`, lets lark compile it (EBNF expanded into plain
rules) and build the LALR(1) table in strict mode (any shift/reduce conflict is an error, so no
conflict is ever resolved by accident), then keeps only what a recognizer needs, as ints:

- `terminals`: every terminal name; ids index this tuple. Parser terminals (including `$END`,
  `_NEWLINE`, `_INDENT`, `_DEDENT`) and the ignored ones (`WS`, `COMMENT`, `LINE_CONT`).
- `rules`: `Rule(lhs, rhs, alias)`; `action[state]`: terminal id -> shift target (>= 0) or
  `~rule` (< 0); `goto[state]`: nonterminal -> state.
- `kernels[state]`: the LR(0) kernel items `(rule, dot)` of each state, for the analyses and
  guards that need to know what a state is in the middle of.

The result is cached as JSON keyed by the grammar's text, lark's version and this code.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from importlib import resources

import lark

from . import cache

END = "$END"
NEWLINE = "_NEWLINE"
INDENT = "_INDENT"
DEDENT = "_DEDENT"

# Words that are keywords only in some places: the lexer offers NAME as well.
SOFT_KEYWORDS = {"MATCH": "match", "CASE": "case", "TYPE": "type"}
BRACKET_OPEN = ("LPAR", "LSQB", "LBRACE")
BRACKET_CLOSE = ("RPAR", "RSQB", "RBRACE")


class GrammarError(Exception):
    """The grammar file is invalid or its table has a conflict."""


@dataclass(frozen=True)
class Rule:
    lhs: str
    rhs: tuple[str, ...]
    alias: str | None

    def __str__(self) -> str:
        return f"{self.lhs} -> {' '.join(self.rhs) or '<empty>'}"


@dataclass(frozen=True)
class TerminalDef:
    name: str
    kind: str  # "str" (a literal) or "re"
    value: str
    ignored: bool


@dataclass(frozen=True, eq=False)
class Grammar:
    text: str
    hash: str
    start: str
    terminals: tuple[str, ...]
    terminal_defs: dict[str, TerminalDef]
    rules: tuple[Rule, ...]
    action: tuple[dict[int, int], ...]
    goto: tuple[dict[str, int], ...]
    start_state: int
    end_state: int  # the state after the whole start symbol: `$END` is accepted there
    kernels: tuple[tuple[tuple[int, int], ...], ...]

    @functools.cached_property
    def term_id(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.terminals)}

    @functools.cached_property
    def ignored(self) -> frozenset[int]:
        return frozenset(self.term_id[n] for n, d in self.terminal_defs.items() if d.ignored)

    @functools.cached_property
    def nonterminals(self) -> tuple[str, ...]:
        return tuple(sorted({r.lhs for r in self.rules}))

    @property
    def n_terminals(self) -> int:
        return len(self.terminals)

    @property
    def n_states(self) -> int:
        return len(self.action)

    def terminal_mask(self, names) -> int:
        """A bitset (int) of terminal ids."""
        m = 0
        for n in names:
            m |= 1 << self.term_id[n]
        return m

    def names(self, mask: int) -> list[str]:
        return [t for i, t in enumerate(self.terminals) if mask >> i & 1]

    def literal_terminals(self) -> dict[str, str]:
        return {n: d.value for n, d in self.terminal_defs.items() if d.kind == "str"}


def grammar_text() -> str:
    return resources.files("grammar_tools").joinpath("grammars/python.lark").read_text()


def grammar_key(text: str, start: str) -> str:
    """The grammar's hash: its text and start symbol, lark's version (lark builds the table)
    and this code. Everything derived from the grammar is keyed by it."""
    return cache.content_hash(text, start, lark.__version__, cache.source_hash(sys.modules[__name__]))


@functools.lru_cache(maxsize=4)
def load_grammar(text: str | None = None, start: str = "file_input") -> Grammar:
    """The grammar and its LALR(1) table (from the cache when the grammar is unchanged)."""
    text = grammar_text() if text is None else text
    h = grammar_key(text, start)
    path = cache.cache_dir() / f"grammar-{h}.json"
    data = cache.read_json(path)
    if data is None:
        data = _build(text, start)
        cache.write_json(path, data)
    return _from_json(text, h, data)


def _build(text: str, start: str) -> dict:
    from lark.common import ParserConf
    from lark.exceptions import GrammarError as LarkGrammarError
    from lark.grammar import Terminal
    from lark.load_grammar import load_grammar as lark_load_grammar
    from lark.parsers.lalr_analysis import LALR_Analyzer, Shift

    try:
        g, _ = lark_load_grammar(text, "<python.lark>", [], False)
        term_defs, lark_rules, ignore = g.compile([start], set())
        analyzer = LALR_Analyzer(ParserConf(lark_rules, None, [start]), debug=True, strict=True)
        analyzer.compute_lalr()
    except LarkGrammarError as e:
        raise GrammarError(str(e)) from e

    table = analyzer.parse_table
    terms = {t.name: t for t in term_defs}
    declared = {
        sym.name for r in lark_rules for sym in r.expansion if isinstance(sym, Terminal)
    } - set(terms)
    names = sorted(set(terms) | declared | {END})
    defs = {}
    for name, t in terms.items():
        kind = "str" if type(t.pattern).__name__ == "PatternStr" else "re"
        value = t.pattern.value if kind == "str" else t.pattern.to_regexp()
        defs[name] = {"kind": kind, "value": value, "ignored": name in ignore}

    # the analyzer adds `$root_<start>: <start>`; reducing it means accepting the input
    known = set(lark_rules)
    extra = {rp.rule for st in table.states for rp in st if rp.rule not in known}
    all_rules = list(lark_rules) + sorted(extra, key=str)
    rule_index = {r: i for i, r in enumerate(all_rules)}
    rules = [
        {"lhs": r.origin.name, "rhs": [s.name for s in r.expansion], "alias": r.alias}
        for r in all_rules
    ]
    states = _canonical_order(table.states, table.start_states[start], Shift)
    state_index = {s: i for i, s in enumerate(states)}
    tid = {n: i for i, n in enumerate(names)}
    action, goto, kernels = [], [], []
    for s in states:
        acts, gotos = {}, {}
        for sym, (kind, arg) in table.states[s].items():
            if sym in tid:
                acts[tid[sym]] = state_index[arg] if kind is Shift else ~rule_index[arg]
            else:
                gotos[sym] = state_index[arg]
        action.append(sorted(acts.items()))
        goto.append(sorted(gotos.items()))
        kernels.append(
            sorted({
                (rule_index[rp.rule], rp.index)
                for rp in s
                if rp.index > 0 or rp.rule.origin.name.startswith("$root")
            })
        )
    return {
        "start": start,
        "terminals": names,
        "defs": defs,
        "rules": rules,
        "action": action,
        "goto": goto,
        "kernels": kernels,
        "start_state": state_index[table.start_states[start]],
    }


def _canonical_order(states: dict, start_state, shift) -> list:
    """The table's states in an order that depends on the grammar alone: breadth first from the
    start state, each state's successors (shifts and gotos) in the order of their symbols'
    names. Lark's own order follows set iteration, which changes with the process's string hash
    seed: two processes (a team server and its clients, two builders of one cache) would number
    the states apart."""
    order = [start_state]
    seen = {start_state}
    for st in order:
        row = states[st]
        for sym in sorted(row):
            kind, arg = row[sym]
            if kind is shift and arg not in seen:
                seen.add(arg)
                order.append(arg)
    if len(order) != len(states):
        raise GrammarError(f"{len(states) - len(order)} parse states are not reachable from the start")
    return order


def _from_json(text: str, h: str, data: dict) -> Grammar:
    defs = {
        n: TerminalDef(n, d["kind"], d["value"], d["ignored"]) for n, d in data["defs"].items()
    }
    return Grammar(
        text=text,
        hash=h,
        start=data["start"],
        terminals=tuple(data["terminals"]),
        terminal_defs=defs,
        rules=tuple(Rule(r["lhs"], tuple(r["rhs"]), r["alias"]) for r in data["rules"]),
        action=tuple({int(t): int(a) for t, a in row} for row in data["action"]),
        goto=tuple({n: int(s) for n, s in row} for row in data["goto"]),
        start_state=int(data["start_state"]),
        end_state=int(data["goto"][data["start_state"]] and dict(data["goto"][data["start_state"]])[data["start"]]),
        kernels=tuple(tuple((int(r), int(d)) for r, d in k) for k in data["kernels"]),
    )
