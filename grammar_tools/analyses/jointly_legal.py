"""`are_jointly_legal(X, S1, S2)`: after every prefix ending in X, S1 is legal iff S2 is.

Then the mask store can keep one row for both (the OR of their token sets, checked with S1).
Like `is_always_legal` (which is `are_jointly_legal(X, S, ())`), it is undecidable in general;
these are the cases where it can be shown (sound; False means "not shown"):

- S1 and S2 are images of each other under interchangeable terminals (`interchangeable`);
- one extends the other, S2 = S1 + T, and wherever S1 is legal after X, T is legal after it:
  the unlimited-credit exploration (`exploration`) reads S1 from X's states and then T from
  every branch that read S1. This refines the seed's rule (is_always_legal(Y, T) for the last
  terminal Y of S1), since it knows what came before Y;
- both are always legal, or both never legal;
- fed in lockstep on the same stacks, the recognizer treats them alike: the same checks and
  reductions until both shift into the same state, and where they part, both always or
  both never accepted (`lockstep`): `x and` / `x or`, `f(x).` / `f(x) **`.

For many sequences at once (the mask store's rows after one context), `jointly_legal_classes`
partitions them into classes of this relation, with two forms of the rules that compare many
sequences in one pass: after a common prefix P, sequences whose outcomes agree on every frame
that read P (refined by SIGNATURE_DEPTH known stack entries, each frame deciding them), and
sequences that differ in one terminal right after P, compared in lockstep on every frame that
read P (refined up to LOCKSTEP_REFINE times); then `are_jointly_legal` joins the classes left,
tried only between classes whose outcomes are the same on every start frame (refined, or with
an unknown prefix replaced by its known tops): a hash of each class's outcomes instead of a
comparison of every pair (on the 151k vocabulary's contexts: the same classes as all pairs).
`jointly_legal_prefix` is the extension rule for one sequence: the shortest prefix that it
is jointly legal with (a row checked with fewer terminals).
"""

from __future__ import annotations

import enum
import functools
from collections import defaultdict
from dataclasses import dataclass

from .contexts import Context, context_from_name, parse_names
from .exploration import ACC, ANY_FRAME, REJ, Verdict, explorer
from ..grammar import Grammar
from .interchangeable import canonical_map, interchangeable_classes, recognizer_classes
from .lockstep import lockstep

SIGNATURE_DEPTH = 1  # stack entries made known below each start state for signatures
LOCKSTEP_REFINE = 2  # stack entries made known where two terminals fed in lockstep part


def canonical(grammar: Grammar, seq: tuple[int, ...], python: bool = True) -> tuple[int, ...]:
    """`seq` with every terminal replaced by the first member of its interchangeable class
    (`python`: the classes that the recognizer's guards keep)."""
    cmap = _canonical_map(grammar, python)
    return tuple(cmap.get(e, e) for e in seq)


@functools.lru_cache(maxsize=8)
def _canonical_map(grammar: Grammar, python: bool) -> dict[int, int]:
    return canonical_map(grammar, recognizer_classes(grammar) if python else interchangeable_classes(grammar))


def extends_jointly(grammar: Grammar, context: Context, prefix, suffix, python: bool = True) -> bool:
    """Wherever `prefix` is legal after `context`, `prefix + suffix` is too."""
    return explorer(grammar, python).extension_outcome(context, tuple(prefix), tuple(suffix)) == ACC


def are_jointly_legal(grammar: Grammar, x, s1, s2, python: bool = True) -> bool:
    """Sound: True means S1 and S2 are legal after exactly the same prefixes ending in `x` (a
    terminal name or id, or a `Context`)."""
    ctx = context_from_name(grammar, x)
    a, b = parse_names(grammar, s1), parse_names(grammar, s2)
    if a == b or canonical(grammar, a, python) == canonical(grammar, b, python):
        return True
    if len(a) > len(b):
        a, b = b, a
    if b[: len(a)] == a and extends_jointly(grammar, ctx, a, b[len(a) :], python):
        return True
    ex = explorer(grammar, python)
    va, vb = ex.verdict(ctx, a), ex.verdict(ctx, b)
    if va is vb and va in (Verdict.ALWAYS, Verdict.NEVER):
        return True
    return lockstep(grammar, python).accepted_alike_after(ctx, a, b)


def jointly_legal_prefix(grammar: Grammar, x, seq, python: bool = True) -> tuple[int, ...]:
    """The shortest prefix P of `seq` (`seq` itself if none) such that wherever P is legal
    after `x`, `seq` is too: the two are jointly legal, and P is the cheaper check."""
    ctx = context_from_name(grammar, x)
    seq = parse_names(grammar, seq)
    for k in range(1, len(seq)):
        if extends_jointly(grammar, ctx, seq[:k], seq[k:], python):
            return seq[:k]
    return seq


