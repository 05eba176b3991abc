"""The exact never-legal test: L ∩ Σ*XSΣ* = ∅, by the Bar-Hillel construction and CFG emptiness.

The language L of the grammar is context-free and Σ*XSΣ* is regular, so their intersection is
context-free (Bar-Hillel: the grammar's Chomsky normal form, one nonterminal per pair of
automaton states) and its emptiness is decidable (is the start symbol generating?). pyformlang
gives the normal form; the generating triples are grown to their fixpoint here
(`_intersection_empty`), pyformlang's `CFG.intersection` + `is_empty` being the reference the
tests hold it to (tests/test_bar_hillel.py). If no sentence has X followed by S anywhere,
no prefix that ends in X can go on with S: S is never legal after X. The answer is exact for
the grammar; the recognizer accepts a sublanguage (its guards only reject more), so it holds
for the recognizer too.

Contexts and sequences are those of `contexts`: a sequence's newline may be dropped (inside
brackets) and its indentation stands for nothing, one `_INDENT` or `_DEDENT`s, so the regular
side is Σ* C R Σ*, with R the sequence with those readings. A context other than `after(X)`
tells nothing about what came before (C = ε).

A query costs milliseconds (pyformlang's construction: ~0.3 s for a 3-state automaton, 5.9 s
for an 11-state one, growing with the cube of its size); answers are cached on disk (JSON, keyed by the grammar, this code and pyformlang's version) and
batches are spread over worker processes (`decide`).
Run time never calls this: the mask store streamlining does, offline, for what the cheaper
analyses leave open (one query a task, `bar_hillel_empty`, in the pool it shares with the
jointly-legal step; `cached_answers` first).
"""

from __future__ import annotations

import functools
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .. import cache
from .contexts import AFTER, Context, Layout
from .forked_pool import can_fork, forked_pool
from ..grammar import Grammar

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- the two languages


def grammar_cfg(grammar: Grammar):
    """The grammar as a pyformlang CFG in Chomsky normal form (built once per grammar)."""
    return _cnf(grammar)


@functools.lru_cache(maxsize=4)
def _cnf(grammar: Grammar):
    from pyformlang.cfg import CFG, Production, Terminal, Variable

    terms = set(grammar.terminals)
    prods = set()
    for r in grammar.rules:
        if r.lhs.startswith("$root"):
            continue
        body = [Terminal(s) if s in terms else Variable(s) for s in r.rhs]
        prods.add(Production(Variable(r.lhs), body))
    cfg = CFG(start_symbol=Variable(grammar.start), productions=prods)
    cnf = cfg.to_normal_form()
    cnf._normal_form = cnf  # already normal: don't convert again at every intersection
    return cnf


def alphabet(grammar: Grammar) -> list[int]:
    """The terminals of the rules (the parser's alphabet)."""
    names = {s for r in grammar.rules for s in r.rhs if s in grammar.term_id}
    return sorted(grammar.term_id[n] for n in names)


def pattern_automaton(grammar: Grammar, context: Context, seq: tuple[int, ...]):
    """The minimal DFA of Σ* C R Σ* as (n_states, start, finals, delta[state][terminal]).

    Built from a small NFA of positions by the subset construction, then minimized (Moore);
    the symbols outside the pattern all behave alike and share one column."""
    lay = Layout.of(grammar)
    sigma = alphabet(grammar)
    # NFA: position i; edges (i, symbol or None for epsilon, j); position 0 loops on Σ
    edges: list[tuple[int, int | None, int]] = []
    pos = 0
    n_pos = 1

    def new() -> int:
        nonlocal n_pos
        n_pos += 1
        return n_pos - 1

    pattern = ([context.terminal] if context.kind == AFTER else []) + list(seq)
    for e in pattern:
        nxt = new()
        if lay.is_indentation(e):
            edges.append((pos, None, nxt))
            edges.append((pos, lay.indent, nxt))
            d = new()  # DEDENT+: a loop on its own state
            edges.append((pos, lay.dedent, d))
            edges.append((d, lay.dedent, d))
            edges.append((d, None, nxt))
        elif e == lay.newline:
            edges.append((pos, None, nxt))
            edges.append((pos, e, nxt))
        else:
            edges.append((pos, e, nxt))
        pos = nxt
    final = pos
    eps: dict[int, list[int]] = {}
    step: dict[tuple[int, int], list[int]] = {}
    for a, sym, b in edges:
        if sym is None:
            eps.setdefault(a, []).append(b)
        else:
            step.setdefault((a, sym), []).append(b)

    def closure(states) -> frozenset:
        out = set(states)
        stack = list(states)
        while stack:
            s = stack.pop()
            for t in eps.get(s, ()):
                if t not in out:
                    out.add(t)
                    stack.append(t)
        return frozenset(out)

    in_pattern = {e for e in pattern if e >= 0 and not lay.is_indentation(e)} | (
        {lay.indent, lay.dedent} if any(lay.is_indentation(e) for e in pattern) else set()
    )
    symbols = [t for t in sigma if t in in_pattern]
    other = next((t for t in sigma if t not in in_pattern), None)
    columns = symbols + ([other] if other is not None else [])

    def move(S: frozenset, sym: int) -> frozenset:
        if final in S:
            return S_final
        nxt = {0}  # Σ* before the pattern
        for s in S:
            nxt.update(step.get((s, sym), ()))
        return closure(nxt)

    start = closure({0})
    S_final = frozenset({final})
    index = {start: 0}
    order = [start]
    delta: list[dict[int, int]] = []
    i = 0
    while i < len(order):
        S = order[i]
        i += 1
        row = {}
        for sym in columns:
            T = move(S, sym)
            if T not in index:
                index[T] = len(order)
                order.append(T)
            row[sym] = index[T]
        delta.append(row)
    finals = {k for k, S in enumerate(order) if final in S}
    # Moore minimization
    part = [1 if k in finals else 0 for k in range(len(order))]
    while True:
        sig = {}
        new_part = []
        for k in range(len(order)):
            key = (part[k],) + tuple(part[delta[k][c]] for c in columns)
            new_part.append(sig.setdefault(key, len(sig)))
        if len(sig) == len(set(part)):
            break
        part = new_part
    n = len(set(part))
    mdelta = [dict() for _ in range(n)]
    for k in range(len(order)):
        for c in columns:
            mdelta[part[k]][c] = part[delta[k][c]]
    full = [dict() for _ in range(n)]
    for st in range(n):
        for t in sigma:
            full[st][t] = mdelta[st][t if t in in_pattern else other]
    return n, part[0], {part[k] for k in finals}, full


