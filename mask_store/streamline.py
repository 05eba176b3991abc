"""Mask store streamlining: merge and delete rows offline, with the grammar analyses.

A row of the full store is "from lexer state q = (X, d), tokens m announce terminal sequence
S"; at run time m is allowed when the parser accepts S in q's *context* (X just fed: see
`grammar_tools.analyses.contexts`). Rows whose answer the grammar fixes in advance need no parser check,
and rows that always get the same answer can share one check. The seed's order:

1. interchangeable terminals (`interchangeable`): S and its image under interchangeable
   terminals are legal together, so their rows merge (one row, the OR of the masks);
2. follow graph (`follow_graph`): S whose adjacent terminals never meet (X included) is never
   legal: delete;
3. single terminals (|S| = 1), by the unlimited-credit exploration (`always_legal`): always
   legal after X -> merge into q's unconditional row (S = ()); never legal -> delete;
4. the remaining rows: always legal -> unconditional row; never legal -> delete (the
   exploration, then Bar-Hillel (`never_legal`) for what it left open, its queries in the
   jointly-legal step's pool, beside the contexts that wait for none); then jointly legal
   (`jointly_legal`): S = S1 + T with T legal wherever S1 is -> checked as S1 (shorter tries),
   and rows whose outcomes agree on every refined frame merge into one; the classes left are
   compared pairwise only within groups of the same outcomes frame by frame, with a work budget
   per context (`JOINTLY_LEGAL_BUDGET_STEPS` parser steps, `jointly_legal.WorkBudget`): a
   context that spends it keeps the classes shown so far (more rows, the same masks). The
   budget counts work, not time, so the store is the same on every machine.

5. (with the vocabulary) each state's boundary rows merge into its own rows: both are checked
   from the same parser node (newlines aside), the boundary ones only for the tokens whose first
   byte ends the state's lexeme, so a boundary row keeps just those tokens (and goes if none).

Every rule is sound for the run-time parser (its guards and every Python version included;
semantic checks on, as `Recognizer()` has them), so the streamlined store gives bit-identical
masks. `mask-store verify --compare-full` and tests/test_streamline.py check it on real code.

The full store shares one group of *boundary* rows (tokens whose first byte ends the lexeme)
between all states. Their context is X too, so here every terminal gets its own, pruned copy
(the states of ignored terminals share one); groups that end up identical are stored once.
The row counts after each step go into the store header (`mask-store info` shows them).

The analyses' decisions are cached on disk (JSON), keyed by the grammar, the analysis code and
the store's rows, so rebuilding a store for the same tokenizer skips them.
"""

from __future__ import annotations

import enum
import logging
import queue
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from grammar_tools import cache
from grammar_tools.analyses import bar_hillel
from grammar_tools.analyses.always_legal import is_always_legal
from grammar_tools.analyses.contexts import AFTER, Context, after, context_of
from grammar_tools.analyses.follow_graph import follow_graph
from grammar_tools.analyses.forked_pool import can_fork, collector_paused, forked_pool
from grammar_tools.analyses.interchangeable import canonical_map, recognizer_classes
from grammar_tools.analyses.exploration import explorer
from grammar_tools.analyses.jointly_legal import Fate, WorkBudget, jointly_legal_classes, jointly_legal_prefix
from grammar_tools.analyses.never_legal import is_never_legal_shown, may_be_never_legal
from grammar_tools.parsing.recognizer import Recognizer

from . import bits
from .build_timeline import Timeline
from .builder import TokenSets, assemble
from .store import MaskStore

log = logging.getLogger(__name__)

