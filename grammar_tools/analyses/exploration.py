"""The seed's "unlimited credit" exploration of the grammar's pushdown automaton.

Whether a terminal sequence S is legal after *every* (or after no) prefix that ends in X is
undecidable in general. The seed's method: run the grammar's pushdown automaton from X with an
empty stack, and when a step needs to pop a stack symbol that isn't there, *borrow* it (every
symbol that could be there is a branch); bound the borrowing so that the search ends. The
analyses built on it: `always_legal`, `never_legal` (the sound, incomplete test beside the
exact one), `jointly_legal` and its `lockstep` comparison.

Here the pushdown automaton is the LALR(1) parser itself (the recognizer's table), so the
answer holds for the parser that checks the rows at run time. A branch is a *frame*: the top
of a parser stack, with nothing known below its bottom entry. It starts from a state that X
leads into. A reduction that pops more than is known borrows: the states below are any states
from which the rule's right side leads to what is known (found by walking the automaton's
transitions backwards; the possible bases are kept as one set per goto target). Every such
path is part of some real parser stack, so the frames cover every real context, and no more
than the automaton allows. Each branch ends in one of:

- ACC: S was read to its end;
- REJ: some step is an error (no action), or *may* be one: a guard of the recognizer that the
  frame can't decide (`return` outside a function, an assignment target below what is known),
  a feature of another Python version, a bracket depth or an indentation that could fail;
- CUT: the borrowing budget ran out (unknown).

`outcome(context, seq)` is the set of endings over all branches, `verdict` what it shows:
ACC alone, S is always legal (sound: every real context is covered and nothing uncertain
happens); REJ alone (or nothing), S is never legal (sound as well: a real accepting context
would be a branch that ends in ACC). The search stops as soon as the answer can't be either
(ACC together with REJ or CUT).

The recognizer's own bookkeeping is followed where a frame knows it (`semantics`): each entry
carries the bracket depths it can have (zero, positive: a fixpoint over the automaton, refined
on the way) and the attribute of its node, computed by the recognizer's rules from known
entries and abstract otherwise, so that `x =` after a name is known to pass the target guard.
Python's layout is part of the parser: a `_NEWLINE` is dropped inside brackets, and a line's
indentation is fed as `_INDENT`/`_DEDENT`s (see `contexts`).

`signature(frames, S)` goes one step further (`jointly_legal`): over frames refined by making
a few more stack entries known, two sequences whose outcomes agree frame by frame, each frame
deciding them, are legal after exactly the same prefixes.
"""

from __future__ import annotations

import enum
import functools
import heapq

from ..parsing import recognizer as attributes
from ..parsing import guards as G
from .contexts import AFTER, Context, Layout
from ..grammar import Grammar
from .semantics import MAY_HAVE_AS, NOT_SINGLE, NOT_SINGLE_NO_AS, NOT_TRACKED, UNKNOWN, UNKNOWN_NO_AS, Semantics

ACC, REJ, CUT = 1, 2, 4
D0, DP = 1, 2  # bracket depth zero / positive
DEFAULT_BUDGET = 20  # borrowings per terminal fed
MAX_DEDENTS = 4  # dedents an indentation may stand for before the search gives up

ANY_FRAME = "any"  # the bottom of a frame about which nothing is known: (ANY_FRAME, depths)


class Verdict(enum.Enum):
    """What the exploration shows about a sequence after a context."""

    ALWAYS = "always"  # every branch read it: legal after every prefix (sound)
    NEVER = "never"  # no branch can read it: legal after none (sound)
    SOMETIMES = "sometimes"  # some branch read it: legal after some prefix, not shown after all
    UNDECIDED = "undecided"  # no branch read it, some were cut: perhaps never legal

    @classmethod
    def of(cls, outcome: int) -> Verdict:
        if outcome == ACC:
            return cls.ALWAYS
        if outcome & ~REJ == 0:
            return cls.NEVER
        return cls.SOMETIMES if outcome & ACC else cls.UNDECIDED


