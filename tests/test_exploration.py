"""The exploration's steps against the recognizer's, on stacks the recognizer really builds.

A frame made of the top entries of a real stack stands for that stack (among others), so
whatever the recognizer does on the stack, the exploration must do on the frame: a reduction
gives the recognizer's goto state over the real base with an attribute that stands for the
recognizer's (`semantics.admits`), equal when the children's attributes are known; feeding a
terminal gives a frame that the recognizer's new stack matches, or, where the recognizer
rejects it, a branch that fails. Stacks come from random walks over the table and from every
lexeme of a text with targets, stars and parenthesized with-items; attributes are also hidden
(made abstract) at random."""

from __future__ import annotations

import random

import pytest

from grammar_tools.parsing.lookahead import accepted
from grammar_tools.parsing import guards as G
from grammar_tools.analyses.exploration import CUT, D0, DP, REJ, explorer
from grammar_tools.grammar import load_grammar
from grammar_tools.parsing.incremental import PrefixParser
from grammar_tools.parsing.recognizer import Recognizer
from grammar_tools.analyses.semantics import NOT_SINGLE, NOT_SINGLE_NO_AS, UNKNOWN, UNKNOWN_NO_AS, admits

ABSTRACT = (UNKNOWN, UNKNOWN_NO_AS, NOT_SINGLE, NOT_SINGLE_NO_AS)

TEXT = """\
import os
a, *b = c = f(x)[1].y
del a, b[0], (c.d)
x += 1; y: int = 2
for (i, j), *k in z: pass
with (open(p) as f, g() as (h, *m)):
    [q, r] = s, t = u
    print(*args, **kw)
with (a as b): pass
def f(a, /, b=1, *c, d, **e) -> int:
    return (yield a), lambda x: x
class C(B, metaclass=M):
    async def g(self):
        async with a as b:
            await b
        return [x async for x in y if x]
match p:
    case [1, *rest] | {"k": v, **kw}:
        pass
print(a if b else c, {k: v for k, v in d})
"""


@pytest.fixture(scope="module")
def rec():
    return Recognizer(load_grammar(), python_version=(3, 12))


def _walk_stacks(rec: Recognizer, rng: random.Random, walks: int, steps: int) -> list:
    """The stacks of random walks: at each step a random terminal that the recognizer accepts."""
    out = []
    for _ in range(walks):
        node = rec.initial()
        for _ in range(steps):
            acc = accepted(rec, node) & ~(1 << rec.END)
            terms = [t for t in range(rec.n_terminals) if acc >> t & 1]
            if not terms:
                break
            node = rec.feed(node, rng.choice(terms))
            assert node is not None
            out.append(node)
    return out


def _text_stacks(rec: Recognizer) -> list:
    """The distinct stacks after every lexeme of TEXT."""
    parser = PrefixParser(rec)
    data = TEXT.encode()
    stacks = {node.key(): node for end in range(1, len(data) + 1) for node in parser.parse(data[:end]).configs}
    return list(stacks.values())


def _frame(node, k: int, rng: random.Random, hide: float) -> tuple:
    """The top `k` entries of the stack as a frame (bottom first), attributes hidden at rate
    `hide`: replaced by a random abstract value that stands for them."""
    entries = []
    n = node
    for _ in range(k):
        attr = n.attr
        if rng.random() < hide:
            attr = rng.choice([v for v in ABSTRACT if admits(v, attr)])
        entries.append((n.state, D0 if n.depth == 0 else DP, attr))
        n = n.parent
    return tuple(reversed(entries))


def _matches(frame, node) -> bool:
    """Whether the real stack under `node` is one that `frame` stands for."""
    n = node
    for state, depths, attr in reversed(frame):
        if n is None:
            return False
        same = state == n.state if isinstance(state, int) else n.state in state
        if not same or not depths & (D0 if n.depth == 0 else DP) or not admits(attr, n.attr):
            return False
        n = n.parent
    return True


def _reductions(rec: Recognizer, stacks) -> list:
    """(stack, rule) for every reduction that feeding some terminal makes on the stacks (each
    chain of reductions followed to its shift), once per distinct stack and rule."""
    seen = set()
    out = []
    for node in stacks:
        for t, a in rec.action[node.state].items():
            cur = node
            while a is not None and a < 0:
                key = (cur.key(), ~a)
                if key not in seen:
                    seen.add(key)
                    out.append((cur, ~a))
                cur = rec._reduce(cur, ~a)
                a = rec.action[cur.state].get(t)
    return out


def _depth(node) -> int:
    n = 0
    while node is not None:
        n += 1
        node = node.parent
    return n


