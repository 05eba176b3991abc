"""The grammar analyses behind streamlining: follow graph, interchangeable terminals,
is_always_legal (unlimited-credit exploration), is_never_legal (Bar-Hillel), are_jointly_legal.

Small grammars are checked against brute-force enumeration of their sentences; the Python
grammar against facts that are easy to see in its rules."""

from __future__ import annotations

import gc
import itertools
import json
import threading

import pytest

from grammar_tools.analyses import bar_hillel
from grammar_tools.analyses.always_legal import is_always_legal
from grammar_tools.analyses.contexts import ANY, after, parse_names
from grammar_tools.analyses.exploration import ACC, REJ, Explorer, explorer
from grammar_tools.analyses.follow_graph import follow_graph
from grammar_tools.analyses.forked_pool import collector_paused
from grammar_tools.grammar import load_grammar
from grammar_tools.analyses.interchangeable import (
    are_interchangeable,
    interchangeable_classes,
    recognizer_classes,
)
from grammar_tools.analyses.jointly_legal import WorkBudget, are_jointly_legal, jointly_legal_classes
from grammar_tools.analyses.lockstep import Lockstep, lockstep
from grammar_tools.analyses.never_legal import is_never_legal, is_never_legal_shown

# the seed's toy grammar: S ::= aSb | ε, i.e. a^n b^n
TOY = 'start: A start B\n     |\nA: "a"\nB: "b"\n'

# two more small grammars: sums of parenthesized terms, and two kinds of nested brackets
SUMS = """
start: expr
expr: expr PLUS term | term
term: LPAR expr RPAR | X
PLUS: "+"
LPAR: "("
RPAR: ")"
X: "x"
"""
BRACKETS = """
start: item*
item: LP start RP | LB start RB | X
LP: "("
RP: ")"
LB: "["
RB: "]"
X: "x"
"""


def _sentences(g, max_len: int) -> set[tuple[str, ...]]:
    """Every sentence of at most `max_len` terminals (leftmost expansion, pruned by length)."""
    rules: dict[str, list[tuple[str, ...]]] = {}
    for r in g.rules:
        rules.setdefault(r.lhs, []).append(r.rhs)
    terms = set(g.terminals)
    min_len: dict[str, int] = {t: 1 for t in terms}
    for _ in range(len(rules) + 2):
        for lhs, alts in rules.items():
            best = min((sum(min_len.get(s, 99) for s in alt) for alt in alts), default=99)
            min_len[lhs] = min(min_len.get(lhs, 99), best)
    out = set()
    todo = [(g.start,)]
    seen = set()
    while todo:
        form = todo.pop()
        if form in seen:
            continue
        seen.add(form)
        if sum(min_len.get(s, 99) for s in form) > max_len:
            continue
        i = next((k for k, s in enumerate(form) if s not in terms), None)
        if i is None:
            out.add(form)
            continue
        for alt in rules[form[i]]:
            todo.append(form[:i] + alt + form[i + 1 :])
    return out


def _is_prefix(g, seq) -> bool:
    """Whether `seq` starts some sentence: feed it to a plain LALR parser over the table (an
    LR parser stops at the first terminal that no sentence can have there)."""
    nts = {n: i for i, n in enumerate(g.nonterminals)}
    goto = [{nts[n]: s for n, s in row.items()} for row in g.goto]
    stack = [g.start_state]
    for name in seq:
        t = g.term_id[name]
        while True:
            a = g.action[stack[-1]].get(t)
            if a is None:
                return False
            if a >= 0:
                stack.append(a)
                break
            rule = g.rules[~a]
            del stack[len(stack) - len(rule.rhs) :]
            stack.append(goto[stack[-1]][nts[rule.lhs]])
    return True


def _substrings(sentences, n: int) -> set[tuple[str, ...]]:
    return {s[i : i + k] for s in sentences for k in range(1, n + 1) for i in range(len(s) - k + 1)}


@pytest.fixture(scope="module")
def toy():
    return load_grammar(TOY, "start")


@pytest.fixture(scope="module")
def python_grammar():
    return load_grammar()


# ---------------------------------------------------------------- the seed's toy grammar


