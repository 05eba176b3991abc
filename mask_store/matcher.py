"""`GrammarMatcher`: the per-completion runtime that says which tokens may come next.

Stages, as in XGrammar: `Vocabulary` -> `MaskStore` (offline) -> `CompiledGrammar` (the store
loaded with the recognizer and lexer; immutable after construction, shared by all requests; what
it memoizes across requests lives in its one `GrammarMemo`) -> `GrammarMatcher` (one per
completion, cheap to create; what a completion's masks did is counted in its `MaskCounts`).

A matcher holds a set of configurations `(q, node, width)`: NFA state q (a class of lexer
configurations (X, d) that read every token alike, walked from its representative d), the parser
node after everything announced so far (X included), and the indentation width typed so far
when the open lexeme is a newline. `next_token_mask()` ORs, for every configuration, the rows
of q's group whose terminal sequence the parser accepts, walking the rows as a trie so that a
shared prefix is checked once, plus the boundary rows when X may end here (restricted to tokens
whose first byte ends the lexeme). What may follow a node is memoized on it (`accepted`), and for
the nodes a walk makes, across walks by the fields of the stack's top two nodes where that is all
it depends on (`Recognizer.top_accepted`); the walk's nodes are its own (freed when it ends).
Whole masks, and the boundary rows' mask ids, are memoized by parser context.

Canonical tokenization (mask_store.canonical, on when the matcher is given a `CanonicalState`
other than `OFF`): the mask is also ANDed with the tokens that keep the generated sequence one
the tokenizer would produce. Where that leaves nothing the grammar alone allows, the step falls
back to the grammar's mask and counts it (`MaskCounts.canonical_fallbacks`, the completion's own).

Error policy: `accept_token` returns False for a token the grammar rejects (the state is
unchanged; canonicality is the mask's business, not a reason to reject: a fallback step's token
is accepted); misuse (rollback past the start, an id outside the vocabulary) raises ValueError;
there is never a silent fallback to unconstrained decoding.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from grammar_tools.parsing.fstring_fields import FieldChecker
from grammar_tools.parsing.incremental import PrefixParser, PrefixState
from grammar_tools.lexing.lexer_automaton import LexerAutomaton, load_lexer_automaton
from grammar_tools.parsing.recognizer import Node, Recognizer
from grammar_tools.parsing.recovery import parse_prefix

from . import bits
from .canonical import OFF, CanonicalPairs, CanonicalState
from .operator_runs import cycles, in_cycle
from .store import MaskStore
from .token_lexing import extend_width, walk
from .vocabulary import Vocabulary


_TOP_ACCEPTED_SIZE = 32768  # entries of `Recognizer.top_accepted`'s memo (~200 bytes each)


class _Lru:
    """A memo that forgets the entry least recently used when it holds more than `size`."""

    __slots__ = ("entries", "size")

    def __init__(self, size: int) -> None:
        self.entries: OrderedDict = OrderedDict()
        self.size = size

    def get(self, key):
        value = self.entries.get(key)
        if value is not None:
            self.entries.move_to_end(key)
        return value

    def put(self, key, value) -> None:
        self.entries[key] = value
        if len(self.entries) > self.size:
            self.entries.popitem(last=False)


class GrammarMemo:
    """What a `CompiledGrammar` memoizes across requests, in one place (the compiled grammar
    itself does not change after construction), and the counts of the work done to fill it.

    - `tries`: each group's rows as a trie (`CompiledGrammar.trie`, built on first use);
    - `masks`: the configurations' masks in bits (`config_bits`): 6 KB each, where booleans took
      48 KB (4,096 of them 192 MB; docs/memory.md);
    - `boundary`: (group, node key) -> the boundary rows' mask ids;
    - `top_accepted`: `Recognizer.top_accepted`'s memo (bounded: emptied when full);
    - `heal_goes_on`: healing's look-ahead (`GrammarMatcher._drop_dead_ends`): the healed bytes
      repeat across requests (indentations above all);
    - `stats`: parser_checks, recognizer calls (`accepted`, `feed`) made to compute masks; with
      masks (computed, not from the memo) it gives the checks per mask, the figure that
      streamlining lowers; rows ORed; cache_hits.

    Not locked: its users compute masks one at a time (the engine under its lock, a team batch's
    rows on the batch's one thread)."""

    __slots__ = ("tries", "masks", "boundary", "top_accepted", "heal_goes_on", "stats")

    def __init__(self, size: int, heal_goes_on) -> None:
        self.tries: dict[int, _Trie] = {}
        self.masks = _Lru(size)
        self.boundary = _Lru(size)
        self.top_accepted: dict = {}
        self.heal_goes_on = functools.lru_cache(maxsize=size)(heal_goes_on)
        self.stats = {"parser_checks": 0, "rows": 0, "cache_hits": 0, "masks": 0}


@dataclass
class MaskCounts:
    """What one completion's masks did under canonical tokenization, shared by a matcher and
    its forks (and by the matchers of one request where the caller hands the same record):
    masks ANDed with the canonical pairs, and steps where that left nothing the grammar allows
    but the end, so the grammar's mask was used alone."""

    canonical_masks: int = 0
    canonical_fallbacks: int = 0


class _Trie:
    __slots__ = ("masks", "children")

    def __init__(self) -> None:
        self.masks: list[int] = []
        self.children: dict[int, _Trie] = {}


@dataclass(frozen=True)
class Config:
    q: int
    node: Node
    width: tuple[int, int] | None  # the open newline's indentation so far
    held: bytes = b""  # the open lexeme so far when it is an f-/t-string (its fields are checked)


def dead_token_masks(store: MaskStore, vocab: Vocabulary) -> np.ndarray:
    """(dead sets, V) booleans: the usable tokens whose first byte ends a lexeme in each dead set
    (`CompiledGrammar` keeps them in bits, `bits.pack`)."""
    V = store.vocab_size
    first = np.array([b[0] if b else 0 for b in vocab.token_bytes[:V]], dtype=np.int64)
    dead = bits.unpack(store.dead_sets, 256)  # (S, 256)
    usable = np.array([bool(b) and i not in vocab.special for i, b in enumerate(vocab.token_bytes[:V])])
    return dead[:, first] & usable


def dead_token_words(store: MaskStore, vocab: Vocabulary, words: int) -> np.ndarray:
    """`dead_token_masks` in bits, (dead sets, `words`) uint64, read-only, made one dead set at a
    time: all of them as booleans first took ~3 s for a 262,144-token vocabulary (a 127 MB
    array), row by row 0.25 s."""
    V = store.vocab_size
    spelled = vocab.token_bytes[:V]
    lengths = np.fromiter(map(len, spelled), dtype=np.int64, count=V)
    joined = np.frombuffer(b"".join(spelled), dtype=np.uint8)
    usable = lengths > 0
    first = np.zeros(V, dtype=np.intp)  # each token's first byte (0: none)
    first[usable] = joined[(np.cumsum(lengths) - lengths)[usable]]
    usable[[i for i in vocab.special if i < V]] = False
    dead = bits.unpack(store.dead_sets, 256)  # (S, 256)
    out = np.zeros((dead.shape[0], words), dtype=np.uint64)
    for s in range(dead.shape[0]):
        out[s] = bits.pack(dead[s][first] & usable, words)
    out.setflags(write=False)
    return out


class CompiledGrammar:
    """A mask store made ready to serve: immutable after construction, shared by all requests;
    its memos are `memo`'s (one `GrammarMemo`), its per-request counts the matchers'."""

    def __init__(
        self,
        store: MaskStore,
        vocab: Vocabulary,
        recognizer: Recognizer | None = None,
        lexer: LexerAutomaton | None = None,
        cache_size: int = 4096,
        canonical: CanonicalPairs | None = None,
        _dead_masks: np.ndarray | None = None,  # `for_version`: the same store's
    ) -> None:
        self.store = store
        self.vocab = vocab
        self.canonical = canonical  # None: the tokenizer's canonical pairs are not available
        self.recognizer = recognizer or Recognizer()
        if store.header.get("options", {}).get("streamline") and not self.recognizer.semantic_checks:
            # its rows were merged and deleted by what the guarded parser accepts
            raise ValueError("a streamlined mask store needs a recognizer with semantic checks")
        self.lexer = lexer or load_lexer_automaton(self.recognizer.grammar)
        # f-/t-string fields: the store's rows see a string lexeme; every token that writes one
        # has the fields' expressions parsed (`grammar_tools.parsing.fstring_fields`)
        self.fields = FieldChecker(self.recognizer, self.lexer)
        g = self.recognizer.grammar
        self.T = g.n_terminals
        self.NL = g.term_id["_NEWLINE"]
        self.CONT = g.term_id["LINE_CONT"]
        self.ignored = g.ignored
        self.V = store.vocab_size
        self.q_index = store.nfa().index()  # (X, d) -> q: many to one (`nfa_states`)
        self.q_term = store.q_term.tolist()
        self.q_state = store.q_state.tolist()
        self.q_group = store.q_group.tolist()
        self.q_boundary = store.q_boundary.tolist()
        self.d_dead = store.d_dead.tolist()
        self._runs = cycles(self.recognizer)  # `operator_runs`: runs walked without checks
        self._sparse = [
            store.sparse_ids[store.sparse_start[k] : store.sparse_start[k + 1]]
            for k in range(store.sparse_start.shape[0] - 1)
        ]
        self._negated = store.sparse_negated.astype(bool).tolist()  # ids left out, not allowed
        # (S, W) words: tokens whose first byte ends a lexeme in each dead set; the store's, whatever
        # the version (in bits: 2.9 MB, where booleans took 23 MB)
        self.W = store.dense.shape[1]
        self._dead_masks = _dead_masks if _dead_masks is not None else dead_token_words(store, vocab, self.W)
        self.eos = np.array(sorted(vocab.eos), dtype=np.int64)
        self.tokens = vocab.token_bytes
        self._cache_size = cache_size
        self.memo = GrammarMemo(cache_size, self._heal_goes_on)

    def cache_bytes(self) -> int:
        """What the masks memoized across requests hold (configurations' masks and the canonical
        rows, both in bits), for the server's memory report."""
        rows = self.canonical.row_cache_info().currsize if self.canonical is not None else 0
        return sum(m.nbytes for m in list(self.memo.masks.entries.values())) + rows * self.W * 8

    def for_version(self, python_version) -> CompiledGrammar:
        """The same store serving another target Python version (`grammar_tools.parsing.versions`):
        one store serves them all, the recognizer of the version decides. Own caches."""
        if tuple(python_version) == self.recognizer.python_version:
            return self
        rec = Recognizer(self.recognizer.grammar, python_version=python_version,
                         semantic_checks=self.recognizer.semantic_checks)
        return CompiledGrammar(self.store, self.vocab, rec, self.lexer, self._cache_size, self.canonical,
                               _dead_masks=self._dead_masks)

    def heal_goes_on(self, state: CanonicalState, rest: bytes) -> bool:
        """`_heal_goes_on`, memoized by state and rest across requests (`GrammarMemo`)."""
        return self.memo.heal_goes_on(state, rest)

    def _heal_goes_on(self, state: CanonicalState, rest: bytes) -> bool:
        """Whether tokens the canonical rows allow from `state` can spell `rest` and then go on
        (a token that starts with `rest` ends the search: the grammar decides what follows)."""
        pairs, tb = self.canonical, self.tokens
        ids = self.vocab.tokens_compatible_with(rest)
        ids = ids[pairs.allowed_after(state)[ids]].tolist()
        return any(len(tb[u]) >= len(rest) for u in ids) or any(
            self.heal_goes_on(pairs.after(state, u), rest[len(tb[u]) :]) for u in ids)

    # ------------------------------------------------------------------ rows

    def trie(self, group: int) -> _Trie:
        t = self.memo.tries.get(group)
        if t is None:
            t = _Trie()
            s = self.store
            lo, hi = int(s.group_start[group]), int(s.group_start[group + 1])
            starts = s.row_seq_start
            seq = s.seq
            masks = s.row_mask
            for r in range(lo, hi):
                node = t
                for e in seq[starts[r] : starts[r + 1]].tolist():
                    nxt = node.children.get(e)
                    if nxt is None:
                        nxt = node.children[e] = _Trie()
                    node = nxt
                node.masks.append(int(masks[r]))
            self.memo.tries[group] = t
        return t

    def collect(self, group: int, node: Node, width, out: list[int]) -> None:
        """Append the mask ids of the rows of `group` that the parser accepts from `node`.

        A walk item is (trie node, parser node, run terminal, run length): with a run terminal
        e, the parser node is in a cycle of `operator_runs` for e and stands for itself fed e
        `run length` more times (the same terminals may follow each: its own `accepted`); the
        run is fed for real only where a row leaves it (`_run_fed`)."""
        rec = self.recognizer
        T, NL = self.T, self.NL
        indents = self.store.indents
        runs = self._runs
        tops = self.memo.top_accepted
        if len(tops) > _TOP_ACCEPTED_SIZE:
            tops.clear()
        stack = [(self.trie(group), node, -1, 0)]
        checks = 0
        while stack:
            trie, p, run, k = stack.pop()
            out.extend(trie.masks)
            if not trie.children:
                continue
            # within a run: the run's first node's, memoized on it; the walk's own nodes' by
            # their top two nodes' fields, across walks, when that is all the set depends on
            acc = p.acc
            if acc is None:
                acc = rec.accepted(p) if p is node else rec.top_accepted(p, tops)
            checks += not k
            depth0 = p.depth == 0
            fed = []  # the children whose terminal is fed to p: all at once (`feed_all`)
            indents_fed = []
            for e, child in trie.children.items():
                if e < T:
                    if e == NL and not depth0:
                        stack.append((child, p, run, k))  # newlines inside brackets are nothing
                        continue
                    if not acc >> e & 1:
                        continue
                    if not child.children:
                        out.extend(child.masks)
                        continue
                    if e == run:
                        stack.append((child, p, run, k + 1))  # the run goes on: no check
                        continue
                    fed.append((e, child))
                elif not depth0:
                    stack.append((child, p, run, k))
                else:
                    indents_fed.append((e, child))
            if not fed and not indents_fed:
                continue
            if k:
                p = self._run_fed(p, run, k)
                checks += k
            if fed:
                # not memoized on p: the walk's nodes are its own, freed (by reference counts)
                # when it ends; a node memoized on the configuration's own would hold the walk's
                # tree as long as the configuration lives (a matcher's history: the cycle
                # collector's work)
                checks += len(fed)
                if len(fed) == 1:
                    e, child = fed[0]
                    after = {e: rec.feed(p, e)}
                else:
                    after = {}
                    rec.feed_all(p, [e for e, _ in fed], after)
                for e, child in fed:
                    p2 = after[e]
                    if p2 is not None:
                        if runs and (p2.state, e) in runs and in_cycle(runs, p, p2, e, rec):
                            stack.append((child, p2, e, 0))
                        else:
                            stack.append((child, p2, -1, 0))
            for e, child in indents_fed:
                col, alt = indents[e - T].width(width)
                p2 = rec.feed_indentation(p, col, alt)
                checks += 1
                if p2 is not None:
                    stack.append((child, p2, -1, 0))
        self.memo.stats["parser_checks"] += checks

    def _run_fed(self, p: Node, run: int, k: int) -> Node:
        """The parser node `p` fed the terminal `run` k times (in a cycle: each is accepted)."""
        rec = self.recognizer
        for _ in range(k):
            p = rec.feed(p, run)
        return p

    def masks_to_bool(self, ids: list[int]) -> np.ndarray:
        """The tokens of the union of masks `ids` (`masks_to_bits`), as booleans."""
        return bits.unpack(self.masks_to_bits(ids), self.V)

    def masks_to_bits(self, ids: list[int]) -> np.ndarray:
        """The union of masks `ids` as (W,) uint64 words, bit t of the vocabulary at word t // 64,
        bit t % 64, as the store's dense masks (a mask computed, ORed and memoized in bits: at
        262k tokens every pass over booleans costs 5-10 us, unpacking them ~20 us).

        The masks stored as the ids they leave out (`sparse_negated`, most of the vocabulary:
        rows inside identifiers) are ORed as one: their union leaves out only the ids that all
        of them leave out."""
        self.memo.stats["rows"] += len(ids)
        dense = [m for m in ids if m >= 0]
        if not dense:
            out = np.zeros(self.W, dtype=np.uint64)
        elif len(dense) == 1:
            out = self.store.dense[dense[0]].copy()
        else:
            out = np.bitwise_or.reduce(self.store.dense[dense], axis=0)
        sparse = [~m for m in ids if m < 0]
        if not sparse:
            return out
        parts = [self._sparse[k] for k in sparse if not self._negated[k]]
        if parts:
            bits.set_ids(out, np.concatenate(parts) if len(parts) > 1 else parts[0])
        left_out = None
        for k in sparse:
            if self._negated[k]:
                ids_k = self._sparse[k]
                left_out = ids_k if left_out is None else np.intersect1d(left_out, ids_k, assume_unique=True)
        if left_out is not None:
            rest = np.zeros(self.W, dtype=np.uint64)
            bits.set_ids(rest, left_out)
            out |= ~rest
        return out

    def config_mask(self, c: Config) -> np.ndarray:
        """The tokens allowed from one configuration, as booleans (`config_bits`)."""
        return bits.unpack(self.config_bits(c), self.V)

    def config_bits(self, c: Config) -> np.ndarray:
        """The tokens allowed from one configuration as (W,) uint64 words (`masks_to_bits`;
        read-only, memoized by parser context)."""
        node_key = c.node.key()
        key = (c.q, node_key, c.width)
        cached = self.memo.masks.get(key)
        if cached is not None:
            self.memo.stats["cache_hits"] += 1
            return cached
        ids: list[int] = []
        self.collect(self.q_group[c.q], c.node, c.width, ids)
        mask = self.masks_to_bits(ids)
        b = self.q_boundary[c.q]
        if b >= 0:
            node = c.node
            if self.q_term[c.q] == self.NL and node.depth == 0:
                # the newline ends right at this token: its indentation is what is typed so far
                col, alt = c.width or (0, 0)
                node = self.recognizer.feed_indentation(node, col, alt)
                node_key = None if node is None else node.key()
            if node is not None:
                bids = self._boundary_rows(b, node, node_key)
                if bids:
                    mask |= self.masks_to_bits(bids) & self._dead_masks[self.d_dead[self.q_state[c.q]]]
        mask.setflags(write=False)
        self.memo.masks.put(key, mask)
        self.memo.stats["masks"] += 1
        return mask

    def _boundary_rows(self, group: int, node: Node, node_key: tuple) -> tuple[int, ...]:
        """The mask ids of the boundary rows of `group` that the parser accepts from `node`,
        memoized by parser context: while a lexeme grows over several tokens (a name, a
        number) its configurations change with each token, but the node and the rows after
        the lexeme stay the same."""
        key = (group, node_key)
        ids = self.memo.boundary.get(key)
        if ids is None:
            found: list[int] = []
            self.collect(group, node, None, found)
            ids = tuple(found)
            self.memo.boundary.put(key, ids)
        return ids

    # ------------------------------------------------------------------ transitions

    def start_configs(self, st: PrefixState, held: bytes) -> list[Config]:
        """Configurations for the held-back lexeme of a parsed prefix (its bytes: `held`): one
        per terminal it may still become (announced, i.e. fed, now)."""
        d = st.lexer_state
        out = []
        for x in self.lexer.possible_ids[d]:
            q = self.q_index.get((x, d))
            if q is None:
                continue
            for node in st.configs:
                n = self._announce(node, x)
                if n is None:
                    continue
                if self.fields.is_field_string(x):
                    if self.fields.is_valid(held, node.ctx):
                        out.append(Config(q, n, None, held))
                else:
                    out.append(Config(q, n, st.newline_width if x == self.NL else None))
        return out

    def _announce(self, node: Node, x: int) -> Node | None:
        if x in self.ignored:
            return node
        if x == self.NL:
            return self.recognizer.feed_newline(node)
        return self.recognizer.feed_cached(node, x)

    def _complete(self, node: Node, state: int, data: bytes) -> list[Node]:
        """Nodes after a complete lexeme (one per terminal it may be)."""
        rec = self.recognizer
        out = []
        fields = self.fields
        for x in self.lexer.accepting_ids[state]:
            if fields.is_field_string(x) and not fields.is_valid(data, node.ctx):
                continue
            if x in self.ignored:
                out.append(node)
            elif x == self.NL:
                n = rec.feed_newline(node)
                if n is not None:
                    col, alt = extend_width(None, data)
                    n = rec.feed_indentation(n, col, alt)
                if n is not None:
                    out.append(n)
            else:
                n = rec.feed_cached(node, x)
                if n is not None:
                    out.append(n)
        return out

    def advance(self, c: Config, data: bytes) -> list[Config]:
        """Configurations after token bytes `data` from `c` (empty: the token is rejected)."""
        x, d = self.q_term[c.q], self.q_state[c.q]
        w = walk(self.lexer, d, data)
        if w is None:
            return []
        rec = self.recognizer
        fields = self.fields
        is_field = fields.is_field_string(x)
        if w.first_end is None:
            q = self.q_index.get((x, w.first_state))
            if q is None:
                return []
            if is_field:
                held = c.held + data
                return [Config(q, c.node, None, held)] if fields.is_valid(held, c.node.ctx) else []
            width = extend_width(c.width, data) if x == self.NL else None
            return [Config(q, c.node, width)]
        if not self.lexer.accepting[w.first_state] >> x & 1:
            return []
        if is_field and not fields.is_valid(c.held + data[: w.first_end], c.node.ctx):
            return []
        node = c.node
        if x == self.NL and node.depth == 0:
            col, alt = extend_width(c.width, data[: w.first_end])
            node = rec.feed_indentation(node, col, alt)
            if node is None:
                return []
        nodes = [node]
        for a, b, st in w.lexemes:
            nodes = [n2 for n in nodes for n2 in self._complete(n, st, data[a:b])]
            if not nodes:
                return []
        out = []
        fs = w.final_state
        tail = data[w.final_start :]
        for x2 in self.lexer.possible_ids[fs]:
            q = self.q_index.get((x2, fs))
            if q is None:
                continue
            is_field = fields.is_field_string(x2)
            for n in nodes:
                n2 = self._announce(n, x2)
                if n2 is None:
                    continue
                if is_field:
                    if fields.is_valid(tail, n.ctx):
                        out.append(Config(q, n2, None, tail))
                else:
                    out.append(Config(q, n2, extend_width(None, tail) if x2 == self.NL else None))
        return out

    def can_end(self, c: Config) -> bool:
        """Whether the text may end in configuration `c` (the open lexeme closed, then CPython's
        implicit NEWLINE and DEDENTs, then the end; never right after a line continuation, where
        CPython finds an unexpected end of file)."""
        x, d = self.q_term[c.q], self.q_state[c.q]
        if x == self.CONT or not self.lexer.accepting[d] >> x & 1:
            return False
        return self.recognizer.can_end(c.node, after_newline=x == self.NL)  # a newline was fed when announced


class MaskBuffer:
    """Memory a caller lends `GrammarMatcher.fill_next_token_mask` and reuses at every step of
    a decoding: `words`, the mask in bits ((W,) uint64, `bits`' layout), and `spare`, where the
    grammar's mask is kept while the canonical one is made from it. Each fill overwrites both."""

    __slots__ = ("words", "spare")

    def __init__(self, compiled: CompiledGrammar) -> None:
        self.words = np.zeros(compiled.W, dtype=np.uint64)
        self.spare = np.zeros(compiled.W, dtype=np.uint64)


def _dedupe(configs: list[Config]) -> list[Config]:
    if len(configs) < 2:
        return configs
    seen = {}
    for c in configs:
        seen.setdefault((c.q, c.node.key(), c.width, c.held), c)
    return list(seen.values())


class GrammarMatcher:
    """Which tokens may come next in one completion; see the module docstring."""

    def __init__(self, compiled: CompiledGrammar, configs, heal: bytes = b"",
                 prefix_state: PrefixState | None = None, history: tuple | None = None,
                 canonical: CanonicalState = OFF, counts: MaskCounts | None = None) -> None:
        if canonical.active and compiled.canonical is None:
            raise ValueError("canonical tokenization asked of a grammar compiled without canonical pairs")
        self.compiled = compiled
        self.configs: tuple[Config, ...] = tuple(configs)
        self.heal = heal  # bytes the next tokens must spell again (token healing: `mask_store.healing`)
        self.prefix_state = prefix_state  # the parse of the text before the cursor (`from_prefix`)
        self.canonical = canonical  # the canonical state after the last token (OFF: not filtered)
        # earlier states, newest first, as a shared linked list: (configs, heal, canonical, older, count)
        self._history = history
        self.counts = counts if counts is not None else MaskCounts()  # the completion's, shared by forks

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_prefix(
        cls,
        compiled: CompiledGrammar,
        text: str | bytes,
        heal: bytes = b"",
        parser: PrefixParser | None = None,
        canonical: CanonicalState = OFF,
        counts: MaskCounts | None = None,
    ) -> GrammarMatcher:
        """A matcher for the text before the cursor (minus `heal`: bytes that the first tokens
        must spell again). Recovers from syntax errors before the cursor; raises
        `grammar_tools.parsing.incremental.ParseError`/`LexError` when it can't. `canonical`: the
        canonical state after the prompt's tokens kept (`CanonicalPairs.state_after`), or OFF.
        `counts`: a record to count into (one request's matchers sharing one), else a new one."""
        data = text.encode() if isinstance(text, str) else text
        parser = parser or PrefixParser(compiled.recognizer, compiled.lexer)
        st = parse_prefix(parser, data)
        held = data[st.lexeme_start : st.end]
        return cls(compiled, compiled.start_configs(st, held), heal, prefix_state=st, canonical=canonical,
                   counts=counts)

    def fork(self) -> GrammarMatcher:
        return GrammarMatcher(self.compiled, self.configs, self.heal, self.prefix_state, self._history,
                              self.canonical, self.counts)

    # ------------------------------------------------------------------ queries

    def next_token_mask(self, out: MaskBuffer | None = None) -> np.ndarray:
        """Bool array over the vocabulary: True for the tokens that may come next
        (`fill_next_token_mask` unpacked once; `out`: the caller's buffer for its words, reused
        step after step, else one made for this call). Does not change the matcher."""
        words = self.fill_next_token_mask(out if out is not None else MaskBuffer(self.compiled))
        return bits.unpack(words, self.compiled.V)

    def fill_next_token_mask(self, out: MaskBuffer) -> np.ndarray:
        """The tokens that may come next written into the caller's `out.words` ((W,) uint64,
        `bits`' layout; returned), as XGrammar fills a caller's bitmask: the configurations'
        memoized words ORed, then healing, the end of sequence and canonical tokenization
        applied in words (64 tokens a word), nothing allocated per step for the mask. Does
        not change the matcher."""
        comp = self.compiled
        words = out.words
        if not self.configs:
            words.fill(0)
            return words
        np.copyto(words, comp.config_bits(self.configs[0]))
        for c in self.configs[1:]:
            np.bitwise_or(words, comp.config_bits(c), out=words)
        if self.heal:
            allowed = np.zeros(comp.W, dtype=np.uint64)
            bits.set_ids(allowed, comp.vocab.tokens_compatible_with(self.heal))
            words &= allowed
        elif self.is_complete():
            bits.set_ids(words, comp.eos)
        if self.canonical.active:
            self._canonical(words, out.spare)
        return words

    def _canonical(self, words: np.ndarray, grammar: np.ndarray) -> None:
        """The grammar's mask `words` ANDed, in place, with the canonical pairs after the last
        token; left the grammar's alone (counted) where that leaves no token but the end of
        sequence while the grammar has others. `grammar`: room for a copy of the grammar's."""
        comp = self.compiled
        self.counts.canonical_masks += 1
        np.copyto(grammar, words)
        row = comp.canonical.allowed_after_bits(self.canonical)
        if row is not None:
            words &= row
        if self.heal:
            self._drop_dead_ends(words)
        eos = comp.eos
        end = eos[bits.are_set(words, eos)]  # the end of sequence: the grammar's to allow (rows leave it alone)
        bits.clear_ids(words, eos)
        if words.any():
            bits.set_ids(words, end)
            return
        bits.set_ids(words, eos)
        if not (grammar & ~words).any():  # the grammar allows no more than the end either
            bits.clear_ids(words, eos)
            bits.set_ids(words, end)
            return
        self.counts.canonical_fallbacks += 1  # nothing but the end left: the grammar decides alone
        np.copyto(words, grammar)

    def _drop_dead_ends(self, words: np.ndarray) -> None:
        """While healing: a token spelling only part of the healed bytes must leave a rest that
        tokens can go on spelling canonically after it (cleared in the mask's `words`).
        `\\n\\n   ` for a healed `\\n\\n        ` leaves five spaces that, after a whitespace
        run, only a lone space may start, after which the run must end; `un` for `undeclar`
        leaves `declar`, which every token would merge across (`und` `ecl` `ared`): taken, each
        would be followed by fallbacks. The tokenizer's own spelling of the healed bytes always
        goes on, so it is never dropped (the grammar is not asked about the rest;
        `CompiledGrammar.heal_goes_on` searches, memoized by state and rest across requests)."""
        comp = self.compiled
        pairs, heal, by = comp.canonical, self.heal, comp.vocab.by_bytes
        for k in range(1, len(heal)):
            t = by.get(heal[:k])
            if t is not None and bits.contains(words, t) and not comp.heal_goes_on(pairs.after(self.canonical, t),
                                                                                   heal[k:]):
                bits.clear_ids(words, [t])

    def is_complete(self) -> bool:
        """The text so far can end here: statements closed, brackets balanced."""
        return not self.heal and any(self.compiled.can_end(c) for c in self.configs)

    # ------------------------------------------------------------------ updates

    def accept_token(self, token: int) -> bool:
        comp = self.compiled
        if not 0 <= token < comp.V:
            raise ValueError(f"token id {token} outside the vocabulary ({comp.V})")
        if token in comp.vocab.special:
            return False
        data = comp.tokens[token]
        heal = self.heal
        if heal:
            if data.startswith(heal):
                heal = b""
            elif heal.startswith(data):
                heal = heal[len(data) :]
            else:
                return False
        new = [n for c in self.configs for n in comp.advance(c, data)]
        if not new:
            return False
        h = self._history
        self._history = (self.configs, self.heal, self.canonical, h, (h[4] + 1) if h else 1)
        self.configs = tuple(_dedupe(new))
        self.heal = heal
        if self.canonical.active:
            self.canonical = comp.canonical.after(self.canonical, token)
        return True

    def rollback(self, n: int = 1) -> None:
        if n < 0 or n > self.n_accepted:
            raise ValueError(f"can't roll back {n} tokens ({self.n_accepted} accepted)")
        for _ in range(n):
            self.configs, self.heal, self.canonical, self._history, _ = self._history

    @property
    def n_accepted(self) -> int:
        return self._history[4] if self._history else 0

