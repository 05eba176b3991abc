"""`CompiledGrammar`: a mask store made ready to serve, and the masks of its configurations.

Stages, as in XGrammar: `Vocabulary` -> `MaskStore` (offline) -> `CompiledGrammar` (here: the
store loaded with the recognizer and lexer; immutable after construction, shared by all
requests; what it memoizes across requests lives in its one `GrammarMemo`) -> `GrammarMatcher`
(matcher.py: one per completion, cheap to create).

A configuration's mask (`config_bits`) is memoized by parser context, in bits; computing one
walks its group's rows (`mask_walk.collect`), plus the boundary rows when the open lexeme may
end here (restricted to the tokens whose first byte ends the lexeme: `dead_token_words`), whose
mask ids are memoized by parser context too. What the matcher applies after the grammar's mask
is here in words as well: the end of sequence (`eos_words`), the healed bytes' tokens
(`heal_words`) and healing's look-ahead under canonical tokenization (`heal_goes_on`).
"""

from __future__ import annotations

import functools
from collections import OrderedDict

import numpy as np

from grammar_tools.parsing.fstring_fields import field_checker
from grammar_tools.lexing.lexer_automaton import LexerAutomaton, load_lexer_automaton
from grammar_tools.parsing.recognizer import Node, Recognizer

from . import bits
from .canonical import CanonicalPairs, CanonicalState
from .mask_walk import Trie, collect
from .operator_runs import cycles
from .store import MaskStore
from .vocabulary import Vocabulary


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

    - `tries`: each group's rows as a trie (`mask_walk.group_trie`, built on first use);
    - `masks`: the configurations' masks in bits (`config_bits`): 6 KB each, where booleans took
      48 KB (4,096 of them 192 MB; docs/memory.md);
    - `boundary`: (group, node key) -> the boundary rows' mask ids;
    - `top_accepted`: `mask_walk.top_accepted`'s memo (bounded: emptied when full);
    - `heal_goes_on`: healing's look-ahead (`GrammarMatcher._drop_dead_ends`) and `heal_words`:
      the tokens that may spell the healed bytes; the healed bytes repeat across requests
      (indentations above all);
    - `stats`: parser_checks, recognizer calls (`accepted`, `feed`) made to compute masks; with
      masks (computed, not from the memo) it gives the checks per mask, the figure that
      streamlining lowers; rows ORed; cache_hits.

    Not locked: its users compute masks one at a time (the engine under its lock, a team batch's
    rows on the batch's one thread)."""

    __slots__ = ("tries", "masks", "boundary", "top_accepted", "heal_goes_on", "heal_words", "stats")

    def __init__(self, size: int, heal_goes_on, heal_words) -> None:
        self.tries: dict[int, Trie] = {}  # `mask_walk.group_trie`
        self.masks = _Lru(size)
        self.boundary = _Lru(size)
        self.top_accepted: dict = {}
        self.heal_goes_on = functools.lru_cache(maxsize=size)(heal_goes_on)
        self.heal_words = functools.lru_cache(maxsize=size)(heal_words)
        self.stats = {"parser_checks": 0, "rows": 0, "cache_hits": 0, "masks": 0}


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
        self.fields = field_checker(self.recognizer, self.lexer)
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
        self.runs = cycles(self.recognizer)  # `operator_runs`: runs walked without checks
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
        self.eos_words = np.zeros(self.W, dtype=np.uint64)  # the end-of-sequence tokens, in bits
        bits.set_ids(self.eos_words, self.eos)
        self.eos_words.setflags(write=False)
        self.not_eos_words = ~self.eos_words
        self.not_eos_words.setflags(write=False)
        self.tokens = vocab.token_bytes
        self._cache_size = cache_size
        self.memo = GrammarMemo(cache_size, self._heal_goes_on, self._heal_words)

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

    def _heal_words(self, heal: bytes) -> np.ndarray:
        """The tokens that start with the healed bytes `heal` or are a prefix of them, as (W,)
        uint64 words, read-only (`memo.heal_words`: memoized across requests)."""
        words = np.zeros(self.W, dtype=np.uint64)
        bits.set_ids(words, self.vocab.tokens_compatible_with(heal))
        words.setflags(write=False)
        return words

    # ------------------------------------------------------------------ masks
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

    def config_mask(self, c) -> np.ndarray:
        """The tokens allowed from one configuration, as booleans (`config_bits`)."""
        return bits.unpack(self.config_bits(c), self.V)

    def config_bits(self, c) -> np.ndarray:
        """The tokens allowed from one configuration as (W,) uint64 words (`masks_to_bits`;
        read-only, memoized by parser context)."""
        node_key = c.node_key
        key = (c.q, node_key, c.width)
        cached = self.memo.masks.get(key)
        if cached is not None:
            self.memo.stats["cache_hits"] += 1
            return cached
        ids: list[int] = []
        collect(self, self.q_group[c.q], c.node, c.width, ids)
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
            collect(self, group, node, None, found)
            ids = tuple(found)
            self.memo.boundary.put(key, ids)
        return ids