def test_toy_always_legal_as_in_the_seed(toy):
    a, b = toy.term_id["A"], toy.term_id["B"]
    ex = Explorer(toy)
    assert is_always_legal(toy, after(a), (a,), python=False)
    assert is_always_legal(toy, after(a), (b,), python=False)
    assert not is_always_legal(toy, after(b), (a,), python=False)
    assert not is_always_legal(toy, after(b), (b,), python=False)
    # and what the exploration says about the other two: b a never occurs, b b sometimes
    assert ex.outcome(after(b), (a,)) == REJ
    assert ex.outcome(after(b), (b,)) == ACC | REJ
    assert is_always_legal(toy, "A", ["B"], python=False)


def test_toy_follow_graph(toy):
    fg = follow_graph(toy)
    a, b = toy.term_id["A"], toy.term_id["B"]
    assert fg.can_follow(a, a) and fg.can_follow(a, b) and fg.can_follow(b, b)
    assert not fg.can_follow(b, a)
    assert not fg.possible(after(a), (b, a))
    assert fg.possible(after(a), (a, b, b))


@pytest.mark.parametrize(
    "text,max_len", [(TOY, 12), (SUMS, 11), (BRACKETS, 8)], ids=["anbn", "sums", "brackets"]
)
def test_is_never_legal_agrees_with_brute_force(text, max_len):
    """Bar-Hillel + emptiness against the sentences up to `max_len` terminals, for every
    terminal X and every S of one or two terminals (these grammars have short witnesses); and
    the exploration's always/never answers are never contradicted by a sentence."""
    g = load_grammar(text, "start")
    sentences = _sentences(g, max_len)
    assert sentences
    alphabet = sorted({s for r in g.rules for s in r.rhs if s in g.term_id})
    queries = [(x, s) for x in alphabet for n in (1, 2) for s in itertools.product(alphabet, repeat=n)]
    ex = Explorer(g)
    fg = follow_graph(g)
    answers = bar_hillel.decide(
        g, [(after(g.term_id[x]), parse_names(g, s)) for x, s in queries], processes=1
    )
    prefixes = {s[:i] for s in sentences for i in range(len(s) + 1)}
    substrings = _substrings(sentences, 3)
    assert all(_is_prefix(g, p) for p in prefixes)
    for x, s in queries:
        seq = parse_names(g, s)
        ctx = after(g.term_id[x])
        brute_never = (x,) + s not in substrings
        assert answers[(ctx, seq)] == brute_never, (x, s)
        if len(s) == 1:
            assert fg.possible(ctx, seq) == (not brute_never), (x, s)
        o = ex.outcome(ctx, seq)
        if o & ~REJ == 0:
            assert brute_never, (x, s)
        if o == ACC:  # every prefix that ends in x goes on with s
            for p in prefixes:
                if p and p[-1] == x:
                    assert _is_prefix(g, p + s), (p, s)


def test_never_legal_cache_and_worker_processes(tmp_path, monkeypatch):
    """Answers go to a JSON file per grammar; two worker processes give the same answers."""
    monkeypatch.setenv("SYNTAXLOCK_CACHE", str(tmp_path))
    g = load_grammar(SUMS, "start")
    tid = g.term_id
    queries = [
        (after(tid["PLUS"]), (tid["PLUS"],)),
        (after(tid["LPAR"]), (tid["RPAR"],)),
        (after(tid["X"]), (tid["RPAR"], tid["PLUS"])),
        (ANY, (tid["RPAR"], tid["X"])),
    ]
    two = bar_hillel.decide(g, queries, processes=2)
    assert two == {
        queries[0]: True, queries[1]: True, queries[2]: False, queries[3]: True,
    }
    data = json.loads(bar_hillel.cache_path(g).read_text())
    assert data["after:PLUS|PLUS"] is True and data["after:X|RPAR,PLUS"] is False
    # from the cache: the same answers without a query (a corrupted answer would show)
    data["after:PLUS|PLUS"] = False
    bar_hillel.cache_path(g).write_text(json.dumps(data))
    assert bar_hillel.decide(g, queries[:1], processes=1)[queries[0]] is False


