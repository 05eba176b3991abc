"""Build a `MaskStore`: walk the whole vocabulary over every lexer state, offline.

For each lexer state d, one vectorized pass over all tokens (`token_lexing.first_lexeme`) finds
where d's lexeme ends inside each token. What the rest of a token announces depends only on the
token and that offset: the *suffix signature* (the lexemes of `token[i:]` read from the start
state), computed once per (token, offset) and shared by all states. Rows are then formed per
signature, not per token, so the Python work grows with the number of distinct signatures.
The states' walks run in forked workers, merged in the states' order (`_walk_states`): the
store is the same as one process's.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import time
from collections import defaultdict
from collections.abc import Iterator

import numpy as np

from grammar_tools.analyses.forked_pool import can_fork, forked_pool
from grammar_tools.lexing.lexer_automaton import START, LexError, LexerAutomaton

from . import bits
from .build_timeline import Timeline
from .nfa_states import NfaStates
from .store import MaskStore
from .token_lexing import TokenMatrix, first_lexeme, indent_of, staying_bytes
from .vocabulary import Vocabulary

log = logging.getLogger(__name__)

DENSE_BYTES_PER_TOKEN = 2  # sparse ids are uint16 when the vocabulary allows
# the lexer states' token walks run in this many forked workers (151k tokens: 14.5 s of one core),
# a chunk of states per task, merged by the parent in the states' order
WALK_PROCESSES = 2
WALK_CHUNK = 64


class _Interner:
    def __init__(self):
        self.index: dict = {}
        self.items: list = []

    def __call__(self, item) -> int:
        i = self.index.get(item)
        if i is None:
            i = self.index[item] = len(self.items)
            self.items.append(item)
        return i


class TokenSets:
    """Identical token sets kept once, each in its compact form (`compact`: the ids, or a bitset
    where that is smaller). A row of a state inside an identifier holds most of the vocabulary,
    and thousands of states hold the same one: at 151k tokens one int64 copy each took
    gigabytes; at 262k the distinct sets were 240 MB as int32 ids and 8 MB compact, and the walk
    workers sent the parent 1.06 GB of ids (pickled, through pipes) against 14 MB compact."""

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size
        self.index: dict[bytes, np.ndarray] = {}

    def __call__(self, toks: np.ndarray) -> np.ndarray:
        return self.keyed(toks)[1]

    def keyed(self, toks: np.ndarray) -> tuple[bytes, np.ndarray]:
        """(the set's digest, its kept compact copy), from its sorted ids."""
        c = compact(toks, self.vocab_size)
        key = _digest(c)
        return key, self.index.setdefault(key, c)

    def intern(self, key: bytes, toks: np.ndarray) -> np.ndarray:
        """The kept copy of a compact set whose digest is known (`keyed` in a walk worker: the
        parent, which merges the workers' rows, hashed every set again, 1.4 s of its CPU at
        151k tokens while both workers ran)."""
        return self.index.setdefault(key, toks)


def compact(toks: np.ndarray, vocab_size: int) -> np.ndarray:
    """A set of token ids (sorted, distinct) in its smaller form: the ids as int32, or a bitset
    over the vocabulary (uint8, little-endian bit order) where it has more than one id per 32
    tokens. The form depends only on the set, so equal sets have equal compact forms (and
    digests)."""
    if toks.size * 4 <= (vocab_size + 7) // 8:
        return np.ascontiguousarray(toks, dtype=np.int32)
    marked = np.zeros(vocab_size, dtype=bool)
    marked[toks] = True
    return bits.pack(marked, dtype=np.uint8)


def token_ids(c: np.ndarray, vocab_size: int) -> np.ndarray:
    """The sorted ids (int32) of a set in either form (`compact`)."""
    if c.dtype != np.uint8:
        return c
    return bits.token_ids(c, vocab_size).astype(np.int32)


def _digest(toks: np.ndarray) -> bytes:
    return hashlib.blake2b(toks.tobytes(), digest_size=16).digest()


class StoreBuilder:
    def __init__(self, vocab: Vocabulary, lexer: LexerAutomaton, progress: bool = True, merge_states: bool = True):
        self.vocab = vocab
        self.lexer = lexer
        self.progress = progress
        self.nfa = NfaStates.of(lexer, merge=merge_states)  # one q per class of (X, d): `nfa_states`
        g = lexer.grammar
        self.T = g.n_terminals
        self.nl = g.term_id["_NEWLINE"]
        self.ignored = g.ignored
        self.tokens = TokenMatrix.from_vocab(vocab.token_bytes, vocab.special)
        self.ids = self.tokens.ids
        n = lexer.n_states
        self.possible = np.zeros((n, self.T), dtype=bool)
        self.accepting = np.zeros((n, self.T), dtype=bool)
        for d in range(n):
            self.possible[d, list(lexer.possible_ids[d])] = True
            self.accepting[d, list(lexer.accepting_ids[d])] = True
        self.indents = _Interner()
        self.sigs = _Interner()
        self._expansions: dict[int, list[tuple[int, ...]]] = {}
        self.token_sets = TokenSets(vocab.size)

    # ------------------------------------------------------------------ signatures

    def _suffix_signatures(self) -> np.ndarray:
        """sig[t, i]: id of what token t announces from offset i on, read from the start
        state (-1: the lexer dies).

        Lexing `token[i:]` from the start state is its first lexeme (`LexerAutomaton.lexemes`),
        then, if that ends at j, lexing `token[j:]` from the start state: so the suffixes are
        read right to left, each one lexeme on top of the suffix it ends at. They are interned
        left to right (ids and indentations in the order of the offsets)."""
        lexer = self.lexer
        lexemes = lexer.lexemes
        nl_states = {d for d in range(lexer.n_states) if self.nl in lexer.accepting_ids[d]}
        L = max(self.tokens.max_length, 1)
        sig = np.full((self.vocab.size, L), -1, dtype=np.int32)
        for t in self.ids.tolist():
            b = self.vocab.token_bytes[t]
            n = len(b)
            # per offset: (complete lexemes as (state, Indent or None), open lexeme's state);
            # None: the lexer dies
            suffix: list[tuple | None] = [None] * (n + 1)
            for i in range(n - 1, -1, -1):
                try:
                    _, j, state = next(lexemes(b, START, i, n))
                except LexError:
                    continue
                if j == n:
                    suffix[i] = ((), state)
                elif suffix[j] is not None:
                    indent = indent_of(b[i:j], False) if state in nl_states else None
                    rest, final = suffix[j]
                    suffix[i] = (((state, indent),) + rest, final)
            for i in range(n):
                if suffix[i] is not None:
                    complete, final = suffix[i]
                    out = tuple((st, -1 if ind is None else self.indents(ind)) for st, ind in complete)
                    sig[t, i] = self.sigs((out, final))
        return sig

    def expansions(self, sig_id: int) -> list[tuple[int, ...]]:
        """The terminal sequences a signature announces (one per choice of terminals)."""
        out = self._expansions.get(sig_id)
        if out is not None:
            return out
        complete, final = self.sigs.items[sig_id]
        lexer = self.lexer
        choices = []
        for state, ind in complete:
            opts = set()
            for x in lexer.accepting_ids[state]:
                if x in self.ignored:
                    opts.add(())
                elif x == self.nl:
                    opts.add((x, self.T + ind))
                else:
                    opts.add((x,))
            choices.append(sorted(opts))
        opts = set()
        for x in lexer.possible_ids[final]:
            opts.add(() if x in self.ignored else (x,))
        choices.append(sorted(opts))
        out = sorted({tuple(itertools.chain.from_iterable(c)) for c in itertools.product(*choices)})
        self._expansions[sig_id] = out
        return out

    # ------------------------------------------------------------------ the walk per lexer state

    def _walk_states(self, states: list[int], sig: np.ndarray, q_of: dict) -> Iterator[list]:
        """`_walk_state`'s rows for each state, in the order of `states`, a chunk of states at a
        time (a list of their lists; an array appears once per chunk however many rows share it): in `WALK_PROCESSES`
        forked workers (chunks of `WALK_CHUNK` states; the parent merges them in order, so the
        rows, the indentations' ids and the store are the same as from one process)."""
        staying = staying_bytes(self.lexer.table, self.tokens)
        chunks = [states[i : i + WALK_CHUNK] for i in range(0, len(states), WALK_CHUNK)]
        bar = None
        if self.progress:
            from tqdm import tqdm

            bar = tqdm(total=len(states), desc="lexer states", unit="state", leave=False)
        global _WALK
        _WALK = (self, sig, q_of, staying)
        try:
            if WALK_PROCESSES < 2 or len(chunks) < 2 or not can_fork():
                for part in map(_walk_chunk, chunks):
                    yield part
                    if bar:
                        bar.update(len(part))
                return
            with forked_pool(WALK_PROCESSES) as pool:
                for part in pool.imap(_walk_chunk, chunks, chunksize=1):
                    yield part
                    if bar:
                        bar.update(len(part))
        finally:
            _WALK = None
            if bar:
                bar.close()

    def _walk_state(self, d: int, sig: np.ndarray, represented: list, staying) -> list[tuple]:
        """The rows of the NFA states that lexer state d represents: (group, S, the token
        set's digest, token ids, indentation) where the indentation is that of a newline row
        (its id is interned by the caller, in this order, then put in front of S), else None."""
        out: list[tuple] = []
        walked, end, st = first_lexeme(self.lexer.table, self.tokens, d, staying)
        # tokens that keep the lexeme growing: S = ()
        stay = end == -1
        stay_ids, stay_state = walked[stay], st[stay]
        for x, q in represented:
            sel = stay_ids[self.possible[stay_state, x]]
            if sel.size:
                out.append((1 + q, (), *self.token_sets.keyed(sel), None))
        # tokens whose lexeme ends inside them, after at least one byte
        tail = end > 0
        if not tail.any():
            return out
        t_ids, t_end, t_state = walked[tail], end[tail], st[tail]
        t_sigs = sig[t_ids, t_end]
        good = t_sigs >= 0
        t_ids, t_end, t_state, t_sigs = t_ids[good], t_end[good], t_state[good], t_sigs[good]
        for x, q in represented:
            sel = self.accepting[t_state, x]
            if not sel.any():
                continue
            g = 1 + q
            if x == self.nl:
                # the newline's indentation depends on the bytes it took in this token
                by_key = defaultdict(list)
                for t, e, s in zip(t_ids[sel].tolist(), t_end[sel].tolist(), t_sigs[sel].tolist()):
                    by_key[(indent_of(self.vocab.token_bytes[t][:e], True), s)].append(t)
                for (ind, s), toks in by_key.items():
                    key, arr = self.token_sets.keyed(np.array(toks, dtype=np.int32))
                    out.extend((g, seq, key, arr, ind) for seq in self.expansions(s))
                continue
            for sid, toks in _group(t_sigs[sel], t_ids[sel]):
                key, toks = self.token_sets.keyed(toks)
                out.extend((g, seq, key, toks, None) for seq in self.expansions(sid))
        return out

    # ------------------------------------------------------------------ build

    def build(self, header: dict, timeline: Timeline | None = None) -> MaskStore:
        """The full store; `timeline` gets its phases' wall and CPU seconds."""
        timeline = timeline if timeline is not None else Timeline()
        t0 = time.perf_counter()
        lexer = self.lexer
        n = lexer.n_states
        with timeline.phase("signatures"):
            sig = self._suffix_signatures()
        t_sig_s = time.perf_counter() - t0

        # NFA states q: one per class of configurations (X, d), its rows built from the
        # representative's d (the others of the class have the same rows)
        nfa = self.nfa
        q_of: dict[int, list[tuple[int, int]]] = defaultdict(list)  # d -> [(X, q)] where d represents q
        for q, (x, d) in enumerate(zip(nfa.q_term.tolist(), nfa.q_state.tolist())):
            q_of[d].append((x, q))
        rows: dict[int, dict[tuple, list[np.ndarray]]] = defaultdict(lambda: defaultdict(list))
        # group 0: the boundary group (tokens whose first byte ends the lexeme)
        ids = self.ids
        s0 = sig[ids, 0]
        ok = s0 >= 0
        for sid, toks in _group(s0[ok], ids[ok]):
            toks = self.token_sets(toks)
            for seq in self.expansions(sid):
                rows[0][seq].append(toks)

        dead_sets = _Interner()
        d_dead = np.zeros(n, dtype=np.int32)
        table = lexer.table
        for d in range(1, n):  # state 0 (the start) reads no lexeme: no row, no dead set
            d_dead[d] = dead_sets(bits.pack(table[d] < 0, dtype=np.uint8).tobytes())
        walked_states = [d for d in range(1, n) if q_of.get(d)]
        with timeline.phase("walk"):
            for chunk in self._walk_states(walked_states, sig, q_of):
                for entries in chunk:
                    for g, seq, key, toks, ind in entries:
                        if ind is not None:  # a newline's row: its indentation interned here, in order
                            seq = (self.T + self.indents(ind),) + seq
                        rows[g][seq].append(self.token_sets.intern(key, toks))
        t_walk = time.perf_counter() - t0 - t_sig_s

        Q = nfa.q_term.shape[0]
        q_group = np.arange(1, Q + 1, dtype=np.int32)
        q_boundary = np.where(self.accepting[nfa.q_state, nfa.q_term], 0, -1).astype(np.int32)
        groups = [rows.get(g, {}) for g in range(Q + 1)]
        header = dict(header, options=dict(header.get("options", {}), merge_states=nfa.merged))
        with timeline.phase("full_assemble"):
            store = assemble(
                header=header,
                vocab_size=self.vocab.size,
                n_terminals=self.T,
                indents=list(self.indents.items),
                nfa=nfa,
                q_group=q_group,
                q_boundary=q_boundary,
                d_dead=d_dead,
                dead_sets=np.frombuffer(b"".join(dead_sets.items), dtype=np.uint8).reshape(-1, 32),
                groups=groups,
                digests={id(toks): key for key, toks in self.token_sets.index.items()},
            )
        store.header.update(
            build_seconds=round(time.perf_counter() - t0, 2),
            signature_seconds=round(t_sig_s, 2),
            walk_seconds=round(t_walk, 2),
            signatures=len(self.sigs.items),
        )
        return store


_WALK: tuple | None = None  # (builder, signatures, q_of, staying) for the forked walk workers


def _walk_chunk(states: list[int]) -> list[list[tuple]]:
    builder, sig, q_of, staying = _WALK
    return [builder._walk_state(d, sig, q_of[d], staying) for d in states]


def _group(keys: np.ndarray, values: np.ndarray):
    """(key, sorted values) for each distinct key."""
    if not keys.size:
        return []
    order = np.argsort(keys, kind="stable")
    k, v = keys[order], values[order]
    cuts = np.flatnonzero(np.diff(k)) + 1
    return [(int(kk[0]), vv) for kk, vv in zip(np.split(k, cuts), np.split(v, cuts))]


def _union(parts: list[np.ndarray], vocab_size: int) -> np.ndarray:
    """The sorted distinct ids (int32) of token sets, each its ids or a bitset (`compact`): by a
    sort where they are few ids, else by marking a vector of the vocabulary (sets of 100k ids
    are common at 151k tokens; sorting them cost the full build a fifth of its time)."""
    if all(p.dtype != np.uint8 for p in parts) and sum(p.size for p in parts) * 16 < vocab_size:
        return np.unique(np.concatenate(parts)).astype(np.int32)
    marked = np.zeros(vocab_size, dtype=bool)
    for p in parts:
        if p.dtype == np.uint8:
            marked |= bits.unpack(p, vocab_size)
        else:
            marked[p] = True
    return np.flatnonzero(marked).astype(np.int32)


def assemble(
    *,
    header,
    vocab_size,
    n_terminals,
    indents,
    nfa: NfaStates,
    q_group,
    q_boundary,
    d_dead,
    dead_sets,
    groups: list[dict[tuple, list[np.ndarray]]],
    digests: dict[int, bytes] | None = None,
) -> MaskStore:
    """Pack grouped rows into the store's arrays, storing each distinct token set once: as a
    bitset, the sorted ids, or the sorted ids it leaves out (`sparse_negated`), the smallest.
    A row's token sets are sorted ids or bitsets (`compact`); `digests`: id(set) -> the digest
    of its compact form where known (`TokenSets`: a row of one set is not hashed again)."""
    W = bits.n_words(vocab_size)
    use16 = vocab_size <= 1 << 16
    dense_rows: list[np.ndarray] = []
    sparse_parts: list[np.ndarray] = []
    sparse_start = [0]
    sparse_negated: list[bool] = []
    mask_index: dict[bytes, int] = {}
    group_start = [0]
    row_seq_start = [0]
    seq: list[int] = []
    row_mask: list[int] = []
    for grp in groups:
        for s in sorted(grp):
            parts = grp[s]
            c = _union(parts, vocab_size) if len(parts) > 1 else parts[0]
            key = digests.get(id(c)) if digests is not None and len(parts) == 1 else None
            if key is None:  # a digest of the compact form, not of the ids: 100k-token sets are common
                c = c if c.dtype == np.uint8 else compact(c, vocab_size)
                key = _digest(c)
            m = mask_index.get(key)
            if m is None:
                toks = token_ids(c, vocab_size)
                per_id = 2 if use16 else 4
                negated = (vocab_size - toks.size) < toks.size
                if min(toks.size, vocab_size - toks.size) * per_id < W * 8:
                    m = ~(len(sparse_start) - 1)
                    if negated:  # most of the vocabulary: the ids left out
                        keep = np.ones(vocab_size, dtype=bool)
                        keep[toks] = False
                        toks = np.flatnonzero(keep)
                    sparse_parts.append(toks.astype(np.uint16 if use16 else np.uint32))
                    sparse_start.append(sparse_start[-1] + toks.size)
                    sparse_negated.append(negated)
                else:
                    marked = np.zeros(vocab_size, dtype=bool)
                    marked[toks] = True
                    dense_rows.append(bits.pack(marked, W))
                    m = len(dense_rows) - 1
                mask_index[key] = m
            row_mask.append(m)
            seq.extend(s)
            row_seq_start.append(len(seq))
        group_start.append(len(row_mask))
    header = dict(header)
    header.update(vocab_size=int(vocab_size), n_terminals=int(n_terminals))
    return MaskStore(
        header=header,
        q_term=nfa.q_term,
        q_state=nfa.q_state,
        pair_term=nfa.pair_term,
        pair_state=nfa.pair_state,
        pair_q=nfa.pair_q,
        q_group=q_group,
        q_boundary=q_boundary,
        d_dead=d_dead,
        dead_sets=dead_sets,
        group_start=np.array(group_start, dtype=np.int64),
        row_seq_start=np.array(row_seq_start, dtype=np.int64),
        seq=np.array(seq, dtype=np.int32),
        row_mask=np.array(row_mask, dtype=np.int32),
        dense=np.stack(dense_rows) if dense_rows else np.zeros((0, W), dtype=np.uint64),
        sparse_start=np.array(sparse_start, dtype=np.int64),
        sparse_negated=np.array(sparse_negated, dtype=np.uint8),
        sparse_ids=(
            np.concatenate(sparse_parts) if sparse_parts else np.zeros(0, dtype=np.uint16 if use16 else np.uint32)
        ),
        indents=indents,
    )