STEPS = ("full", "interchangeable", "follow_graph", "single_terminals", "remaining_rows")
BOUNDARY_STEP = "boundary_merged"  # step 5, when the vocabulary is given
BAR_HILLEL_BUDGET_S = 300.0  # queries not answered by then stay undecided (their rows stay)
# Parser steps (`Explorer.steps`) per context for the jointly-legal comparisons: past them,
# the classes shown so far (`jointly_legal_classes`' `cut`). A count of work, so that the rows
# are the same on every machine and under any load (a CPU-seconds budget made them vary).
JOINTLY_LEGAL_BUDGET_STEPS: int | None = 3_000_000
# memo entries an analysis worker's explorer keeps before it forgets them (the answers are the
# same, only slower): bounds the worker's memory whatever the context (docs/mask_store_rows.md)
ANALYSIS_MAX_MEMO = 1_000_000
# contexts a forked worker analyses before a fresh fork replaces it: each grew by what its
# contexts' jointly-legal explorations memoise, to ~400 MiB apiece by the end of a build (the
# build's peak, 927 MiB for the tree); 3 gives 610 MiB at the same CPU time, 2 525 MiB at +15%
# (docs/memory.md); a task of a batch of contexts counts for `batch` of them
CONTEXTS_PER_WORKER = 3
# contexts the jointly-legal step analyses with one explorer (its memos shared): consecutive in
# the order by size, the contexts after atoms (`FSTRING`, `BYTES`, `FALSE`, ...) come together
# and the second and third cost a sixth of the first (151k: 6 such contexts 26 -> 9 s CPU); a
# fresh fork per batch. 6: no faster, a higher peak (docs/mask_store_rows.md)
JOINTLY_LEGAL_BATCH = 3


class Decision(enum.Enum):
    """What becomes of a row (S != ()); a row may also merge into the row of another S,
    written as that S (a tuple)."""

    KEEP = "keep"
    DROP = "drop"  # never legal
    ALWAYS = "always"  # always legal: into the unconditional row


_FATE_DECISION = {Fate.NEVER: Decision.DROP, Fate.ALWAYS: Decision.ALWAYS}


@dataclass
class _Group:
    context: Context
    rows: dict[tuple, frozenset] = field(default_factory=dict)  # S -> mask ids

    def merge(self, seq: tuple, masks: frozenset) -> None:
        old = self.rows.get(seq)
        self.rows[seq] = masks if old is None else old | masks

    def key(self) -> frozenset:
        return frozenset(self.rows.items())