def test_never_legal_queries_stay_in_a_process_where_a_thread_runs(tmp_path, monkeypatch):
    """A fork copies only the calling thread (a lock another thread holds stays held in the
    child): with a thread running, the batch is answered here, the answers the same."""
    monkeypatch.setenv("SYNTAXLOCK_CACHE", str(tmp_path))
    g = load_grammar(SUMS, "start")
    tid = g.term_id
    queries = [(after(tid["PLUS"]), (tid["PLUS"],)), (after(tid["X"]), (tid["RPAR"], tid["PLUS"]))]

    def no_fork(*args, **kwargs):
        raise AssertionError("forked a pool beside a running thread")

    monkeypatch.setattr(bar_hillel, "forked_pool", no_fork)
    stop = threading.Event()
    beside = threading.Thread(target=stop.wait)
    beside.start()
    try:
        answers = bar_hillel.decide(g, queries, processes=2)
    finally:
        stop.set()
        beside.join()
    assert answers == {queries[0]: True, queries[1]: False}


# ---------------------------------------------------------------- Python


def test_python_facts(python_grammar):
    g = python_grammar
    assert not is_never_legal(g, "DEF", ["NAME"])
    assert is_never_legal(g, "NAME", ["NAME"])
    assert is_always_legal(g, "DEF", ["NAME"])
    assert not is_always_legal(g, "NAME", ["NAME"])
    assert not is_always_legal(g, "NAME", ["DOT"])  # `def f.` is an error
    # the layout: a newline inside brackets is nothing, so `x` `\n` `)` can be legal
    ex = explorer(g)
    tid = g.term_id
    assert ex.outcome(after(tid["NAME"]), (tid["_NEWLINE"], tid["RPAR"])) & ACC
    assert is_always_legal(g, after(tid["LPAR"]), (tid["_NEWLINE"], tid["NAME"]))


def test_python_follow_graph(python_grammar):
    g = python_grammar
    fg = follow_graph(g)
    tid = g.term_id
    assert [g.terminals[t] for t in fg.successors(tid["DEF"])] == ["NAME"]
    assert not fg.can_follow(tid["NAME"], tid["NAME"])
    assert fg.can_follow(tid["NAME"], tid["LPAR"])
    assert not fg.possible(after(tid["RPAR"]), (tid["NAME"], tid["DOT"]))


SEED_GROUPS = [
    # the seed's 7 groups, as our grammar names them ("<>" is not Python 3)
    {"SLASHEQUAL", "PERCENTEQUAL", "CIRCUMFLEXEQUAL", "DOUBLESTAREQUAL", "STAREQUAL", "RIGHTSHIFTEQUAL",
     "VBAREQUAL", "MINEQUAL", "PLUSEQUAL", "DOUBLESLASHEQUAL", "LEFTSHIFTEQUAL", "ATEQUAL", "AMPEREQUAL"},
    {"FALSE", "NONE", "TRUE"},
    {"LEFTSHIFT", "RIGHTSHIFT"},
    {"DOUBLESLASH", "PERCENT"},
    {"NOTEQUAL", "LESSTHAN", "GREATEREQUAL", "EQEQUAL", "LESSEQUAL", "MORETHAN"},
    {"HEX_NUMBER", "FLOAT_NUMBER", "BIN_NUMBER", "OCT_NUMBER", "DEC_NUMBER", "IMAG_NUMBER"},
]


def test_interchangeable_groups_include_the_seeds(python_grammar):
    g = python_grammar
    classes = [set(c) for c in interchangeable_classes(g)]
    for group in SEED_GROUPS:
        assert any(group <= c for c in classes), group
    # the seed's PLUS/MINUS group is not one here: `case -1:` is a pattern, `case +1:` isn't
    assert not are_interchangeable(g, "PLUS", "MINUS")
    assert not are_interchangeable(g, "NAME", "STRING")
    # found from the rules, not from a list: a grammar with one more rule splits a group
    text = g.text.replace("pass_stmt: PASS\n", "pass_stmt: PASS | PASS LEFTSHIFT\n")
    assert text != g.text
    other = load_grammar(text, "file_input")
    assert not any({"LEFTSHIFT", "RIGHTSHIFT"} <= set(c) for c in interchangeable_classes(other))
    # the recognizer's guards treat every member of a class alike
    assert [set(c) for c in recognizer_classes(g)] == classes