@pytest.mark.parametrize("hide", [0.0, 0.4], ids=["known", "hidden"])
def test_reductions_agree_with_the_recognizer(rec, hide):
    ex = explorer(rec.grammar)
    rng = random.Random(7)
    stacks = _text_stacks(rec) + _walk_stacks(rec, rng, walks=30, steps=30)
    checked = exact = borrowed = 0
    attrs = set()
    for node, r in _reductions(rec, stacks):
        size = _depth(node)
        red = rec._reduce(node, r)
        attrs.add(red.attr)
        n = rec.rule_len[r]
        for k in sorted({1, n, n + 1, size} & set(range(1, size + 1))):
            frame = _frame(node, k, rng, hide)
            got = ex.reduced(frame, r)
            assert any(_matches(f, red) for f in got), (node, r, k, frame, got)
            checked += 1
            if k > n:
                assert len(got) == 1  # the base is known: one frame, the recognizer's
                if all(e[2] >= 0 for e in frame[k - n :]):
                    assert got[0][-1][2] == red.attr
                    exact += 1
            else:
                borrowed += 1
    # the stacks exercised every attribute that the guards read, and both ways of reducing
    for bit in (G.TARGET, G.SINGLE, G.STAR, G.STARRED, G.HAS_STAR, G.HAS_AS, G.AS_ITEM):
        assert any(a & bit for a in attrs), bit
    assert checked > 1000 and borrowed > 100 and (exact > 100 or hide)


@pytest.mark.parametrize("hide", [0.0, 0.4], ids=["known", "hidden"])
def test_feeding_agrees_with_the_recognizer(rec, hide):
    """Every terminal fed to the recognizer on a real stack: where it is accepted, one of the
    exploration's frames is the recognizer's new stack; where it is refused, some branch fails."""
    ex = explorer(rec.grammar)
    rng = random.Random(11)
    layout = {rec.NEWLINE, rec.INDENT, rec.DEDENT}
    accepted = refused = 0
    terminals = [t for t in range(rec.n_terminals) if t != rec.END and t not in rec.grammar.ignored]
    stacks = [(node, terminals) for node in _text_stacks(rec)]
    stacks += [(node, rng.sample(terminals, 10)) for node in _walk_stacks(rec, rng, walks=30, steps=30)]
    for node, fed in stacks:
        size = _depth(node)
        for t in fed:
            if t in layout and node.depth:
                continue
            frame = _frame(node, rng.randint(1, min(size, 6)), rng, hide)
            got, bad = ex.feed(frame, t)
            after = rec.feed(node, t)
            if after is None:
                assert bad & (REJ | CUT), (node, rec.grammar.terminals[t], frame)
                refused += 1
            elif not bad & CUT:
                assert any(_matches(f, after) for f in got), (node, rec.grammar.terminals[t], frame, got)
                accepted += 1
    assert accepted > 300 and refused > 3000, (accepted, refused)



def test_feeding_through_the_memos_is_one_search(rec):
    """`feed` answers from what it searched before: a frame whose top entries are those a
    feed read (`_top_feed_memo`) and the frames a borrowing makes, searched apart
    (`_borrowed_feed_memo`). Its frames, endings and counted steps are those of one search
    from the frame alone (`_feed_uncached` without splitting), on frames of real stacks of
    every height, with known and hidden attributes, each terminal fed once the memos hold
    what the frames before them needed."""
    ex = explorer(rec.grammar)
    ex.reset()
    rng = random.Random(5)
    terminals = [t for t in range(rec.n_terminals) if t != rec.END and t not in rec.grammar.ignored]
    lifted = compared = 0
    for node in _text_stacks(rec) + _walk_stacks(rec, rng, walks=20, steps=30):
        size = _depth(node)
        frame = _frame(node, rng.randint(1, min(size, 6)), rng, rng.choice([0.0, 0.4]))
        for t in rng.sample(terminals, 12):
            if (frame, t) in ex._feed_memo:
                continue
            n = len(frame)
            top = any((frame[n - k :], t) in ex._top_feed_memo for k in range(1, n + 1))
            steps = ex.steps
            got, bad = ex.feed(frame, t)
            counted = ex.steps - steps
            want, want_bad, _ = ex._feed_uncached(frame, t, False)
            assert set(got) == set(want) and len(got) == len(set(got)), (frame, t)
            assert bad == want_bad, (frame, t)
            if top:
                assert counted == ex.steps - steps - counted  # the steps of the search it saved
                lifted += 1
            compared += 1
    assert len(ex._borrowed_feed_memo) > 100 and lifted > 100 and compared > 3000, (
        len(ex._borrowed_feed_memo), lifted, compared)
