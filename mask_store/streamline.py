"""Mask store streamlining: merge and delete rows offline, with the grammar analyses.

A row of the full store is "from lexer state q = (X, d), tokens m announce terminal sequence
S"; at run time m is allowed when the parser accepts S in q's *context* (X just fed: see
`grammar_tools.contexts`). Rows whose answer the grammar fixes in advance need no parser check,
and rows that always get the same answer can share one check. The seed's order:

1. interchangeable terminals (`interchangeable`): S and its image under interchangeable
   terminals are legal together, so their rows merge (one row, the OR of the masks);
2. follow graph (`follow_graph`): S whose adjacent terminals never meet (X included) is never
   legal: delete;
3. single terminals (|S| = 1), by the unlimited-credit exploration (`always_legal`): always
   legal after X -> merge into q's unconditional row (S = ()); never legal -> delete;
4. the remaining rows: always legal -> unconditional row; never legal -> delete (the
   exploration, then Bar-Hillel (`never_legal`) for what it left open); then jointly legal
   (`jointly_legal`): S = S1 + T with T legal wherever S1 is -> checked as S1 (shorter tries),
   and rows whose outcomes agree on every refined frame merge into one.

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

import logging
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from grammar_tools import (
    always_legal,
    cache,
    contexts,
    follow_graph as follow_graph_mod,
    guards,
    interchangeable as interchangeable_mod,
    jointly_legal,
    never_legal,
)
from grammar_tools.always_legal import ACC, CUT, REJ, explorer
from grammar_tools.contexts import AFTER, Context, after, context_of
from grammar_tools.follow_graph import follow_graph
from grammar_tools.interchangeable import canonical_map, recognizer_classes
from grammar_tools.recognizer import Recognizer

from .builder import assemble
from .store import MaskStore

log = logging.getLogger(__name__)

STEPS = ("full", "interchangeable", "follow_graph", "single_terminals", "remaining_rows")
BOUNDARY_STEP = "boundary_merged"  # step 5, when the vocabulary is given
BAR_HILLEL_BUDGET_S = 300.0  # queries not answered by then stay undecided (their rows stay)
SIGNATURE_DEPTH = 1  # stack entries made known below each start state for jointly-legal merges
LOCKSTEP_REFINE = 2  # stack entries made known where two terminals fed in lockstep part


@dataclass
class _Group:
    context: Context
    rows: dict[tuple, frozenset] = field(default_factory=dict)  # S -> mask ids

    def merge(self, seq: tuple, masks: frozenset) -> None:
        old = self.rows.get(seq)
        self.rows[seq] = masks if old is None else old | masks

    def key(self) -> frozenset:
        return frozenset(self.rows.items())


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


class _Streamliner:
    def __init__(self, store: MaskStore, recognizer: Recognizer, progress: bool, processes: int, budget_s: float):
        self.store = store
        self.g = recognizer.grammar
        self.progress = progress
        self.processes = processes
        self.budget_s = budget_s
        self.ex = explorer(self.g)
        self.fg = follow_graph(self.g)
        self.stats: dict = defaultdict(int)
        self.steps: list[dict] = []
        self._tokens: dict = {}
        s = store
        g = self.g
        if int(s.header["n_terminals"]) != g.n_terminals:
            raise ValueError(f"store has {s.header['n_terminals']} terminals, the grammar {g.n_terminals}")

        def rows_of(gid: int) -> dict:
            lo, hi = int(s.group_start[gid]), int(s.group_start[gid + 1])
            return {s.row_seq(r): frozenset((int(s.row_mask[r]),)) for r in range(lo, hi)}

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
        """Rebuild every group: decide(ctx, seq) -> "keep" | "drop" | "always" | a new seq."""
        for grp in self.groups():
            old = grp.rows
            grp.rows = {}
            for seq, m in old.items():
                d = decide(grp.context, seq) if seq else "keep"
                if d == "drop":
                    continue
                if d == "always":
                    grp.merge((), m)
                elif d == "keep":
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
        self._apply(lambda ctx, seq: "keep" if fg.possible(ctx, seq) else "drop")

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
            str(SIGNATURE_DEPTH),
            str(LOCKSTEP_REFINE),
            repr([(c.key(self.g), s) for c, s in pairs]),
        )
        path = cache.cache_dir() / f"streamline-{key}.json"
        data = cache.read_json(path)
        if data is not None:
            self.stats.update(data["stats"])
            self.stats["analysis_cached"] = 1
            ctx_by_key = {c.key(self.g): c for c, _ in pairs}
            return {
                (ctx_by_key[c], tuple(s)): (d if isinstance(d, str) else tuple(d))
                for c, s, d in data["decisions"]
            }
        t0 = time.perf_counter()
        decisions = self._decide(pairs)
        self.stats["analysis_seconds"] = round(time.perf_counter() - t0, 2)
        cache.write_json(
            path,
            {
                "stats": dict(self.stats),
                "decisions": [[c.key(self.g), list(s), d if isinstance(d, str) else list(d)] for (c, s), d in decisions.items()],
            },
        )
        self.stats["analysis_cached"] = 0
        return decisions

    def _decide(self, pairs) -> dict:
        ex = self.ex
        out: dict = {}
        # always / never, by the exploration
        outcome = {}
        for p in self._bar(pairs, "always/never legal"):
            outcome[p] = ex.outcome(*p)
        # what the exploration left open (it hit its bound): the exact test, Bar-Hillel
        open_q = [p for p, o in outcome.items() if not o & ACC and o & CUT]
        t0 = time.perf_counter()
        never = never_legal.decide(
            self.g, open_q, processes=self.processes, time_budget_s=self.budget_s, progress=self.progress
        )
        self.stats["bar_hillel_queries"] = len(open_q)
        self.stats["bar_hillel_answered"] = len(never)
        self.stats["bar_hillel_never"] = sum(never.values())
        self.stats["bar_hillel_seconds"] = round(time.perf_counter() - t0, 2)
        kept = []
        for p, o in outcome.items():
            kind = "single" if len(p[1]) == 1 else "remaining"
            if o == ACC:
                out[p] = "always"
            elif o & ~REJ == 0 or never.get(p):
                out[p] = "drop"
            else:
                out[p] = "keep"
                kept.append(p)
            self.stats[f"{kind}_{out[p]}"] += 1
        # jointly legal: the shortest prefix that the rest always follows
        shortened = {}
        for ctx, seq in self._bar(kept, "jointly legal (prefixes)"):
            short = seq
            for k in range(1, len(seq)):
                if ex.extension_outcome(ctx, seq[:k], seq[k:]) == ACC:
                    short = seq[:k]
                    break
            shortened[(ctx, seq)] = short
        self.stats["jointly_legal_shortened"] = sum(1 for p, s in shortened.items() if s != p[1])
        # jointly legal: after a common prefix P (possibly empty), suffixes whose outcomes agree
        # on every frame that read P, each frame deciding them
        by_ctx: dict[Context, set] = defaultdict(set)
        for (ctx, _), short in shortened.items():
            by_ctx[ctx].add(short)
        rep: dict = {}
        merged = 0
        lockstep = 0
        for ctx, seqs in self._bar(list(by_ctx.items()), "jointly legal (signatures)"):
            uf = _UnionFind(seqs)
            fate: dict = {}  # seq -> "always" | "drop"
            longest = max(len(x) for x in seqs)
            for n in range(longest):
                by_prefix: dict[tuple, list] = defaultdict(list)
                for seq in seqs:
                    if len(seq) > n:
                        by_prefix[seq[:n]].append(seq)
                for prefix, members in by_prefix.items():
                    if len(members) < 2 and n:
                        continue
                    if len(members) > 1:
                        lockstep += self._merge_in_lockstep(ctx, prefix, members, uf)
                    frames = ex.refine(ex.frames_after(ctx, prefix), SIGNATURE_DEPTH)
                    if not frames:
                        continue
                    buckets: dict = defaultdict(list)
                    for seq in members:
                        sig = ex.signature(frames, seq[n:])
                        if sig is None:
                            continue
                        if not any(sig):
                            fate[seq] = "drop"  # never legal where its prefix is
                        elif n == 0 and all(sig):
                            fate[seq] = "always"
                        else:
                            buckets[sig].append(seq)
                    for group in buckets.values():
                        for other in group[1:]:
                            uf.union(group[0], other)
            lockstep += self._merge_alike(ctx, seqs, uf)
            for comp in uf.components():
                fates = {fate[x] for x in comp if x in fate}
                if "drop" in fates:
                    best = "drop"
                elif "always" in fates:
                    best = "always"
                else:
                    best = min(comp, key=lambda x: (len(x), x))
                for seq in comp:
                    rep[(ctx, seq)] = best
                merged += len(comp) - 1
        self.stats["jointly_legal_merged"] = merged
        self.stats["jointly_legal_lockstep"] = lockstep
        for p, short in shortened.items():
            final = rep[(p[0], short)]
            out[p] = final if isinstance(final, str) else "keep" if final == p[1] else list(final)
        return out

    def _merge_in_lockstep(self, ctx: Context, prefix: tuple, members: list, uf: _UnionFind) -> int:
        """Joins the members (sequences that start with `prefix`) that differ in one terminal
        right after it and are accepted alike there, fed in lockstep on every frame that read
        the prefix (`Explorer.same_acceptance`); returns how many unions it made."""
        ex = self.ex
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
                for other in classes:
                    if uf.find(other) == uf.find(seq) or all(
                        ex.same_acceptance(f, other[n], seq[n], rest, LOCKSTEP_REFINE) for f in frames
                    ):
                        if uf.find(other) != uf.find(seq):
                            uf.union(other, seq)
                            unions += 1
                        break
                else:
                    classes.append(seq)
        return unions

    def _merge_alike(self, ctx: Context, seqs, uf: _UnionFind) -> int:
        """Joins the classes of `uf` whose sequences are accepted alike, fed in lockstep on
        every start frame of `ctx` (`Explorer.accepted_alike`: they may differ in more than
        one place); returns how many unions it made. Pairs that some start frame tells apart
        (always legal on it for one, never for the other) are not tried."""
        ex = self.ex
        frames = ex.start_frames(ctx)

        def kind(o: int) -> int:
            return 1 if o == ACC else 2 if o & ~REJ == 0 else 0

        profile = {seq: [kind(ex._run(f, seq)) for f in frames] for seq in seqs}

        def may_agree(s1, s2) -> bool:
            return all(x == y or not x or not y for x, y in zip(profile[s1], profile[s2]))

        unions = 0
        roots: dict = {}  # root -> its shortest member
        for seq in sorted(seqs, key=lambda x: (len(x), x)):
            roots.setdefault(uf.find(seq), seq)
        members = list(roots.values())
        for i, seq in enumerate(members):
            for other in members[:i]:
                if uf.find(other) == uf.find(seq):
                    break
                if may_agree(other, seq) and all(ex.accepted_alike(f, other, seq) for f in frames):
                    uf.union(other, seq)
                    unions += 1
                    break
        return unions

    def single_and_remaining(self, decisions: dict, single: bool) -> None:
        def decide(ctx, seq):
            if (len(seq) == 1) != single:
                return "keep"
            d = decisions.get((ctx, seq), "keep")
            if single and not isinstance(d, str):
                return "keep"  # merges of single terminals happen with the jointly legal ones
            return d

        self._apply(decide)

    def merged_singles(self, decisions: dict) -> None:
        def decide(ctx, seq):
            d = decisions.get((ctx, seq), "keep") if len(seq) == 1 else "keep"
            return d if not isinstance(d, str) else "keep"  # the others applied in step 3

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
        dead_bits = np.unpackbits(s.dead_sets, axis=1, bitorder="little").astype(bool)
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
            elif m >= 0:
                bits = np.unpackbits(s.dense[m].view(np.uint8), bitorder="little")
                t = np.flatnonzero(bits[: s.vocab_size])
            else:
                k = ~m
                t = s.sparse_ids[s.sparse_start[k] : s.sparse_start[k + 1]].astype(np.int64)
            self._tokens[m] = t
        return t

    # ---------------------------------------------------------------- result

    def result(self) -> MaskStore:
        s = self.store
        mask_tokens = self._mask_tokens

        index: dict[frozenset, int] = {}
        groups: list[dict] = []

        def place(grp: _Group) -> int:
            k = grp.key()
            i = index.get(k)
            if i is None:
                i = index[k] = len(groups)
                groups.append({seq: [mask_tokens(m) for m in sorted(ms, key=repr)] for seq, ms in grp.rows.items()})
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
            q_term=s.q_term.copy(),
            q_state=s.q_state.copy(),
            q_group=q_group,
            q_boundary=q_boundary,
            d_dead=s.d_dead.copy(),
            dead_sets=s.dead_sets.copy(),
            groups=groups,
        )


def code_hash() -> str:
    """Hash of the code that decides the rows: a cached streamlined store is rebuilt when it
    changes (see `loading.store_path_for`)."""
    return cache.source_hash(
        always_legal, contexts, follow_graph_mod, guards, interchangeable_mod, jointly_legal, never_legal,
        sys.modules[__name__],
    )[:8]


def streamline_store(
    store: MaskStore,
    recognizer: Recognizer | None = None,
    progress: bool = True,
    processes: int = 2,
    bar_hillel_budget_s: float = BAR_HILLEL_BUDGET_S,
    vocab=None,
) -> MaskStore:
    """The streamlined store: same masks at every position, fewer rows (see the module doc).
    With the store's vocabulary, step 5 also merges each state's boundary rows into its own.
    The header records the row counts after each step and what each analysis decided."""
    if store.header.get("options", {}).get("streamline"):
        raise ValueError("the store is streamlined already")
    t_all = time.perf_counter()
    sl = _Streamliner(store, recognizer or Recognizer(), progress, processes, bar_hillel_budget_s)
    sl.record("full", 0.0)
    sl.steps[0]["stored_rows"] = store.n_rows  # the full store keeps every group, alike or not
    sl.steps[0]["groups"] = int(store.group_start.shape[0] - 1)
    t0 = time.perf_counter()
    sl.interchangeable()
    sl.record("interchangeable", time.perf_counter() - t0)
    t0 = time.perf_counter()
    sl.follow()
    sl.record("follow_graph", time.perf_counter() - t0)
    t0 = time.perf_counter()
    decisions = sl.analyse()  # steps 3 and 4 decide together (one cache), apply in order
    t_analysis = time.perf_counter() - t0
    sl.single_and_remaining(decisions, single=True)
    sl.record("single_terminals", time.perf_counter() - t0)
    t0 = time.perf_counter()
    sl.single_and_remaining(decisions, single=False)
    sl.merged_singles(decisions)
    sl.record("remaining_rows", time.perf_counter() - t0)
    if vocab is not None:
        t0 = time.perf_counter()
        sl.merge_boundary(vocab)
        sl.record(BOUNDARY_STEP, time.perf_counter() - t0)
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