def test_are_jointly_legal(python_grammar):
    g = python_grammar
    # images under interchangeable terminals
    assert are_jointly_legal(g, "NAME", ["EQEQUAL", "DEC_NUMBER"], ["LESSTHAN", "HEX_NUMBER"])
    # one extends the other and the rest always follows: `def f` always goes on with `(`
    assert are_jointly_legal(g, "DEF", ["NAME"], ["NAME", "LPAR"])
    # `x.` and `x(` are not legal in the same places (`import a.b`, `import a(`)
    assert not are_jointly_legal(g, "NAME", ["DOT"], ["LPAR"])
    # `f(a, )` is a call, `a, )` a syntax error; `a,` alone is a tuple
    assert not are_jointly_legal(g, "NAME", ["COMMA"], ["COMMA", "RPAR"])
    # and wherever `x(` is legal, so is `x()`: a call, `def f()`, `class A()`, `case P()`
    assert are_jointly_legal(g, "NAME", ["LPAR"], ["LPAR", "RPAR"])


def test_jointly_legal_classes_within_a_budget_are_finer_never_wrong(python_grammar):
    """A spent budget stops the pairwise comparisons: the classes are then a refinement of the
    unlimited ones (each union and fate still shown), and the answer says it was cut."""
    g = python_grammar
    names = ["DOT", "LPAR", "LPAR RPAR", "LSQB", "EQUAL", "PLUS", "MINUS", "STAR", "COMMA",
             "COMMA RPAR", "AND", "OR", "EQEQUAL", "LESSTHAN", "IF", "FOR", "NAME", "COLON"]
    seqs = {parse_names(g, n.split()) for n in names}
    full = jointly_legal_classes(g, "NAME", seqs)
    cut = jointly_legal_classes(g, "NAME", seqs, budget=WorkBudget(explorer(g), 0))
    assert not full.cut and cut.cut
    assert full.merged > cut.merged  # the comparisons join classes that the signatures leave apart
    class_of = {m: i for i, c in enumerate(full.classes) for m in c.members}
    for c in cut.classes:
        assert len({class_of[m] for m in c.members}) == 1
        if c.fate.value != "checked":
            assert full.classes[class_of[c.members[0]]].fate is c.fate
    assert sorted(m for c in cut.classes for m in c.members) == sorted(seqs)


def test_jointly_legal_work_budget_is_the_same_whatever_came_before(python_grammar):
    """The budget counts parser steps from the explorer's reset, not seconds: a context's
    classes under a budget that cuts them are the same when analysed first or after another
    context (its memos full), and again the same when the memos are forgotten along the way
    (the bound on memory) in one run as in another; a larger budget cuts later."""
    import mask_store.streamline as sl

    g = python_grammar
    names = ["DOT", "LPAR", "LPAR RPAR", "LSQB", "EQUAL", "PLUS", "MINUS", "STAR", "COMMA",
             "COMMA RPAR", "AND", "OR", "EQEQUAL", "LESSTHAN", "IF", "FOR", "NAME", "COLON",
             "MINUS MINUS NAME", "PLUS MINUS NAME RPAR", "LPAR NAME RPAR DOT NAME"]
    seqs = [parse_names(g, n.split()) for n in names]
    ctx = after(g.term_id["NAME"])

    def classes(budget):
        found = sl._jointly_legal(g, ((ctx, seqs),), budget)[0][1][1]
        return sorted(sorted(c.members) + [c.fate.value] for c in found.classes), found.cut, found.merged

    first = classes(1000)
    sl._jointly_legal(g, ((after(g.term_id["RPAR"]), seqs),), None)  # fills the memos
    assert classes(1000) == first
    unlimited = classes(None)
    assert first[1] and not unlimited[1]  # the budget did cut ...
    assert first[2] < unlimited[2]  # ... unions that more work shows
    keep = sl.ANALYSIS_MAX_MEMO
    sl.ANALYSIS_MAX_MEMO = 50  # forgotten between nearly every two comparisons
    try:
        forgetting = classes(1000)
        sl._jointly_legal(g, ((after(g.term_id["RPAR"]), seqs),), None)
        assert classes(1000) == forgetting
        assert classes(None) == unlimited  # the answers don't depend on the memos
    finally:
        sl.ANALYSIS_MAX_MEMO = keep


