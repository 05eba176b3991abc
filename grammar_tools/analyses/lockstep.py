"""Two sequences fed in lockstep on the same stacks: are they accepted alike?

`accepted_alike(frame, u, v)` is sound: True means that on every stack the frame stands for,
the recognizer accepts u exactly when it accepts v (any Python version, guards on). A common
first element is read once (every branch then compares the rests). Different first terminals
a, b: as long as the recognizer does the same for both (the same checks, then both errors, or
the same reduction), their runs are one run, whatever lies below the frame; when both shift
alike (into the same state, the same bracket depth), the rests are compared from there. Where
they part otherwise, the exploration must decide both ways on that frame: both always or both
never accepted; if it can't, the frame is split by the attribute of its top node, and (up to
`refine` times) refined by one more known stack entry, and each part is compared the same way.

Unlike `Explorer.signature`, the stack below the point where they part needn't be known: a
reduction chain that pops deep into the stack is followed for both at once. This is how
`jointly_legal` shows `x and` / `x or` and `f(x).` / `f(x) **` legal in the same places.
"""

from __future__ import annotations

import functools
import heapq

from .contexts import Context
from .exploration import ACC, ANY_FRAME, CUT, DEFAULT_BUDGET, REJ, Explorer, explorer
from ..grammar import END, Grammar
from ..parsing.guards import AS_ITEM, HAS_AS, HAS_STAR, SINGLE, STAR, STARRED, TARGET
from .semantics import MAY_HAVE_AS, NOT_SINGLE, NOT_SINGLE_NO_AS