class _Streamliner:
    def __init__(self, store: MaskStore, recognizer: Recognizer, progress: bool, processes: int, budget_s: float,
                 joint_budget_steps: int | None, timeline: Timeline):
        self.store = store
        self.timeline = timeline
        self.g = recognizer.grammar
        self.progress = progress
        self.processes = processes
        self.budget_s = budget_s
        self.joint_budget_steps = joint_budget_steps
        self.fg = follow_graph(self.g)
        self.stats: dict = defaultdict(int)
        self.steps: list[dict] = []
        self._tokens: dict = {}
        s = store
        g = self.g
        if int(s.header["n_terminals"]) != g.n_terminals:
            raise ValueError(f"store has {s.header['n_terminals']} terminals, the grammar {g.n_terminals}")

        seq_at, row_mask = s.row_seq_start.tolist(), s.row_mask.tolist()
        seq_ids = s.seq.tolist()

        def rows_of(gid: int) -> dict:
            lo, hi = int(s.group_start[gid]), int(s.group_start[gid + 1])
            return {tuple(seq_ids[seq_at[r] : seq_at[r + 1]]): frozenset((row_mask[r],)) for r in range(lo, hi)}

        cache_rows: dict[int, dict] = {}
        self.own: list[_Group] = []
        self.boundary: list[_Group | None] = []
        shared: dict[tuple[int, Context], _Group] = {}
        for q in range(s.n_states):
            x = int(s.q_term[q])
            gid = int(s.q_group[q])
            rows = cache_rows.setdefault(gid, rows_of(gid))
            self.own.append(_Group(context_of(g, x), dict(rows)))
            b = int(s.q_boundary[q])
            if b < 0:
                self.boundary.append(None)
                continue
            ctx = context_of(g, x, indented=True)
            grp = shared.get((b, ctx))
            if grp is None:
                grp = shared[(b, ctx)] = _Group(ctx, dict(cache_rows.setdefault(b, rows_of(b))))
            self.boundary.append(grp)

    # ---------------------------------------------------------------- bookkeeping

    def groups(self) -> list[_Group]:
        """Every distinct group object (boundary groups are shared by the states of a terminal)."""
        seen: dict[int, _Group] = {}
        for grp in self.own + [b for b in self.boundary if b is not None]:
            seen.setdefault(id(grp), grp)
        return list(seen.values())

    def record(self, name: str, seconds: float) -> None:
        logical = sum(len(o.rows) for o in self.own) + sum(len(b.rows) for b in self.boundary if b)
        distinct = {grp.key() for grp in self.groups()}
        self.steps.append(
            {
                "step": name,
                "rows": logical,
                "stored_rows": sum(len(k) for k in distinct),
                "groups": len(distinct),
                "seconds": round(seconds, 2),
            }
        )
        log.info("streamline %s: %d rows", name, logical)

    def _apply(self, decide) -> None:
        """Rebuild every group: decide(ctx, seq) -> a `Decision` or the seq to merge into
        (asked once per (ctx, seq): thousands of groups share their contexts and sequences)."""
        decided: dict[Context, dict] = {}
        for grp in self.groups():
            old = grp.rows
            grp.rows = {}
            ctx = grp.context
            memo = decided.setdefault(ctx, {})
            for seq, m in old.items():
                if not seq:
                    d = Decision.KEEP
                else:
                    d = memo.get(seq)
                    if d is None:
                        d = memo[seq] = decide(ctx, seq)
                if d is Decision.DROP:
                    continue
                if d is Decision.ALWAYS:
                    grp.merge((), m)
                elif d is Decision.KEEP:
                    grp.merge(seq, m)
                else:
                    grp.merge(tuple(d), m)

    def _bar(self, items, desc: str):
        if self.progress:
            from tqdm import tqdm

            return tqdm(items, desc=desc, unit="row", leave=False)
        return items

    # ---------------------------------------------------------------- steps 1 and 2

    def interchangeable(self) -> None:
        classes = recognizer_classes(self.g)
        self.stats["interchangeable_classes"] = len(classes)
        self.stats["interchangeable_terminals"] = sum(len(c) for c in classes)
        cmap = canonical_map(self.g, classes)
        self._apply(lambda ctx, seq: tuple(cmap.get(e, e) for e in seq))

    def follow(self) -> None:
        fg = self.fg
        self._apply(lambda ctx, seq: Decision.KEEP if fg.possible(ctx, seq) else Decision.DROP)

    # ---------------------------------------------------------------- steps 3 and 4

    def analyse(self) -> dict:
        """The decision for every (context, S) left after step 2, from the cache or computed.

        Contexts after interchangeable terminals have the same legal continuations (a prefix
        ending in one becomes one ending in the other), so they are analysed once."""
        cmap = canonical_map(self.g, recognizer_classes(self.g))

        def canon(ctx: Context) -> Context:
            return after(cmap.get(ctx.terminal, ctx.terminal)) if ctx.kind == AFTER else ctx

        all_pairs = {(grp.context, seq) for grp in self.groups() for seq in grp.rows if seq}
        pairs = sorted({(canon(c), s) for c, s in all_pairs}, key=lambda p: (p[0].kind, p[0].terminal, p[1]))
        decisions = self._cached_decisions(pairs)
        return {(c, s): decisions[(canon(c), s)] for c, s in all_pairs}

    def _cached_decisions(self, pairs) -> dict:
        key = cache.content_hash(
            self.g.hash,
            code_hash(),
            repr([(c.key(self.g), s) for c, s in pairs]),
            repr((self.budget_s, self.joint_budget_steps)),
        )
        path = cache.cache_dir() / f"streamline-{key}.json"
        data = cache.read_json(path)
        if data is not None:
            self.stats.update(data["stats"])
            self.stats["analysis_cached"] = 1
            ctx_by_key = {c.key(self.g): c for c, _ in pairs}
            return {
                (ctx_by_key[c], tuple(s)): (Decision(d) if isinstance(d, str) else tuple(d))
                for c, s, d in data["decisions"]
            }
        t0 = time.perf_counter()
        decisions = self._decide(pairs)
        self.stats["analysis_seconds"] = round(time.perf_counter() - t0, 2)
        cache.write_json(
            path,
            {
                "stats": dict(self.stats),
                "decisions": [
                    [c.key(self.g), list(s), d.value if isinstance(d, Decision) else list(d)]
                    for (c, s), d in decisions.items()
                ],
            },
        )
        self.stats["analysis_cached"] = 0
        return decisions

    def _per_context(self, fn, pairs, desc: str) -> dict:
        """`fn(grammar, contexts, budget)` -> [(context, result)] for the pairs of each
        context, one context per task, in `processes` forked workers (the contexts are
        independent); {context: its result}. (The jointly-legal step goes in batches of contexts:
        `_bar_hillel_and_jointly`.)"""
        groups = self._batches(pairs, 1)
        out: dict = {}
        if self.processes < 2 or len(groups) < 2 or not can_fork():
            for group in self._bar(groups, desc):
                out.update(fn(self.g, group, self.joint_budget_steps))
            return out
        global _WORKER
        _WORKER = (fn, self.g, self.joint_budget_steps)
        with forked_pool(self.processes, tasks_per_worker=CONTEXTS_PER_WORKER) as pool:
            done = pool.imap_unordered(_context_work, groups, chunksize=1)
            for results in self._bar(done, desc) if self.progress else done:
                out.update(results)
        return out

    def _bar_hillel_and_jointly(self, pairs, out: dict, undecided: list, figures: dict) -> tuple[dict, dict]:
        """Bar-Hillel's exact answers for the `undecided` pairs and the jointly-legal step, in
        one pool of `processes` forked workers: the batches of contexts with no query open run
        beside the queries (which are few and all in a context or two: 151k, ten after a
        newline), the others once their answers are in. `out` gets every pair's decision but
        the jointly-legal step's. The batches are fixed before any answer (`_batches`, by the
        rows kept or open), so they and the store are the same whatever finishes first.
        Queries not started within the Bar-Hillel budget stay unknown (their rows stay).
        Returns ({query: never legal}, {context: (shortened, classes)}); `figures` gets the
        pool's idle worker-seconds (fewer tasks in flight than workers) and its longest task."""
        g = self.g
        store, never, todo = bar_hillel.cached_answers(g, undecided)
        todo.reverse()  # the longest patterns first: the longest query takes the longest
        waiting = {c for c, _ in todo}
        open_rows = [p for p in pairs if p not in out]  # kept by the exploration or undecided
        batches = self._batches(open_rows, JOINTLY_LEGAL_BATCH)
        open_by_ctx: dict[Context, list] = defaultdict(list)
        for p in open_rows:
            open_by_ctx[p[0]].append(p)
        t0 = time.perf_counter()

        def settle(group_pairs):
            for p in group_pairs:
                if p not in out:
                    out[p] = Decision.DROP if never.get(p) else Decision.KEEP

        # tasks in the order they start: the queries, then the batches by size; a batch with a
        # context that waits for answers is skipped until they are all in
        tasks: list = [("query", q) for q in todo] + [("batch", b) for b in batches]
        n_tasks = len(tasks)
        joint: dict = {}
        answered_at = None
        if todo:
            bar_hillel.indexed_cnf(g)  # built once here, shared by the forks
        global _WORKER
        _WORKER = (_jointly_legal, g, self.joint_budget_steps)
        fork = self.processes >= 2 and len(tasks) >= 2 and can_fork()
        bar = self._bar(range(n_tasks), "never legal, jointly legal") if self.progress else None
        with forked_pool(self.processes, tasks_per_worker=max(1, CONTEXTS_PER_WORKER // JOINTLY_LEGAL_BATCH)) if fork else _Inline() as pool:
            results: queue.SimpleQueue = queue.SimpleQueue()
            in_flight = 0
            idle = 0.0
            longest = (0.0, 0.0, "")  # (seconds, started at, what)
            since = time.perf_counter()
            while tasks or in_flight:
                while in_flight < max(self.processes, 1) and tasks:
                    i = next((i for i, (kind, item) in enumerate(tasks)
                              if kind == "query" or not waiting & {c for c, _ in item}), None)
                    if i is None:
                        break
                    kind, item = tasks.pop(i)
                    if kind == "query" and time.perf_counter() - t0 > self.budget_s:
                        continue  # not started in time: unknown
                    if kind == "batch":
                        settle(p for c, _ in item for p in open_by_ctx[c])
                        item = tuple((c, kept) for c, seqs in item
                                     if (kept := [s for s in seqs if out[(c, s)] is Decision.KEEP]))
                        if not item:
                            continue
                        work = (_context_work, (item,))
                    else:
                        work = (_bar_hillel_work, item)
                    in_flight += 1
                    started = time.perf_counter()
                    pool.apply_async(*work, callback=lambda r, k=kind, q=item, t=started: results.put((k, q, r, t)),
                                     error_callback=lambda e: results.put(("error", None, e, 0.0)))
                if not in_flight:  # the queries left were not started in time
                    waiting = set()
                    continue
                now = time.perf_counter()
                idle += (now - since) * max(0, self.processes - in_flight)
                kind, item, r, started = results.get()
                since = time.perf_counter()
                idle += (since - now) * max(0, self.processes - in_flight)
                if since - started > longest[0]:
                    what = " ".join(c.key(g) for c, _ in item) if kind == "batch" else "query"
                    longest = (since - started, started - t0, what)
                in_flight -= 1
                if bar is not None:
                    bar.update()
                if kind == "error":
                    raise r
                if kind == "batch":
                    joint.update(r)
                    continue
                never[item] = r
                store.put(*item, r)
                waiting = {c for c, s in todo if (c, s) not in never}
                if not waiting and answered_at is None:
                    answered_at = time.perf_counter() - t0
        figures.update(idle_worker_s=round(idle, 2), longest_task_s=round(longest[0], 2),
                       longest_task_started_s=round(longest[1], 2), longest_task=longest[2],
                       tasks=n_tasks)
        store.save()
        if bar is not None:
            bar.close()
        settle(pairs)
        self.stats["bar_hillel_queries"] = len(undecided)
        self.stats["bar_hillel_answered"] = sum(1 for q in dict.fromkeys(undecided) if q in never)
        self.stats["bar_hillel_never"] = sum(1 for q in dict.fromkeys(undecided) if never.get(q))
        self.stats["bar_hillel_seconds"] = round(answered_at or 0.0, 2)  # until the last answer, beside the batches
        return never, joint

    @staticmethod
    def _batches(pairs, batch: int) -> list[tuple]:
        """The pairs' contexts in fixed batches of `batch`: consecutive in the order by rows (the
        largest first: they balance), each context with its sequences in the pairs' order."""
        by_ctx: dict[Context, list] = defaultdict(list)
        for ctx, seq in pairs:
            by_ctx[ctx].append(seq)
        items = sorted(by_ctx.items(), key=lambda kv: -len(kv[1]))
        return [tuple(items[i : i + batch]) for i in range(0, len(items), batch)]

    def _decide(self, pairs) -> dict:
        out: dict = {}
        # always / never, shown by the exploration; what it leaves open: the exact test
        undecided = []
        with self.timeline.phase("always_never"):
            shown_by_ctx = self._per_context(_always_never, pairs, "always/never legal")
        for ctx, shown in shown_by_ctx.items():
            for seq, d in shown.items():
                if d is None:
                    undecided.append((ctx, seq))
                elif d is not Decision.KEEP:
                    out[(ctx, seq)] = d
        undecided.sort(key=lambda p: (p[0].kind, p[0].terminal, p[1]))
        with self.timeline.phase("bar_hillel_and_jointly_legal") as figures:
            never, joint = self._bar_hillel_and_jointly(pairs, out, undecided, figures)
        for p in pairs:
            kind = "single" if len(p[1]) == 1 else "remaining"
            self.stats[f"{kind}_{out[p].value}"] += 1
        # jointly legal, per context: the shortest prefix that the rest always follows, then
        # classes of the shortened sequences
        shortened = {}
        rep: dict = {}
        merged = 0
        lockstep = 0
        cut = 0
        for ctx, (short, found) in joint.items():
            shortened.update(((ctx, seq), sh) for seq, sh in short.items())
            cut += found.cut
            for cls in found.classes:
                d = _FATE_DECISION.get(cls.fate, cls.representative)
                for seq in cls.members:
                    rep[(ctx, seq)] = d
            merged += found.merged
            lockstep += found.lockstep_unions
        self.stats["jointly_legal_shortened"] = sum(1 for p, s in shortened.items() if s != p[1])
        self.stats["jointly_legal_merged"] = merged
        self.stats["jointly_legal_lockstep"] = lockstep
        self.stats["jointly_legal_contexts_cut"] = cut
        for p, short in shortened.items():
            final = rep[(p[0], short)]
            out[p] = final if isinstance(final, Decision) else Decision.KEEP if final == p[1] else final
        return out

    def single_and_remaining(self, decisions: dict, single: bool) -> None:
        def decide(ctx, seq):
            if (len(seq) == 1) != single:
                return Decision.KEEP
            d = decisions.get((ctx, seq), Decision.KEEP)
            if single and not isinstance(d, Decision):
                return Decision.KEEP  # merges of single terminals happen with the jointly legal ones
            return d

        self._apply(decide)

    def merged_singles(self, decisions: dict) -> None:
        def decide(ctx, seq):
            d = decisions.get((ctx, seq), Decision.KEEP) if len(seq) == 1 else Decision.KEEP
            return d if not isinstance(d, Decision) else Decision.KEEP  # the others applied in step 3

        self._apply(decide)

    # ---------------------------------------------------------------- step 5

    def merge_boundary(self, vocab) -> None:
        """Each state's boundary rows into its own rows (not for newlines, whose boundary rows
        are checked after the next line's indentation): the boundary rows are applied to the
        tokens whose first byte ends the state's lexeme, with the same parser node as its own
        rows, so the row keeps those tokens and merges with the own row of the same sequence;
        rows left with no token go."""
        s = self.store
        V = s.vocab_size
        first = np.array([b[0] if b else 0 for b in vocab.token_bytes[:V]], dtype=np.int64)
        dead_bits = bits.unpack(s.dead_sets, 256)
        self._first, self._dead_bits = first, dead_bits
        nl = self.g.term_id.get("_NEWLINE")
        cut_cache: dict = {}

        def cut(m, k):
            key = (m, k)
            if key not in cut_cache:
                sel = dead_bits[k][first[self._mask_tokens(m)]]
                cut_cache[key] = m if sel.all() else ("dead", k, m) if sel.any() else None
            return cut_cache[key]

        for q, b in enumerate(self.boundary):
            if b is None or int(s.q_term[q]) == nl:
                continue
            k = int(s.d_dead[int(s.q_state[q])])
            own = self.own[q]
            for seq, ms in b.rows.items():
                kept = frozenset(c for c in (cut(m, k) for m in ms) if c is not None)
                if kept:
                    own.merge(seq, kept)
            self.boundary[q] = None

    def _mask_tokens(self, m) -> np.ndarray:
        """The tokens of a mask key: a mask id of the full store, or ("dead", k, id): those
        of its tokens whose first byte is in dead set k."""
        t = self._tokens.get(m)
        if t is None:
            s = self.store
            if isinstance(m, tuple):
                base = self._mask_tokens(m[2])
                t = base[self._dead_bits[m[1]][self._first[base]]]
            else:  # int32: thousands of these are kept, many of most of the vocabulary
                t = s.mask_tokens(m).astype(np.int32)
            self._tokens[m] = t
        return t

    # ---------------------------------------------------------------- result

    def result(self) -> MaskStore:
        s = self.store
        sets = TokenSets(s.vocab_size)  # each mask key's tokens in compact form, equal sets once
        compact_of: dict = {}

        def token_set(m) -> np.ndarray:
            c = compact_of.get(m)
            if c is None:
                c = compact_of[m] = sets(self._mask_tokens(m))
            return c

        index: dict[frozenset, int] = {}
        groups: list[dict] = []

        def place(grp: _Group) -> int:
            k = grp.key()
            i = index.get(k)
            if i is None:
                i = index[k] = len(groups)
                groups.append({seq: [token_set(m) for m in sorted(ms, key=repr)] for seq, ms in grp.rows.items()})
            return i

        q_group = np.array([place(o) for o in self.own], dtype=np.int32)
        q_boundary = np.array([place(b) if b is not None else -1 for b in self.boundary], dtype=np.int32)
        header = dict(s.header)
        header["options"] = dict(header.get("options", {}), streamline=True)
        return assemble(
            header=header,
            vocab_size=s.vocab_size,
            n_terminals=int(s.header["n_terminals"]),
            indents=list(s.indents),
            nfa=s.nfa(),
            q_group=q_group,
            q_boundary=q_boundary,
            d_dead=s.d_dead.copy(),
            dead_sets=s.dead_sets.copy(),
            groups=groups,
            digests={id(c): key for key, c in sets.index.items()},
        )


_WORKER: tuple | None = None  # (fn, grammar, budget) for the forked workers of `_per_context`, `_bar_hillel_and_jointly`


def _context_work(group):
    fn, grammar, budget = _WORKER
    return fn(grammar, group, budget)


def _bar_hillel_work(ctx: Context, seq: tuple) -> bool:
    """One exact "never legal" query (`bar_hillel.bar_hillel_empty`), in a worker of the pool
    `_bar_hillel_and_jointly` shares with the jointly-legal batches."""
    with collector_paused():
        return bar_hillel.bar_hillel_empty(_WORKER[1], ctx, seq)


class _Inline:
    """A stand-in for the forked pool where no fork is made: each task runs when it is given."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def apply_async(self, fn, args, callback, error_callback) -> None:
        try:
            result = fn(*args)
        except Exception as e:  # noqa: BLE001 - handed to the caller as the pool would
            error_callback(e)
            return
        callback(result)


def _always_never(grammar, contexts, budget) -> list:
    """Per context, seq -> ALWAYS or DROP where the exploration shows it, None where only the
    exact test can (`may_be_never_legal`), KEEP otherwise."""
    out = []
    with collector_paused():
        for ctx, seqs in contexts:
            shown = {}
            for seq in seqs:
                if is_always_legal(grammar, ctx, seq):
                    shown[seq] = Decision.ALWAYS
                elif is_never_legal_shown(grammar, ctx, seq):
                    shown[seq] = Decision.DROP
                else:
                    shown[seq] = None if may_be_never_legal(grammar, ctx, seq) else Decision.KEEP
            out.append((ctx, shown))
    return out


def _jointly_legal(grammar, contexts, budget_steps) -> list:
    """Per context, the shortest jointly legal prefix of each sequence and the classes of
    those. The explorer starts afresh (`Explorer.reset`) for the batch, so the work counted
    against `budget_steps` and the classes depend only on the batch (a fixed one: see
    `_batches`), not on what this process analysed before."""
    ex = explorer(grammar)
    ex.reset()
    out = []
    with collector_paused():
        for ctx, seqs in contexts:
            budget = WorkBudget(ex, None, ANALYSIS_MAX_MEMO)
            short = {}
            for seq in seqs:
                budget.bound_memory()
                short[seq] = jointly_legal_prefix(grammar, ctx, seq)
            budget = WorkBudget(ex, budget_steps, ANALYSIS_MAX_MEMO)
            out.append((ctx, (short, jointly_legal_classes(grammar, ctx, set(short.values()), budget=budget))))
    return out


def code_hash() -> str:
    """Hash of the code that makes the streamlined store (this module and everything it
    imports: the analyses, the recognizer, the full store's builder) and of the libraries whose
    output it depends on: a cached streamlined store is rebuilt when any of it changes (see
    `loading.store_path_for`)."""
    return cache.content_hash(
        cache.source_hash(sys.modules[__name__]), cache.library_versions("lark", "interegular", "pyformlang")
    )[:8]


def streamline_store(
    store: MaskStore,
    recognizer: Recognizer | None = None,
    progress: bool = True,
    processes: int = 2,
    bar_hillel_budget_s: float = BAR_HILLEL_BUDGET_S,
    vocab=None,
    jointly_legal_budget_steps: int | None = JOINTLY_LEGAL_BUDGET_STEPS,
    timeline: Timeline | None = None,
) -> MaskStore:
    """The streamlined store: same masks at every position, fewer rows (see the module doc).
    With the store's vocabulary, step 5 also merges each state's boundary rows into its own.
    The header records the row counts after each step and what each analysis decided;
    `timeline` gets each step's wall and CPU seconds (`build_timeline`)."""
    if store.header.get("options", {}).get("streamline"):
        raise ValueError("the store is streamlined already")
    timeline = timeline if timeline is not None else Timeline()
    t_all = time.perf_counter()
    with timeline.phase("streamline_setup"):
        sl = _Streamliner(store, recognizer or Recognizer(), progress, processes, bar_hillel_budget_s,
                          jointly_legal_budget_steps, timeline)
        sl.record("full", 0.0)
    sl.steps[0]["stored_rows"] = store.n_rows  # the full store keeps every group, alike or not
    sl.steps[0]["groups"] = int(store.group_start.shape[0] - 1)
    t0 = time.perf_counter()
    with timeline.phase("interchangeable"):
        sl.interchangeable()
        sl.record("interchangeable", time.perf_counter() - t0)
    t0 = time.perf_counter()
    with timeline.phase("follow_graph"):
        sl.follow()
        sl.record("follow_graph", time.perf_counter() - t0)
    t0 = time.perf_counter()
    with timeline.phase("analyses"):
        decisions = sl.analyse()  # steps 3 and 4 decide together (one cache), apply in order
    t_analysis = time.perf_counter() - t0
    with timeline.phase("apply_decisions"):
        sl.single_and_remaining(decisions, single=True)
        sl.record("single_terminals", time.perf_counter() - t0)
        t0 = time.perf_counter()
        sl.single_and_remaining(decisions, single=False)
        sl.merged_singles(decisions)
        sl.record("remaining_rows", time.perf_counter() - t0)
    if vocab is not None:
        t0 = time.perf_counter()
        with timeline.phase(BOUNDARY_STEP):
            sl.merge_boundary(vocab)
            sl.record(BOUNDARY_STEP, time.perf_counter() - t0)
    with timeline.phase("assemble"):
        out = sl.result()
    seconds = time.perf_counter() - t_all
    full = sl.steps[0]["rows"]
    last = sl.steps[-1]["rows"]
    out.header["streamline"] = {
        "steps": sl.steps,
        "analysis": dict(sl.stats),
        "analysis_wall_seconds": round(t_analysis, 2),
        "seconds": round(seconds, 2),
        "reduction": round(full / max(last, 1), 2),
        "valid_for": "Recognizer with semantic checks (the default), any Python version",
        "code": code_hash(),
    }
    out.header["full_build_seconds"] = store.header.get("build_seconds")
    out.header["build_seconds"] = round(float(store.header.get("build_seconds", 0.0)) + seconds, 2)
    return out