class Explorer:
    """Unlimited-credit exploration of one grammar's LALR parser; results are memoized.

    A frame is a tuple of entries (state, depths, attribute), bottom first; the bottom state
    may be a frozenset (borrowed: one of them). `(ANY_FRAME, depths)` is a frame with nothing
    known.
    """

    def __init__(self, grammar: Grammar, semantics: Semantics | None = None, budget: int = DEFAULT_BUDGET):
        self.grammar = grammar
        self.sem = sem = semantics or Semantics.plain(grammar)
        self.budget = budget
        self.layout = lay = Layout.of(grammar)
        self.action = grammar.action
        nts = {n: i for i, n in enumerate(grammar.nonterminals)}
        self.goto = [{nts[n]: s for n, s in row.items()} for row in grammar.goto]
        self.rule_len = [len(r.rhs) for r in grammar.rules]
        self.rule_lhs = [nts[r.lhs] for r in grammar.rules]
        self.rules = grammar.rules
        acc = G.accessing_symbols(grammar)
        self.accessing = acc
        self.maybe_as = [sym in sem.may_has_as for sym in acc]
        n = grammar.n_states
        preds: list[list[int]] = [[] for _ in range(n)]
        for p in range(n):
            for a in grammar.action[p].values():
                if a >= 0:
                    preds[a].append(p)
            for s in grammar.goto[p].values():
                preds[s].append(p)
        self.preds = [sorted(set(x)) for x in preds]
        self.states_after: dict[int, list[int]] = {}
        tid = grammar.term_id
        for s, sym in enumerate(acc):
            if sym in tid:
                self.states_after.setdefault(tid[sym], []).append(s)
        self.layout_terms = frozenset({lay.newline, lay.indent, lay.dedent} - {-1})
        # bracket depths each state can be entered at (a fixpoint)
        poss = [0] * n
        poss[grammar.start_state] = D0
        changed = True
        while changed:
            changed = False
            for p in range(n):
                fp = poss[p]
                if not fp:
                    continue
                for t, a in grammar.action[p].items():
                    if a >= 0:
                        f = self.shift_depth(fp, t, None)
                        if f & ~poss[a]:
                            poss[a] |= f
                            changed = True
                for s in grammar.goto[p].values():
                    if fp & ~poss[s]:
                        poss[s] |= fp
                        changed = True
        self.poss = poss
        self._memo: dict = {}
        self._outcome_memo: dict = {}
        self._feed_memo: dict = {}
        self._top_feed_memo: dict = {}  # (the entries a feed read, t) -> its frames above them
        self._borrowed_feed_memo: dict = {}  # (a frame a borrowing made, t) -> its search's
        self._adv_memo: dict = {}
        self._refine_memo: dict = {}
        self._borrow_memo: dict = {}  # small: keyed by the grammar's states and rules
        self._pred_depth_memo: dict = {}  # small: keyed by the grammar's states
        # frames the searches examined (`feed`, `lockstep`): the unit of work budgets. A feed
        # answered by `_top_feed_memo` counts the steps of the search it stands for; one answered
        # by the other memos (`_feed_memo`, `_borrowed_feed_memo`, ...) counts none
        self.steps = 0
        self.lockstep_memo: dict = {}  # `lockstep.Lockstep`'s, forgotten with these
        self._has_as = G.HAS_AS if sem.tracks_attributes else 0
        self._attr_mode = [_attr_mode(sem, kind, const, rule.rhs) for (kind, const), rule in zip(sem.rule_attr, self.rules)]
        # (state * 1024 + terminal) -> (uncertain, target guard or None): the checks before acting
        self._checks = {k: (k in sem.uncertain, sem.target_guards.get(k))
                        for k in set(sem.uncertain) | set(sem.target_guards)}

    def memo_entries(self) -> int:
        """Entries in the memos that grow with the sequences analysed."""
        return (len(self._memo) + len(self._outcome_memo) + len(self.lockstep_memo)
                + self.search_memo_entries())

    def forget(self, searches: bool = True) -> None:
        """Empties the memos that grow (every answer is the same without them, only slower);
        `searches` False keeps the feeds' (`feed`, `advance`, `refine`: the searches, the
        costly part to redo) and empties those of the answers built on them."""
        memos = [self._memo, self._outcome_memo, self.lockstep_memo]
        if searches:
            memos += [self._feed_memo, self._top_feed_memo, self._borrowed_feed_memo, self._adv_memo,
                      self._refine_memo]
        for memo in memos:
            memo.clear()

    def search_memo_entries(self) -> int:
        return (len(self._feed_memo) + len(self._top_feed_memo) + len(self._borrowed_feed_memo)
                + len(self._adv_memo) + len(self._refine_memo))

    def reset(self) -> None:
        """`forget`, and the step count back to zero: what a search does from here is the same
        whatever was asked before (the work budgets count from here)."""
        self.forget()
        self.steps = 0

    def shift_depth(self, df: int, t: int, target: int | None) -> int:
        """Depths after shifting terminal t from depths df (into state `target`)."""
        sem = self.sem
        if t in sem.opens:
            return DP
        if t in sem.closes:
            if not df & DP:
                return 0
            return (D0 | DP) if target is None else self.poss[target]
        if t in self.layout_terms:
            return df & D0
        return df

    # ---------------------------------------------------------------- public

    def outcome(self, context: Context, seq: tuple[int, ...]) -> int:
        """The set (ACC | REJ | CUT bits) of endings of all branches; see the module doc."""
        seq = tuple(seq)
        key = (context, seq)
        res = self._outcome_memo.get(key)
        if res is None:
            res = 0
            for frame in self.start_frames(context):
                res |= self.run(frame, seq)
                if _decided_mixed(res):
                    break
            self._outcome_memo[key] = res
        return res

    def verdict(self, context: Context, seq) -> Verdict:
        return Verdict.of(self.outcome(context, seq))

    def extension_outcome(self, context: Context, prefix, suffix) -> int:
        """The endings of `suffix` over the branches that have read `prefix` after `context`
        (ACC alone: wherever `prefix` is legal, `prefix + suffix` is too)."""
        frames = self.frames_after(context, prefix)
        res = 0
        for f in frames:
            res |= self.run(f, tuple(suffix))
            if _decided_mixed(res):
                break
        return res

    def frames_after(self, context: Context, prefix) -> tuple:
        """The frames of the branches that read `prefix` after `context`."""
        frames = tuple(self.start_frames(context))
        for e in prefix:
            nxt: dict = {}
            for f in frames:
                for f2 in self.advance(f, e)[0]:
                    nxt[f2] = None
            frames = tuple(nxt)
        return frames

    def covering_frames(self, context: Context, prefix) -> tuple | None:
        """The frames after reading `prefix` after `context`, when together they stand for
        every stack on which the parser has read it (no branch was cut: None otherwise)."""
        frames = tuple(self.start_frames(context))
        for e in prefix:
            nxt: dict = {}
            for f in frames:
                got, bad = self.advance(f, e)
                if bad & CUT:
                    return None
                for f2 in got:
                    nxt[f2] = None
            frames = tuple(nxt)
        return frames

    def any_top(self, depths: int) -> list:
        """The frames of one known entry that together stand for every stack at `depths`
        (the ANY_FRAME frame) that rows are checked on: between two lexemes the parser has
        just shifted a terminal (its node carries no attribute) or read nothing yet, so one
        frame per state that a terminal leads into, and the start state."""
        tid = self.grammar.term_id
        out = []
        for s in range(len(self.poss)):
            d = self.poss[s] & depths
            if d and (self.accessing[s] in tid or s == self.grammar.start_state):
                out.append(((s, d, 0),))
        return out

    def start_frames(self, context: Context) -> list:
        lay = self.layout
        if context.kind == AFTER:
            return [((s, self.poss[s], 0),) for s in self.states_after.get(context.terminal, [])]
        if context.kind == "any":
            return [(ANY_FRAME, D0 | DP)]
        # after a newline: fed at depth zero, dropped inside brackets (then nothing is known)
        fed = [lay.newline] if context.kind == "newline" else [lay.newline, lay.indent, lay.dedent]
        out = [((s, D0, 0),) for t in fed for s in self.states_after.get(t, []) if self.poss[s] & D0]
        out.append((ANY_FRAME, DP))
        return out

    def refined_frames(self, context: Context, depth: int = 1) -> tuple:
        """The start frames of `context` with `depth` more stack entries made known (see
        `refine`)."""
        return self.refine(self.start_frames(context), depth)

    def refine(self, frames, depth: int = 1) -> tuple:
        """The frames with `depth` more stack entries made known below each: one frame per
        path into its bottom state (a borrowed set of states splits into its members first).
        Together they stand for the same contexts, but each for fewer, so that outcomes split
        less (see `signature`)."""
        frames = tuple(frames)
        for _ in range(depth):
            out: dict = {}
            for f in frames:
                out.update(self._refined_once(f))
            frames = tuple(out)
        return frames

    def _refined_once(self, f) -> dict:
        """`refine` of one frame by one entry, as an ordered set (a dict). Memoized: the
        prefixes of many sequences lead to the same frames."""
        hit = self._refine_memo.get(f)
        if hit is not None:
            return hit
        out: dict = {}
        if f[0] == ANY_FRAME:
            out[f] = None
        else:
            bottom, bd, ba = f[0]
            rest = f[1:]
            above: dict = {}  # the entries above x recomputed, by x's depths (at most three)
            for x in [bottom] if isinstance(bottom, int) else sorted(bottom):
                if not self.preds[x]:
                    out[((x, bd & self.poss[x] or bd, ba),) + rest] = None
                    continue
                for p, dp, dx in self._pred_depths(x):
                    if dx not in above:
                        above[dx] = self._redepth(rest, dx)
                    up = above[dx]
                    if up is not None:
                        out[((p, dp, UNKNOWN), (x, dx, ba)) + up] = None
        self._refine_memo[f] = out
        return out

    def _pred_depths(self, x: int) -> list:
        """(p, its depths, x's depths entered from p) for each state p that leads into x, where
        x can be entered from p at all (what `_refined_once` puts below x). Memoized."""
        hit = self._pred_depth_memo.get(x)
        if hit is None:
            hit = []
            for p in self.preds[x]:
                dp = self.poss[p]
                dx = self._step_depth(dp, x) & self.poss[x]
                if dx:
                    hit.append((p, dp, dx))
            self._pred_depth_memo[x] = hit
        return hit

    def _step_depth(self, df: int, s: int) -> int:
        """The depths on entering state s from depths df (before what s itself allows)."""
        t = self.grammar.term_id.get(self.accessing[s])
        return self.shift_depth(df, t, s) if t is not None else df

    def _redepth(self, entries: tuple, df: int) -> tuple | None:
        """The entries with their depths recomputed upward from depths `df` below the first
        (None: inconsistent); entries whose depths stay are kept as they are."""
        out = []
        for e in entries:
            s, d, a = e
            nd = self._step_depth(df, s) & self.poss[s] & d
            if not nd:
                return None
            out.append(e if nd == d else (s, nd, a))
            df = nd
        return tuple(out)

    def signature(self, frames, seq) -> tuple | None:
        """Per frame: True (every context of the frame accepts `seq`) or False (none does);
        None if some frame is undecided. Two sequences with the same signature over frames
        that cover a context are legal in exactly the same prefixes (`are_jointly_legal`)."""
        out = []
        seq = tuple(seq)
        for f in frames:
            o = self.run(f, seq)
            if o == ACC:
                out.append(True)
            elif o & ~REJ == 0:
                out.append(False)
            else:
                return None
        return tuple(out)

    # ---------------------------------------------------------------- search

    def run(self, frame, seq: tuple[int, ...]) -> int:
        """The endings (ACC | REJ | CUT) of reading `seq` from `frame`. Memoized."""
        if not seq:
            return ACC
        key = (frame, seq)
        memo = self._memo
        r = memo.get(key)
        if r is not None:
            return r
        frames, res = self.advance(frame, seq[0])
        rest = seq[1:]
        for f in frames:
            if _decided_mixed(res):
                break
            res |= self.run(f, rest)
        memo[key] = res
        return res

    def advance(self, frame, e: int):
        """All ways of reading one element from `frame`: (the frames after it, the endings
        of the branches that can't read it). Memoized."""
        key = (frame, e)
        hit = self._adv_memo.get(key)
        if hit is None:
            hit = self._adv_memo[key] = self._advance(frame, e)
        return hit

    def _advance(self, frame, e: int):
        lay = self.layout
        if frame[0] == ANY_FRAME:
            return self._advance_any(frame[1], e)
        if not (lay.is_indentation(e) or e == lay.newline):
            return self.feed(frame, e)
        top, df, at = frame[-1]
        out = []
        bad = 0
        if df & DP:  # inside brackets: nothing
            out.append(frame[:-1] + ((top, DP, at),))
        if not df & D0:
            return tuple(out), bad
        f0 = frame[:-1] + ((top, D0, at),)
        if e == lay.newline:
            got, bad = self.feed(f0, e)
            return tuple(out) + got, bad
        # an indentation: an error, the same level, one INDENT or some DEDENTs
        bad |= REJ
        out.append(f0)
        got, b2 = self.feed(f0, lay.indent)
        out.extend(got)
        bad |= b2
        cur = [f0]
        for _ in range(MAX_DEDENTS):
            nxt = []
            for f in cur:
                got, b2 = self.feed(f, lay.dedent)
                bad |= b2
                nxt.extend(got)
            out.extend(nxt)
            cur = nxt
            if not cur:
                break
        else:
            bad |= CUT
        return tuple(dict.fromkeys(out)), bad

    def _advance_any(self, df: int, e: int):
        """The first element after an unknown prefix (depths `df` possible)."""
        lay = self.layout
        bad = REJ  # some prefix rejects it (and for a layout element, some indentation)
        out = []
        if lay.is_indentation(e) or e == lay.newline:
            # inside brackets both are nothing; an indentation may also keep the level
            keep = df if lay.is_indentation(e) else df & DP
            if keep:
                out.append((ANY_FRAME, keep))
            if df & D0:
                fed = [lay.newline] if e == lay.newline else [lay.indent, lay.dedent]
                for t in fed:
                    for s in self.states_after.get(t, []):
                        if self.poss[s] & D0:
                            out.append(((s, D0, 0),))
            return tuple(out), bad
        for s in self.states_after.get(e, []):
            f = self.shift_depth(df, e, s) & self.poss[s]
            if f:
                out.append(((s, f, 0),))
        return tuple(out), bad

    def feed(self, frame, t: int):
        """All ways of feeding terminal t: (frames after its shift, endings that failed).
        Memoized on (frame, t): sequences that share a prefix share the work; and on the part
        of the frame the search read (`_top_feed_memo`): a frame whose top entries are those
        of one fed before has that one's answer with its own entries below them."""
        key = (frame, t)
        hit = self._feed_memo.get(key)
        if hit is not None:
            return hit
        top_memo = self._top_feed_memo
        n = len(frame)
        for k in range(1, n + 1):
            sub = top_memo.get((frame[n - k :], t))
            if sub is not None:
                got, bad, steps = sub
                self.steps += steps  # the work the search would have done (see `steps`)
                if k < n:
                    below = frame[: n - k]
                    got = tuple([below + f for f in got])
                r = self._feed_memo[key] = (got, bad)
                return r
        steps = self.steps
        got, bad, low = self._feed_uncached(frame, t, True)
        if bad & CUT:  # perhaps only where a borrowed frame's search was apart: search as one
            got, bad, low = self._feed_uncached(frame, t, False)
        got = tuple(dict.fromkeys(got))
        r = self._feed_memo[key] = (got, bad)
        if low:
            top_memo[(frame[low:], t)] = (tuple([f[low:] for f in got]), bad, self.steps - steps)
        return r

    def _feed_uncached(self, frame, t: int, split: bool, budget: int | None = None):
        """`feed`'s search, with `budget` borrowings (None: `self.budget`): (the frames, the
        endings, `low`: the entries of `frame` below index `low` were neither read nor changed,
        nor borrowed from below; every frame found starts with them). Feeding t to any frame
        that ends with `frame[low:]` is the same search on the entries above them, with the
        same steps: what `feed` reuses.

        `split`: what the frames that a borrowing makes lead to is searched apart, once per
        frame and terminal (`_borrowed_feed`): these frames (two entries) are the same few
        wherever the grammar borrows alike, so many searches end in the same ones. Where no
        search comes to its budget's end (no CUT), the frames found and the endings are those
        of one search (see `_borrowed_feed`); with a CUT, `feed` searches again as one."""
        sem = self.sem
        action = self.action
        checks = self._checks
        rule_len = self.rule_len
        reduced = self.reduced
        pop, push = heapq.heappop, heapq.heappush
        has_as = self._has_as
        out = []
        bad = 0
        # frames by remaining budget, highest first: each frame is expanded once, with the
        # most budget any path leaves it, so the result doesn't depend on the search order
        # (nor on how the LALR states happen to be numbered)
        # the lowest entry of `frame` read so far: its top. Every frame of the search starts
        # with the entries below `low` (a reduction keeps those below the one its goto reads)
        low = len(frame) - 1
        work = [(-(self.budget if budget is None else budget), 0, frame)]
        done: set = set()
        tick = 0
        steps = 0
        while work:
            nb, _, fr = pop(work)
            if fr in done:
                continue
            done.add(fr)
            steps += 1
            st, df, at = fr[-1]
            a = action[st].get(t)
            if a is None:
                bad |= REJ
                continue
            chk = checks.get(st * 1024 + t)
            code = None
            if chk is not None:
                if chk[0]:  # uncertain
                    bad |= REJ
                code = chk[1]
            if code is not None:
                if at < 0:
                    bad |= REJ
                    if code == G.G_SINGLE and at in (NOT_SINGLE, NOT_SINGLE_NO_AS):
                        continue  # known to fail
                elif not attributes.target_guard_holds(code, at):
                    bad |= REJ
                    continue
            if a >= 0:
                if at >= 0:
                    as_flag = at & has_as
                else:
                    as_flag = at in MAY_HAVE_AS and self.maybe_as[st]
                if as_flag and not (t == sem.colon and st in sem.with_colon):
                    bad |= REJ
                    if at >= 0:
                        continue
                if t in sem.closes and df & D0:
                    bad |= REJ  # at depth zero a closing bracket is an error
                if t == self.layout.dedent:
                    bad |= REJ  # the indentation stack may be empty
                f = self.shift_depth(df, t, a)
                if not f:
                    continue
                out.append(fr + ((a, f, 0),))
                continue
            r = ~a
            base = len(fr) - rule_len[r]  # the entries the reduction keeps
            if base <= 0:  # it borrows what lies below the known part
                low = 0
                if nb >= 0:  # no budget left
                    bad |= CUT
                    continue
                nb += 1
                if split:
                    for f2 in reduced(fr, r):
                        got, b2 = self._borrowed_feed(f2, t)
                        out.extend(got)
                        bad |= b2
                    continue
            elif base - 1 < low:  # the goto reads the entry below what it pops
                low = base - 1
            for f2 in reduced(fr, r):
                if f2 not in done:
                    tick += 1
                    push(work, (nb, tick, f2))
        self.steps += steps
        return out, bad, low

    def _borrowed_feed(self, frame, t: int):
        """What feeding t finds from a frame that a borrowing made (in a search that has not
        borrowed before): the search from it alone, with the budget left there (one less).
        Memoized. Why it is the same as going on in the one search: a frame reachable from
        it is reachable in both, and one search gives each frame the most budget of any path
        to it, at least the budget it has here, so the endings agree unless one of these
        searches cuts (`_feed_uncached`'s `split`)."""
        key = (frame, t)
        hit = self._borrowed_feed_memo.get(key)
        if hit is None:
            got, bad, _ = self._feed_uncached(frame, t, False, self.budget - 1)
            hit = self._borrowed_feed_memo[key] = (tuple(dict.fromkeys(got)), bad)
        return hit

    def reduced(self, fr, r: int) -> list:
        """The frames after reducing rule r on frame `fr`: one, or, where the rule pops more
        than the frame knows (or reaches its borrowed bottom), one per goto target of the
        states that can lie below (found by walking the rule's right side backwards)."""
        n = self.rule_len[r]
        m = len(fr) - n
        if m > 0:
            mode, value = self._attr_mode[r]
            if mode == _ATTR_CONST:
                attr = value
            elif mode == _ATTR_PASS:  # `Semantics.synthesized` of a PASS rule, inline
                attr = fr[-1][2]
                if value and attr in MAY_HAVE_AS:
                    attr = UNKNOWN_NO_AS if attr == UNKNOWN else NOT_SINGLE_NO_AS
            else:
                attr = self.sem.synthesized(r, self.rules[r].rhs, [e[2] for e in fr[m:]])
            bs, bdf, _ = fr[m - 1]
            if type(bs) is int:
                if attr >= 0 and attr & self._has_as and not self._may_hold(bs, attr):
                    return []
                g = self.goto[bs].get(self.rule_lhs[r])
                return [fr[:m] + ((g, bdf, attr),)] if g is not None else []
            # the borrowed bottom: one branch per goto target
            tops = self._borrowed(bs, r, -1, self._filters(attr))
        else:
            attr = self.sem.synthesized(r, self.rules[r].rhs, [UNKNOWN] * -m + [e[2] for e in fr])
            tops = self._borrowed(fr[0][0], r, -m, self._filters(attr))
        return [((b, fl, UNKNOWN), (g, fl, attr)) for b, fl, g in tops]

    def _filters(self, attr: int) -> bool:
        """Whether `_may_hold` keeps only some bases for a node with attribute `attr`."""
        return self.sem.has_as_parents is not None and attr >= 0 and bool(attr & self._has_as)

    def _borrowed(self, bottom, r: int, k: int, filtered: bool) -> tuple:
        """(bottom, depths, goto target) of the frames a reduction of rule r makes from a frame
        whose bottom is `bottom` when it pops k entries below it (k = -1: the bottom is a
        borrowed set and is itself the base); `filtered`: only the bases that may hold a node
        with HAS_AS (`_may_hold`). Memoized: the same borrowing recurs on many frames."""
        key = (bottom, r, k, filtered)
        hit = self._borrow_memo.get(key)
        if hit is not None:
            return hit
        cands = {bottom} if isinstance(bottom, int) else set(bottom)
        if k >= 0:
            rhs = self.rules[r].rhs
            for i in range(k - 1, -1, -1):
                sym = rhs[i]
                cands = {x for c in cands for x in self.preds[c] if self.accessing[x] == sym}
            cands = {x for c in cands for x in self.preds[c]}
        if filtered:
            cands &= self.sem.has_as_parents
        lhs = self.rule_lhs[r]
        by_goto: dict[int, list[int]] = {}
        for x in cands:
            g = self.goto[x].get(lhs)
            if g is not None:
                by_goto.setdefault(g, []).append(x)
        out = []
        for g, xs in sorted(by_goto.items()):
            fl = 0
            for x in xs:
                fl |= self.poss[x]
            out.append((xs[0] if len(xs) == 1 else frozenset(xs), fl, g))
        hit = self._borrow_memo[key] = tuple(out)
        return hit

    def _may_hold(self, base: int, attr: int) -> bool:
        """Whether a node with attribute `attr` can be pushed on a node in state `base`: one
        carrying HAS_AS only on a WITH state (`semantics.has_as_parent_states`)."""
        parents = self.sem.has_as_parents
        return parents is None or attr < 0 or not attr & self._has_as or base in parents