@pytest.mark.parametrize(
    "text,max_len", [(TOY, 12), (SUMS, 11), (BRACKETS, 8)], ids=["anbn", "sums", "brackets"]
)
@pytest.mark.slow
def test_accepted_alike_agrees_with_brute_force(text, max_len):
    """Sequences that the lockstep test finds accepted alike after X are legal after exactly
    the same prefixes ending in X (every prefix of the sentences up to `max_len`), for every
    X and every pair of sequences of one or two terminals; and it finds some."""
    g = load_grammar(text, "start")
    sentences = _sentences(g, max_len)
    prefixes = {s[:i] for s in sentences for i in range(len(s) + 1)}
    alphabet = sorted({s for r in g.rules for s in r.rhs if s in g.term_id})
    seqs = [s for n in (1, 2) for s in itertools.product(alphabet, repeat=n)]
    ls = Lockstep(Explorer(g))
    claimed = 0
    for x in alphabet:
        ctx = after(g.term_id[x])
        ends = [p for p in prefixes if p and p[-1] == x]
        for u, v in itertools.combinations(seqs, 2):
            if ls.accepted_alike_after(ctx, parse_names(g, u), parse_names(g, v)):
                claimed += 1
                for p in ends:
                    assert _is_prefix(g, p + u) == _is_prefix(g, p + v), (x, u, v, p)
    assert claimed > 0


def test_lockstep_python_facts(python_grammar):
    g = python_grammar
    ls = lockstep(g)
    name = after(g.term_id["NAME"])
    ids = lambda *names: parse_names(g, names)  # noqa: E731
    # `x and` / `x or`: the same reductions up to a comparison, then both go on
    assert ls.accepted_alike_after(name, ids("AND"), ids("OR"))
    assert are_jointly_legal(g, "NAME", ["AND"], ["OR"])
    # `(x).` / `(x) **`: wherever the `)` closes, both are legal or neither; this needs the
    # fact that a parenthesized `x as y` tuple (HAS_AS) sits on a `with`
    assert ls.accepted_alike_after(name, ids("RPAR", "DOT"), ids("RPAR", "POW"))
    # but not `f(x).` / `f(x) =` (a call is no target), nor `{k: x, 0b1` / `{k: x, (` (a
    # mapping pattern's key is a literal)
    assert not ls.accepted_alike_after(name, ids("RPAR", "DOT"), ids("RPAR", "EQUAL"))
    assert not ls.accepted_alike_after(name, ids("COMMA", "BIN_NUMBER"), ids("COMMA", "LPAR"))
    # after an unknown prefix (a comment): `and` and `or` still go together
    assert ls.accepted_alike_after(ANY, ids("AND"), ids("OR"))
    assert not ls.accepted_alike_after(ANY, ids("DOT"), ids("LPAR"))