@dataclass(frozen=True)
class _IndexedCnf:
    """The grammar's Chomsky normal form as integers: `terminal_rules` A -> a as (A, terminal
    id), `binary_rules` A -> B C as (A, B, C), and for each variable the binary rules whose
    body holds it (`uses`)."""

    start: int
    n_variables: int
    terminal_rules: tuple[tuple[int, int], ...]
    binary_rules: tuple[tuple[int, int, int], ...]
    uses: tuple[tuple[int, ...], ...]  # variable -> indices into binary_rules


@functools.lru_cache(maxsize=4)
def indexed_cnf(grammar: Grammar) -> _IndexedCnf:
    cnf = grammar_cfg(grammar)
    ids: dict = {}

    def var(v) -> int:
        return ids.setdefault(v.value, len(ids))

    start = var(cnf.start_symbol)
    terminal_rules, binary_rules = [], []
    for p in sorted(cnf.productions, key=repr):
        if len(p.body) == 1:
            terminal_rules.append((var(p.head), grammar.term_id[p.body[0].value]))
        else:
            binary_rules.append((var(p.head), var(p.body[0]), var(p.body[1])))
    uses: list[list[int]] = [[] for _ in ids]
    for k, (_, b, c) in enumerate(binary_rules):
        uses[b].append(k)
        if c != b:
            uses[c].append(k)
    return _IndexedCnf(start, len(ids), tuple(terminal_rules), tuple(binary_rules), tuple(map(tuple, uses)))


def _intersection_empty(cnf: _IndexedCnf, automaton) -> bool:
    """Whether no word of the CNF grammar's language is accepted by the DFA: the Bar-Hillel
    triples (p, A, q) (A derives a word that leads the DFA from p to q) grown to their fixpoint,
    then is (start, S, final) among them. The same answer as pyformlang's `CFG.intersection`
    then `is_empty` (which the tests compare), without building the product grammar: its n³
    productions as objects cost 5.9 s of CPU for the 11-state query of a cold 151k build,
    this a few milliseconds. `reach[A][p]`: the states q as bits."""
    n, start, finals, delta = automaton
    reach = [[0] * n for _ in range(cnf.n_variables)]
    changed: set[int] = set()
    for a, t in cnf.terminal_rules:
        row = reach[a]
        for p in range(n):
            q = delta[p].get(t)
            if q is not None and not row[p] >> q & 1:
                row[p] |= 1 << q
                changed.add(a)
    rules = cnf.binary_rules
    while changed:
        todo = {k for v in changed for k in cnf.uses[v]}
        changed = set()
        for k in todo:
            a, b, c = rules[k]
            row, rb, rc = reach[a], reach[b], reach[c]
            for p in range(n):
                bits = rb[p]
                if not bits:
                    continue
                got = 0
                r = 0
                while bits:
                    if bits & 1:
                        got |= rc[r]
                    bits >>= 1
                    r += 1
                if got & ~row[p]:
                    row[p] |= got
                    changed.add(a)
    final_bits = sum(1 << f for f in finals)
    return not reach[cnf.start][start] & final_bits


def _to_pyformlang(grammar: Grammar, automaton):
    from pyformlang.finite_automaton import DeterministicFiniteAutomaton, State, Symbol

    n, start, finals, delta = automaton
    dfa = DeterministicFiniteAutomaton()
    names = grammar.terminals
    for s in range(n):
        for t, d in delta[s].items():
            dfa.add_transition(State(s), Symbol(names[t]), State(d))
    dfa.add_start_state(State(start))
    for f in finals:
        dfa.add_final_state(State(f))
    return dfa