class Fate(enum.Enum):
    """What becomes of a class of jointly legal sequences (of their mask store rows)."""

    CHECKED = "checked"  # one row, checked as the class's representative
    ALWAYS = "always"  # always legal: into the unconditional row
    NEVER = "never"  # never legal: deleted


@dataclass(frozen=True)
class JointClass:
    members: tuple[tuple[int, ...], ...]  # the representative (shortest, then smallest) first
    fate: Fate

    @property
    def representative(self) -> tuple[int, ...]:
        return self.members[0]


@dataclass(frozen=True)
class JointClasses:
    classes: tuple[JointClass, ...]
    lockstep_unions: int  # unions made by a lockstep comparison (for the streamlining's report)
    cut: bool = False  # the budget ran out: classes may be finer than the rules could show

    @property
    def merged(self) -> int:
        """Sequences that share another's row."""
        return sum(len(c.members) - 1 for c in self.classes)


class WorkBudget:
    """The work one context's comparisons may take, counted in parser steps (`Explorer.steps`:
    the frames that the explorations and lockstep comparisons examine, one LALR action looked up
    each), so that the classes are the same on every machine and under any load: what the
    explorer does is a function of what it was asked since its `reset` (its memos only save
    time). `steps` None: unlimited.

    It bounds the memory as well: when the explorer's memos hold more than `max_memo` entries
    they are forgotten (`Explorer.forget`; the answers stay the same, only slower), checked
    between two comparisons."""

    def __init__(self, ex, steps: int | None, max_memo: int | None = None) -> None:
        self.ex = ex
        self.limit = None if steps is None else ex.steps + steps
        self.max_memo = max_memo
        self.spent = False

    def out(self) -> bool:
        """The steps are spent (and the memos bounded, see the class doc)."""
        self.bound_memory()
        if self.limit is not None and not self.spent and self.ex.steps >= self.limit:
            self.spent = True
        return self.spent

    def bound_memory(self) -> None:
        """Past `max_memo` entries, the answers' memos go, and the searches' too if they hold
        half of it (the searches are what a batch of contexts shares)."""
        if self.max_memo is not None and self.ex.memo_entries() > self.max_memo:
            self.ex.forget(searches=self.ex.search_memo_entries() > self.max_memo // 2)


def jointly_legal_classes(grammar: Grammar, x, seqs, python: bool = True,
                          budget: WorkBudget | None = None) -> JointClasses:
    """The sequences `seqs` after `x`, partitioned into classes whose members are legal after
    exactly the same prefixes (see the module doc). Every union is sound, so the classes are
    those of the relation `are_jointly_legal` shows, closed under transitivity.

    `budget` (a `WorkBudget` over this grammar's explorer; None: unlimited): the work for the
    pairwise comparisons (in lockstep, and `are_jointly_legal` between the classes left); when it
    is spent, only the signatures (one pass per sequence) go on, and the classes found are the
    answer (`cut`): sound still, since each union and fate was shown, only finer (a sequence
    left alone keeps a row of its own, checked as itself). With many long sequences (a 151k
    vocabulary's) the pairwise comparisons grow without a useful bound."""
    ctx = context_from_name(grammar, x)
    ex = explorer(grammar, python)
    seqs = set(seqs)
    uf = _UnionFind(seqs)
    fate: dict = {}  # seq -> Fate.ALWAYS | Fate.NEVER
    unions = 0
    budget = budget or WorkBudget(ex, None)
    longest = max((len(s) for s in seqs), default=0)
    for n in range(longest):
        by_prefix: dict[tuple, list] = defaultdict(list)
        for seq in seqs:
            if len(seq) > n:
                by_prefix[seq[:n]].append(seq)
        for prefix, members in by_prefix.items():
            if len(members) < 2 and n:
                continue
            if len(members) > 1 and not budget.out():
                unions += _join_in_lockstep(grammar, ctx, prefix, members, uf, python, budget)
            frames = ex.refine(ex.frames_after(ctx, prefix), SIGNATURE_DEPTH)
            if not frames:
                continue
            buckets: dict = defaultdict(list)
            for seq in members:
                budget.bound_memory()
                sig = ex.signature(frames, seq[n:])
                if sig is None:
                    continue
                if not any(sig):
                    fate[seq] = Fate.NEVER  # never legal where its prefix is
                elif n == 0 and all(sig):
                    fate[seq] = Fate.ALWAYS
                else:
                    buckets[sig].append(seq)
            for group in buckets.values():
                for other in group[1:]:
                    uf.union(group[0], other)
    if not budget.out():
        unions += _join_classes(grammar, ctx, seqs, uf, python, budget)
    classes = []
    for comp in uf.components():
        fates = {fate[s] for s in comp if s in fate}
        best = Fate.NEVER if Fate.NEVER in fates else Fate.ALWAYS if Fate.ALWAYS in fates else Fate.CHECKED
        classes.append(JointClass(tuple(sorted(comp, key=lambda s: (len(s), s))), best))
    return JointClasses(tuple(classes), unions, budget.spent)


def _known_tops(ex, frames) -> tuple:
    """The frames with each one of an unknown prefix (`ANY_FRAME`: on it every sequence but an
    always legal one is undecided) replaced by the frames of one known entry that together stand
    for the same stacks (`Explorer.any_top`)."""
    out: dict = {}
    for f in frames:
        out.update(dict.fromkeys(ex.any_top(f[1]) if f[0] == ANY_FRAME else (f,)))
    return tuple(out)


def _join_in_lockstep(grammar: Grammar, ctx: Context, prefix: tuple, members: list, uf, python: bool,
                      budget: WorkBudget) -> int:
    """Joins the members (sequences that start with `prefix`) that differ in one terminal
    right after it and are accepted alike there, fed in lockstep on every frame that read
    the prefix; returns how many unions it made."""
    ex = explorer(grammar, python)
    ls = lockstep(grammar, python)
    n = len(prefix)
    frames = ex.covering_frames(ctx, prefix)
    if not frames:
        return 0  # a cut branch (or a prefix never read): nothing is shown
    by_rest: dict[tuple, list] = defaultdict(list)
    for seq in members:
        by_rest[seq[n + 1 :]].append(seq)
    unions = 0
    for rest, seqs in by_rest.items():
        classes: list[tuple] = []  # one member of each class found so far
        for seq in sorted(seqs):
            if budget.out():
                return unions
            for other in classes:
                if budget.out():
                    return unions
                if uf.find(other) == uf.find(seq) or all(
                    ls.accepted_alike(f, (other[n],) + rest, (seq[n],) + rest, LOCKSTEP_REFINE) for f in frames
                ):
                    if uf.find(other) != uf.find(seq):
                        uf.union(other, seq)
                        unions += 1
                    break
            else:
                classes.append(seq)
    return unions


def _join_classes(grammar: Grammar, ctx: Context, seqs, uf, python: bool, budget: WorkBudget) -> int:
    """Joins the classes of `uf` whose representatives `are_jointly_legal`; returns how many
    unions it made. Only classes with the same outcome kind (`_kind`) on every frame of
    `_outcome_frames` are compared: one hash per class instead of a comparison per pair. Each
    frame stands for real stacks, so a pair that one frame decides differently is not legal
    after the same prefixes and can't be shown; a pair that one frame decides and the other
    leaves open is left apart too, a restriction that costs nothing on the store's contexts
    (SmolLM2's and the 151k vocabulary's: the classes of all pairs). Sound whatever it leaves
    apart: no union is made without `are_jointly_legal` showing it."""
    ex = explorer(grammar, python)
    frames = _outcome_frames(ex, ctx)
    roots: dict = {}  # root -> its shortest member
    for seq in sorted(seqs, key=lambda x: (len(x), x)):
        roots.setdefault(uf.find(seq), seq)
    buckets: dict = defaultdict(list)
    for seq in roots.values():
        buckets[tuple(_kind(ex.run(f, seq)) for f in frames)].append(seq)
    unions = 0
    for key, members in buckets.items():
        if 0 not in key:  # decided alike on every frame: the same signature over frames that cover
            for other in members[1:]:
                uf.union(members[0], other)
            unions += len(members) - 1
            continue
        for i, seq in enumerate(members):
            for other in members[:i]:
                if budget.out():
                    return unions
                if are_jointly_legal(grammar, ctx, other, seq, python):
                    uf.union(other, seq)
                    unions += 1
                    break
    return unions


def _outcome_frames(ex, ctx: Context) -> tuple:
    """Frames that together stand for every stack of `ctx`, each for fewer than a start frame:
    the start frames refined by SIGNATURE_DEPTH entries, or, where one has an unknown prefix
    (`ANY_FRAME`), the known tops that replace it (refining those too is ten times the frames)."""
    frames = ex.start_frames(ctx)
    if any(f[0] == ANY_FRAME for f in frames):
        return _known_tops(ex, frames)
    return ex.refine(frames, SIGNATURE_DEPTH)


def _kind(outcome: int) -> int:
    """An outcome on one frame: 1 always legal there, 2 never, 0 undecided."""
    return 1 if outcome == ACC else 2 if outcome & ~REJ == 0 else 0


class _UnionFind:
    def __init__(self, items) -> None:
        self.parent = {x: x for x in items}

    def find(self, x):
        p = self.parent
        while p[x] != x:
            p[x] = p[p[x]]
            x = p[x]
        return x

    def union(self, a, b) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra

    def components(self) -> list[list]:
        out: dict = defaultdict(list)
        for x in self.parent:
            out[self.find(x)].append(x)
        return list(out.values())