def test_has_as_nodes_sit_on_with(python_grammar):
    """The rules show that a node carrying HAS_AS (a parenthesized tuple of `x as y` items)
    has a `with` below it; the recognizer agrees on the parenthesized with-statements of a
    text, at every lexeme."""
    from grammar_tools.parsing import guards as G
    from grammar_tools.parsing.guards import accessing_symbols
    from grammar_tools.parsing.incremental import PrefixParser
    from grammar_tools.parsing.recognizer import Recognizer
    from grammar_tools.analyses.semantics import has_as_parent_states

    g = python_grammar
    acc = accessing_symbols(g)
    sem = explorer(g).sem
    assert sem.has_as_parents == frozenset(s for s, sym in enumerate(acc) if sym == "WITH")
    gt = G.build_guard_tables(g, (3, 12))
    assert has_as_parent_states(g, gt, sem.may_as_item) == sem.has_as_parents
    # a grammar without the guard on `as` shows nothing
    kept = {k: v for k, v in gt.guards.items() if v[0] != G.G_AS_IN_WITH}
    unguarded = G.GuardTables(**{**gt.__dict__, "guards": kept})
    assert has_as_parent_states(g, unguarded, sem.may_as_item) is None
    text = (
        "with (open(a) as f, open(b) as g):\n    pass\n"
        "with (x as y):\n    pass\n"
        "with (a, b as c,):\n    pass\n"
    )
    rec = Recognizer(g)
    parser = PrefixParser(rec)
    seen = 0
    for end in range(1, len(text) + 1):
        for node in parser.parse(text[:end].encode()).configs:
            n = node
            while n is not None and n.parent is not None:
                if n.attr & G.HAS_AS:
                    seen += 1
                    assert acc[n.parent.state] == "WITH", text[:end]
                n = n.parent
    assert seen > 0


def test_tuples_are_no_single_targets(python_grammar):
    """An augmented assignment needs a single target; a tuple or a list never is one, even
    when the exploration doesn't know its elements: `a, b +=` is never legal."""
    g = python_grammar
    name = after(g.term_id["NAME"])
    assert is_never_legal_shown(g, name, ["COMMA", "AMPEREQUAL"])
    assert is_never_legal_shown(g, name, ["COMMA", "NAME", "AMPEREQUAL"])
    # but a name, an attribute or a subscript, parenthesized or not, is
    assert not is_never_legal_shown(g, name, ["AMPEREQUAL"])
    assert not is_never_legal_shown(g, name, ["RPAR", "AMPEREQUAL"])
    assert not is_never_legal_shown(g, name, ["RSQB", "AMPEREQUAL"])


def test_jointly_legal_classes_compare_only_classes_no_frame_tells_apart(python_grammar, monkeypatch):
    """The pairwise step tries `are_jointly_legal` only between classes with the same outcomes
    on every frame (a hash, not every pair), and still joins what the pairs join: `LPAR` and
    `LPAR RPAR` after a name; `DOT` (legal after every name) against `COLON` is never tried."""
    from grammar_tools.analyses import jointly_legal as J

    g = python_grammar
    names = ["DOT", "LPAR", "LPAR RPAR", "EQUAL", "COMMA", "COMMA RPAR", "COLON", "FOR", "NAME"]
    seqs = {parse_names(g, n.split()) for n in names}
    tried = []
    real = J.are_jointly_legal

    def spy(grammar, ctx, a, b, python=True):
        tried.append(frozenset((tuple(a), tuple(b))))
        return real(grammar, ctx, a, b, python)

    monkeypatch.setattr(J, "are_jointly_legal", spy)
    found = jointly_legal_classes(g, "NAME", seqs)
    assert not found.cut
    ex = J.explorer(g)
    frames = J._outcome_frames(ex, J.context_from_name(g, "NAME"))
    assert tried
    for pair in tried:
        a, b = sorted(pair) if len(pair) == 2 else (next(iter(pair)),) * 2
        assert [J._kind(ex.run(f, a)) for f in frames] == [J._kind(ex.run(f, b)) for f in frames]
    colon, dot = parse_names(g, ["COLON"]), parse_names(g, ["DOT"])
    assert frozenset((colon, dot)) not in tried
    class_of = {m: i for i, c in enumerate(found.classes) for m in c.members}
    assert class_of[parse_names(g, ["LPAR"])] == class_of[parse_names(g, ["LPAR", "RPAR"])]


def test_collector_paused_gives_the_collector_back_as_it_was():
    """The analyses' workers run with the cyclic collector off; after the block (an error
    included) it is as it was before, on or off; outside a pool's worker nothing is frozen."""
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    with pytest.raises(RuntimeError):
        with collector_paused():
            assert not gc.isenabled()
            with collector_paused():
                assert not gc.isenabled()
            assert not gc.isenabled()  # the inner block leaves it off: it found it off
            raise RuntimeError("an analysis failed")
    assert gc.isenabled() and gc.get_freeze_count() == frozen
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