class Lockstep:
    """Lockstep comparisons over one explorer's frames; results are memoized."""

    def __init__(self, ex: Explorer):
        self.ex = ex
        self._memo = ex.lockstep_memo  # forgotten with the explorer's (`Explorer.forget`)
        # elements compared only through the exploration: the layout and the end of input
        self._special = ex.layout_terms | {ex.grammar.term_id.get(END, -1)}

    def accepted_alike_after(self, context: Context, u, v) -> bool:
        """Sound: True means that after every prefix of `context`, u is legal exactly when v
        is (`accepted_alike` on every start frame)."""
        return all(self.accepted_alike(f, u, v) for f in self.ex.start_frames(context))

    def accepted_alike(self, frame, u, v, refine: int = 0) -> bool:
        """Sound: True means that on every stack `frame` stands for, the recognizer accepts
        the sequence u exactly when it accepts v (see the module doc). Memoized."""
        key = (frame, tuple(u), tuple(v), refine)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = self._accepted_alike(frame, key[1], key[2], refine)
        return hit

    def decided_alike(self, frame, u, v) -> bool:
        """Both sequences always accepted on `frame`, or both never."""
        run = self.ex.run
        o1 = run(frame, tuple(u))
        if o1 != ACC and o1 & ~REJ:
            return False
        o2 = run(frame, tuple(v))
        return o1 == o2 == ACC or (o1 & ~REJ == 0 and o2 & ~REJ == 0)

    def _accepted_alike(self, frame, u: tuple, v: tuple, refine: int) -> bool:
        ex = self.ex
        if u == v:
            return True
        if not u or not v:
            return self.decided_alike(frame, u, v)
        if frame[0] == ANY_FRAME:
            return self.decided_alike(frame, u, v) or (
                u[0] != v[0] and all(self.accepted_alike(f, u, v, refine) for f in ex.any_top(frame[1]))
            )
        if u[0] == v[0]:
            got, bad = ex.advance(frame, u[0])
            if bad & CUT:  # some stacks are not covered by `got`
                return self.decided_alike(frame, u, v)
            return all(self.accepted_alike(f, u[1:], v[1:], refine) for f in got)
        a, b = u[0], v[0]
        if a in self._special or b in self._special or ex.layout.is_indentation(a) or ex.layout.is_indentation(b):
            return self.decided_alike(frame, u, v)
        sem = ex.sem
        checks = sem.step_checks
        closes, opens = sem.closes, sem.opens
        more = len(u) > 1 or len(v) > 1
        brackets_alike = (a in closes) == (b in closes) and (not more or (a in opens) == (b in opens))
        work = [(-ex.budget, 0, frame)]
        done: set = set()
        tick = 0
        while work:
            nb, _, fr = heapq.heappop(work)
            if fr in done:
                continue
            done.add(fr)
            ex.steps += 1
            budget = -nb
            st, df, _ = fr[-1]
            act_a, act_b = ex.action[st].get(a), ex.action[st].get(b)
            if checks.get(st * 1024 + a) == checks.get(st * 1024 + b):
                if act_a is None and act_b is None:
                    continue  # both errors
                if act_a is not None and act_b is not None:
                    if act_a >= 0 and act_b >= 0:
                        colon_alike = sem.colon not in (a, b) or st not in sem.with_colon
                        if brackets_alike and colon_alike and (not more or act_a == act_b):
                            if not more:
                                continue  # both shifted
                            depth = ex.shift_depth(df, a, act_a)
                            if depth and not self.accepted_alike(fr + ((act_a, depth, 0),), u[1:], v[1:], refine):
                                return False
                            continue
                    elif act_a == act_b:  # the same reduction
                        r = ~act_a
                        if ex.rule_len[r] >= len(fr):
                            if budget <= 0:
                                return self.decided_alike(frame, u, v)
                            budget -= 1
                        for f2 in ex.reduced(fr, r):
                            if f2 not in done:
                                tick += 1
                                heapq.heappush(work, (-budget, tick, f2))
                        continue
            # they part here: both must be decided alike on this frame, or on each part of it
            if self.decided_alike(fr, u, v):
                continue
            if all(self.decided_alike(f2, u, v) for f2 in self.with_known_attribute(fr)):
                continue
            if not refine or not all(self.accepted_alike(f2, u, v, refine - 1) for f2 in ex.refine([fr], 1)):
                return False
        return True

    def with_known_attribute(self, frame) -> list:
        """The frame split by the attribute of its top entry, where the frame doesn't know it:
        one frame per value of the attribute bits that the checks read (together they stand
        for the same stacks; each decides the guards on the top node)."""
        top, df, at = frame[-1]
        sem = self.ex.sem
        if at >= 0 or not sem.tracks_attributes:
            return [frame]
        bits = [TARGET, SINGLE, STAR, STARRED, HAS_STAR, AS_ITEM]
        if at in (NOT_SINGLE, NOT_SINGLE_NO_AS):
            bits.remove(SINGLE)
        if at in MAY_HAVE_AS:
            bits.append(HAS_AS)
        parents = sem.has_as_parents
        below_as = frame[:-1]
        if parents is not None and len(frame) > 1:
            # a node with HAS_AS sits on a WITH state: keep only those below it
            bs, bdf, ba = frame[-2]
            keep = ({bs} if isinstance(bs, int) else set(bs)) & parents
            if not keep:
                below_as = None
            else:
                below_as = frame[:-2] + ((min(keep) if len(keep) == 1 else frozenset(keep), bdf, ba),)
        out = []
        for v in _bit_values(tuple(bits)):
            if v & HAS_AS:
                if below_as is not None:
                    out.append(below_as + ((top, df, v),))
            else:
                out.append(frame[:-1] + ((top, df, v),))
        return out


@functools.lru_cache(maxsize=16)
def _bit_values(bits: tuple[int, ...]) -> tuple[int, ...]:
    """Every value made of some of `bits`, in the order of the subsets' binary numbers."""
    return tuple(sum(bit for i, bit in enumerate(bits) if k >> i & 1) for k in range(1 << len(bits)))


def lockstep(grammar: Grammar, python: bool = True, budget: int = DEFAULT_BUDGET) -> Lockstep:
    """The lockstep comparisons over `explorer(grammar, python, budget)` (one per explorer)."""
    return _lockstep(explorer(grammar, python, budget))


@functools.lru_cache(maxsize=8)
def _lockstep(ex: Explorer) -> Lockstep:
    return Lockstep(ex)