def pyformlang_empty(grammar: Grammar, context: Context, seq: tuple[int, ...]) -> bool:
    """`bar_hillel_empty` by pyformlang's own construction (`CFG.intersection`, `is_empty`):
    the reference the tests hold the fixpoint to."""
    return grammar_cfg(grammar).intersection(_to_pyformlang(grammar, pattern_automaton(grammar, context, seq))).is_empty()


def bar_hillel_empty(grammar: Grammar, context: Context, seq: tuple[int, ...]) -> bool:
    """True iff no sentence of the grammar contains the pattern (the grammar's CNF from
    pyformlang, the intersection's emptiness by `_intersection_empty`)."""
    return _intersection_empty(indexed_cnf(grammar), pattern_automaton(grammar, context, seq))


# ---------------------------------------------------------------- cache and batches


def query_key(grammar: Grammar, context: Context, seq: tuple[int, ...]) -> str:
    names = grammar.terminals
    T = grammar.n_terminals
    return context.key(grammar) + "|" + ",".join(names[e] if e < T else "<indent>" for e in seq)


def cache_path(grammar: Grammar) -> Path:
    """The answers' file: keyed by the grammar, this code (its imports included) and the
    version of pyformlang, which does the construction."""
    key = cache.content_hash(
        grammar.hash, cache.source_hash(sys.modules[__name__]), cache.library_versions("pyformlang")
    )
    return cache.cache_dir() / f"never-legal-{key}.json"


class NeverLegalCache:
    """Answers on disk, one JSON object per grammar: query key -> bool."""

    def __init__(self, grammar: Grammar) -> None:
        self.grammar = grammar
        self.path = cache_path(grammar)
        self.data: dict[str, bool] = cache.read_json(self.path) or {}
        self.dirty = False

    def get(self, context: Context, seq) -> bool | None:
        return self.data.get(query_key(self.grammar, context, tuple(seq)))

    def put(self, context: Context, seq, value: bool) -> None:
        self.data[query_key(self.grammar, context, tuple(seq))] = bool(value)
        self.dirty = True

    def save(self) -> None:
        if self.dirty:
            # merge with what another process may have written meanwhile
            on_disk = cache.read_json(self.path) or {}
            on_disk.update(self.data)
            cache.write_json(self.path, on_disk)
            self.data = on_disk
            self.dirty = False


_worker_grammar: Grammar | None = None


def _init_worker(text: str, start: str) -> None:
    global _worker_grammar
    from ..grammar import load_grammar

    _worker_grammar = load_grammar(text, start)
    indexed_cnf(_worker_grammar)


def _work(item):
    kind, terminal, seq = item
    t0 = time.perf_counter()
    empty = bar_hillel_empty(_worker_grammar, Context(kind, terminal), seq)
    return empty, time.perf_counter() - t0


def cached_answers(grammar: Grammar, queries) -> tuple[NeverLegalCache, dict, list]:
    """The answers the cache holds for (context, seq) queries, and the queries it lacks
    (shortest patterns first): (the cache, {query: never legal}, [query])."""
    store = NeverLegalCache(grammar)
    out: dict = {}
    todo = []
    for ctx, seq in dict.fromkeys((c, tuple(s)) for c, s in queries):
        v = store.get(ctx, seq)
        if v is None:
            todo.append((ctx, seq))
        else:
            out[(ctx, seq)] = v
    todo.sort(key=lambda q: len(q[1]))
    return store, out, todo


def decide(
    grammar: Grammar,
    queries,
    processes: int = 2,
    time_budget_s: float | None = None,
    progress: bool = False,
) -> dict[tuple[Context, tuple[int, ...]], bool]:
    """The exact answers for many (context, seq) queries: from the cache, the rest computed on
    `processes` worker processes (longest patterns last). With a time budget, queries not
    started in time are left out of the result (unknown). In a process where another thread
    runs (`can_fork` False) the queries are answered in this process."""
    store, out, todo = cached_answers(grammar, queries)
    if not todo:
        return out
    t0 = time.perf_counter()
    items = [(c.kind, c.terminal, s) for c, s in todo]
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(items), desc="never legal (Bar-Hillel)", unit="query", leave=False)
    try:
        if processes > 1 and len(items) > 1 and can_fork():
            with forked_pool(processes, _init_worker, (grammar.text, grammar.start)) as pool:
                for (c, s), (empty, _) in zip(todo, pool.imap(_work, items, chunksize=1)):
                    out[(c, s)] = empty
                    store.put(c, s, empty)
                    if bar:
                        bar.update()
                    if time_budget_s is not None and time.perf_counter() - t0 > time_budget_s:
                        pool.terminate()
                        break
        else:
            for c, s in todo:
                if time_budget_s is not None and time.perf_counter() - t0 > time_budget_s:
                    break
                empty = bar_hillel_empty(grammar, c, s)
                out[(c, s)] = empty
                store.put(c, s, empty)
                if bar:
                    bar.update()
    finally:
        if bar:
            bar.close()
        store.save()
    return out