_ATTR_CONST, _ATTR_PASS, _ATTR_RULE = range(3)


def _attr_mode(sem: Semantics, kind: int, const: int, rhs: tuple) -> tuple[int, int]:
    """How `reduced` computes the attribute of a rule's node (`Semantics.synthesized`): a
    constant (the value), passed up from the last child (whether HAS_AS is ruled out on the
    way: the child's symbol can't carry it), or by `synthesized` itself."""
    if kind == NOT_TRACKED:
        return _ATTR_CONST, UNKNOWN
    if kind == G.CONST:
        return _ATTR_CONST, const
    if kind == G.PASS and rhs:
        return _ATTR_PASS, int(rhs[-1] not in sem.may_has_as)
    return _ATTR_RULE, 0


def _decided_mixed(res: int) -> bool:
    """Neither always nor never can come out of this any more."""
    return bool(res & ACC) and bool(res & (REJ | CUT))


def explorer(grammar: Grammar, python: bool = True, budget: int = DEFAULT_BUDGET) -> Explorer:
    """The explorer of a grammar; `python`: with the recognizer's guards and layout rules.
    One per (grammar, python, budget) however they are passed (`reset` acts on the one every
    analysis uses)."""
    return _explorer(grammar, python, budget)


@functools.lru_cache(maxsize=8)
def _explorer(grammar: Grammar, python: bool, budget: int) -> Explorer:
    sem = Semantics.of_recognizer(grammar) if python else Semantics.plain(grammar)
    return Explorer(grammar, sem, budget)
