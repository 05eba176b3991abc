"""Canonical tokenization: only the token sequences the tokenizer itself would produce (seed 003).

A constraint can lead a model into spellings its tokenizer never produces (`ret` + `urn` for
`return`, `\\n` + ` ` + `   return` for an indented line): the model never saw them in training,
they skew its distribution and slow decoding. `CanonicalPairs` says, after a token, which next
tokens keep the sequence canonical; the matcher ANDs it with the grammar's mask.

Why pairs suffice, for byte-level BPE with GPT-2's pre-tokenizer (mask_store.pretoken_junctions):
the encoding cuts the text into pre-tokens and runs BPE inside each one; within a pre-token, a
sequence is BPE's output iff each adjacent pair is (the merges that build a token only see its
own bytes, and a pair is canonical iff no merge across its junction fires first). The pair
verdict is exact except where the pre-token cut depends on text outside the pair; there the
state carries one more fact (`Continuation`):
- `'` followed by `s`/`t`/`re`/...: a contraction only where `'` starts a match, not inside a
  run of punctuation (`('` + `s`): the state remembers that `'` continued a run;
- a whitespace token followed by a single whitespace character that would merge with it
  (`\\n` + `\\n`, `\\n   ` + ` `): canonical only if the next token starts with a
  non-space, which gives that last character away (`\\n\\nx` is `\\n` + `\\n` + `x`): allowed,
  and the state then requires a non-space.
What is not exact, on the permissive side only (allowed though perhaps not canonical): a
junction beside a multi-byte character that the pair does not complete (its class is unknown),
and added non-special tokens. Nothing canonical is ever masked (the stdlib walk checks it).

The merge check, from the merge ranks (no pair is encoded): BPE applies merges in rank order
(each merge ranks after the ones that made its two parts; checked at build), leftmost first on
ties. While a and b are built, the token at a's right edge runs through a's *right spine* (a,
its right part, that part's right part, ... down to a byte), each alive from the merge that made
it until the merge that joins it to its left neighbour; b's left edge runs through its *left
spine* likewise. The pair is not canonical iff some merge (x, y) has x on a's right spine and y
on b's left spine, both alive at its rank (x strictly: a merge inside a at the same rank is to
the left and goes first; y not: the junction is left of a merge inside b). For a given a, the
bs it excludes are, per such merge, a prefix of the tokens whose left spine holds y sorted by
when y dies in them: a row is a union of slices, computed on first use (p50 0.05 ms) and kept
in an LRU. The tables (spines, indexes, the classes of every token's edges) are built in about
a second from `tokenizer.json` and cached as .npz, keyed by the tokenizer and this code.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

import numpy as np

from grammar_tools import cache

from . import bits
from . import pretoken_junctions as pj
from .pretoken_junctions import Head, Junction, RunKind
from .vocabulary import Vocabulary

log = logging.getLogger(__name__)

FORMAT_VERSION = 2  # 2: digits_isolated
ROW_CACHE = 1024  # rows kept, in bits (6 KB each for 49,152 tokens; 49 KB as booleans)


def unpack_row(packed: np.ndarray, count: int) -> np.ndarray:
    """(count,) bool, read-only, from `bits.pack`'s words: the masks memoized across requests are
    kept in bits (here and in `matcher.CompiledGrammar`)."""
    row = bits.unpack(packed, count)
    row.setflags(write=False)
    return row


class CanonicalUnsupported(ValueError):
    """The tokenizer is not one whose canonical pairs this module can decide; says why."""


class Continuation(IntEnum):
    """What the state knows beyond its last token."""

    OFF = 0  # no filtering (canonical tokenization turned off)
    START = 1  # no token before: anything may come
    FREE = 2  # the last token's own kind decides
    IN_PUNCT_RUN = 3  # the last token is `'` inside a run of punctuation (no contraction)
    ENDS_WHITESPACE_RUN = 4  # the last token must end its whitespace run: a non-space next


@dataclass(frozen=True)
class CanonicalState:
    last: int  # the last token (-1: none)
    continuation: Continuation

    @property
    def active(self) -> bool:
        return self.continuation is not Continuation.OFF


OFF = CanonicalState(-1, Continuation.OFF)
START = CanonicalState(-1, Continuation.START)


@dataclass(frozen=True, eq=False)
class CanonicalTables:
    """Everything the rows are computed from (all int/bool arrays: stored as .npz)."""

    kind: np.ndarray  # (V,) int8 RunKind of each token on the left of a junction
    head: np.ndarray  # (V,) int8 Head of each token on the right
    contraction: np.ndarray  # (V,) int8 Contraction
    single_space: np.ndarray  # (V,) bool: one whitespace character
    free: np.ndarray  # (V,) bool: special and added tokens: left alone, before and after
    reachable: np.ndarray  # (V,) bool: the tokenizer produces it for its own text
    birth: np.ndarray  # (V,) int32 rank of the merge that makes the token (-1: a byte)
    left: np.ndarray  # (V,) int32 its left part (-1: a byte)
    right: np.ndarray  # (V,) int32 its right part
    spine_start: np.ndarray  # (V+1,) int64: tokens whose left spine holds y, by y
    spine_token: np.ndarray  # int32 those tokens, latest death of y first
    spine_death: np.ndarray  # int32 the rank at which y is merged into its parent there
    merge_start: np.ndarray  # (V+1,) int64: merges (x, y) by x
    merge_right: np.ndarray  # int32 y
    merge_rank: np.ndarray  # int32 rank, ascending within x
    digits_isolated: np.ndarray  # () bool: every digit is a piece of its own first (StarCoder's pre-tokenizer)

    FIELDS = ("kind", "head", "contraction", "single_space", "free", "reachable", "birth", "left", "right",
              "spine_start", "spine_token", "spine_death", "merge_start", "merge_right", "merge_rank",
              "digits_isolated")

    @property
    def size(self) -> int:
        return int(self.kind.shape[0])


def code_hash() -> str:
    return cache.source_hash(pj, sys.modules[__name__])[:8]


# ---------------------------------------------------------------------------------- build


# why a tokenizer that splits by its own pattern (Qwen2's, Llama 3's) is refused (docs/models.md)
OWN_PATTERN_REASON = (
    "the pair table (pretoken_junctions) is GPT-2's; under Qwen2's pattern one punctuation character "
    "joins the letters after it only where it starts a match (`(self` but `((` + `self`), every digit "
    "stands alone and punctuation runs take the newlines after them, so a pair's cut depends on the "
    "tokens before it")


def _own_split_pattern(pre: dict) -> str | None:
    """The regex of a Split pre-tokenizer followed by a ByteLevel one without its own regex
    (how Qwen2 and Llama 3 tokenizers are written), or None."""
    parts = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else []
    if (len(parts) == 2 and parts[0].get("type") == "Split" and parts[1].get("type") == "ByteLevel"
            and not parts[1].get("use_regex", True)):
        return str((parts[0].get("pattern") or {}).get("Regex", ""))
    return None


# why a SentencePiece-style BPE (Gemma 3, Llama 2) is refused (docs/models.md)
SENTENCEPIECE_REASON = (
    "it is a SentencePiece BPE (spaces spelled `▁`, byte fallback, no pre-tokenizer): its merges run over "
    "the whole text, across words, so no table of pre-token junctions says which pairs it makes")


def _digits_then_byte_level(pre: dict) -> bool:
    """Whether the pre-tokenizer is StarCoder's: every digit alone, then GPT-2's byte-level regex."""
    parts = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else []
    return (len(parts) == 2 and parts[0].get("type") == "Digits" and parts[0].get("individual_digits")
            and parts[1].get("type") == "ByteLevel" and parts[1].get("use_regex", True)
            and not parts[1].get("add_prefix_space"))


def _supported(spec: dict) -> bool:
    """Raises CanonicalUnsupported (saying why) unless the tokenizer is byte-level BPE with
    GPT-2's pre-tokenizer, every digit cut alone first or not; returns whether they are."""
    model = spec.get("model") or {}
    pre = spec.get("pre_tokenizer") or {}
    if pre.get("type") == "Sequence" and len(pre.get("pretokenizers", [])) == 1:
        pre = pre["pretokenizers"][0]
    if model.get("type") == "BPE" and (model.get("byte_fallback") or pre.get("type") == "Metaspace"
                                       or "▁" in json.dumps(spec.get("normalizer"), ensure_ascii=False)):
        raise CanonicalUnsupported("canonical tokenization needs byte-level BPE with GPT-2's pre-tokenizer: "
                                   + SENTENCEPIECE_REASON)
    digits = _digits_then_byte_level(pre)
    problems = []
    if model.get("type") != "BPE":
        problems.append(f"its model is {model.get('type')}, not BPE")
    if (model.get("dropout") not in (None, 0, 0.0) or model.get("continuing_subword_prefix")
            or model.get("end_of_word_suffix")):
        problems.append("its BPE uses dropout or word affixes")
    if model.get("ignore_merges"):
        problems.append("its BPE takes whole words from the vocabulary (ignore_merges)")
    split = _own_split_pattern(pre)
    if split is not None:
        problems.append(f"its pre-tokenizer cuts by a pattern of its own ({split[:60]}...), not GPT-2's regex: "
                        + OWN_PATTERN_REASON)
    elif not digits and (pre.get("type") != "ByteLevel" or not pre.get("use_regex", True)
                         or pre.get("add_prefix_space")):
        problems.append(f"its pre-tokenizer is {json.dumps(pre)[:120]}, not GPT-2's byte-level regex")
    if spec.get("normalizer"):
        problems.append("it normalizes text")
    if problems:
        raise CanonicalUnsupported("canonical tokenization needs byte-level BPE with GPT-2's pre-tokenizer: "
                                   + "; ".join(problems))
    return digits


def _merge_ids(spec: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    vocab = spec["model"]["vocab"]
    lefts, rights, outs = [], [], []
    for m in spec["model"]["merges"]:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        if a not in vocab or b not in vocab or a + b not in vocab:
            raise CanonicalUnsupported(f"the merge {a!r} + {b!r} names a token outside the vocabulary")
        lefts.append(vocab[a])
        rights.append(vocab[b])
        outs.append(vocab[a + b])
    return (np.array(lefts, dtype=np.int32), np.array(rights, dtype=np.int32), np.array(outs, dtype=np.int32))


def _edge_classes(tokenizer, vocab: Vocabulary, free: np.ndarray, digits_isolated: bool = False):
    V = vocab.size
    texts = {}
    for i, b in enumerate(vocab.token_bytes):
        if not free[i]:
            try:
                texts[i] = b.decode()
            except UnicodeDecodeError:
                pass
    # with digits cut alone first, a digit continues nothing: the classes are GPT-2's regex's own
    classer = _gpt2_byte_level() if digits_isolated else tokenizer.pre_tokenizer
    classes = pj.char_classes(classer, sorted({c for s in texts.values() for c in s}))
    kind = np.full(V, RunKind.UNKNOWN, dtype=np.int8)
    head = np.full(V, Head.UNKNOWN, dtype=np.int8)
    contraction = np.zeros(V, dtype=np.int8)
    single_space = np.zeros(V, dtype=bool)
    for i, b in enumerate(vocab.token_bytes):
        if free[i]:
            continue
        kind[i] = pj.run_kind(b, classes)
        head[i] = pj.head(b, classes)
        contraction[i] = pj.contraction(b)
        s = texts.get(i)
        single_space[i] = s is not None and len(s) == 1 and classes[s] is pj.CharClass.SPACE
    reachable = np.ones(V, dtype=bool)
    ids = list(texts)
    for i, enc in zip(ids, tokenizer.encode_batch([texts[i] for i in ids], add_special_tokens=False)):
        reachable[i] = enc.ids == [i]
    return texts, kind, head, contraction, single_space, reachable


def _gpt2_byte_level():
    from tokenizers.pre_tokenizers import ByteLevel

    return ByteLevel(add_prefix_space=False, use_regex=True)


def _check_table(tokenizer, texts, kind, head, contraction, reachable, digits_isolated: bool = False) -> None:
    """Compare the junction table with the pre-tokenizer on two pairs of every (kind, head,
    contraction) the vocabulary has: a tokenizer that looks like GPT-2's but cuts otherwise is
    refused, not served wrong masks."""
    lefts, rights = {}, {}
    for i in texts:
        if reachable[i]:
            lefts.setdefault(int(kind[i]), []).append(i)
            rights.setdefault((int(head[i]), int(contraction[i])), []).append(i)
    samples = []
    for k, ls in lefts.items():
        for (h, c), rs in rights.items():
            for j in range(2):
                a, b = ls[(j * 7919) % len(ls)], rs[(j * 104729) % len(rs)]
                samples.append((texts[a], texts[b], RunKind(k), Head(h), pj.Contraction(c)))
    bad = pj.check_against(tokenizer.pre_tokenizer, samples, digits_isolated)
    if bad:
        raise CanonicalUnsupported("the pre-tokenizer cuts pairs unlike GPT-2's regex: " + "; ".join(bad[:3]))


def build_tables(tokenizer, vocab: Vocabulary, text: str | None = None) -> CanonicalTables:
    """The tables of a `tokenizers.Tokenizer` (CanonicalUnsupported if it is not byte-level
    BPE with GPT-2's pre-tokenizer, or its merges are not in an order BPE can use); `text`:
    its `to_str()` where the caller has it (a second at 262k tokens)."""
    spec = json.loads(tokenizer.to_str() if text is None else text)
    digits = _supported(spec)
    V = vocab.size
    L, R, out = _merge_ids(spec)  # per merge: its left and right parts and the token it makes
    M = len(out)
    birth = np.full(V, -1, dtype=np.int32)
    left = np.full(V, -1, dtype=np.int32)
    right = np.full(V, -1, dtype=np.int32)
    birth[out], left[out], right[out] = np.arange(M, dtype=np.int32), L, R
    if np.any(birth[L] >= np.arange(M)) or np.any(birth[R] >= np.arange(M)):
        raise CanonicalUnsupported("a merge ranks before a merge that makes one of its parts")
    free = np.zeros(V, dtype=bool)
    free[list(vocab.special)] = True
    free[[a["id"] for a in spec.get("added_tokens", []) if a["id"] < V]] = True
    texts, kind, head, contraction, single_space, reachable = _edge_classes(tokenizer, vocab, free, digits)
    _check_table(tokenizer, texts, kind, head, contraction, reachable, digits)

    # left spines: (y, token, death of y in token), grouped by y, latest death first
    never = np.int32(M + 1)
    ys, toks, deaths = [], [], []
    for b in np.flatnonzero(~free).tolist():
        y, death = b, never
        while y >= 0:
            ys.append(y)
            toks.append(b)
            deaths.append(death)
            death, y = birth[y], left[y]
    ys_a, toks_a, deaths_a = np.array(ys, np.int32), np.array(toks, np.int32), np.array(deaths, np.int32)
    order = np.lexsort((-deaths_a.astype(np.int64), ys_a))
    ys_a, toks_a, deaths_a = ys_a[order], toks_a[order], deaths_a[order]
    spine_start = np.searchsorted(ys_a, np.arange(V + 1)).astype(np.int64)
    # merges by their left part, in rank order
    morder = np.lexsort((np.arange(M), L))
    merge_start = np.searchsorted(L[morder], np.arange(V + 1)).astype(np.int64)
    return CanonicalTables(
        kind, head, contraction, single_space, free, reachable, birth, left, right,
        spine_start, toks_a, deaths_a, merge_start, R[morder].astype(np.int32), morder.astype(np.int32),
        np.array(digits),
    )


# ---------------------------------------------------------------------------------- rows


class CanonicalPairs:
    """Which next tokens keep a token sequence canonical, from a `CanonicalState`. Immutable
    after construction; rows are computed on first use and kept (thread-safe)."""

    def __init__(self, tables: CanonicalTables, row_cache: int = ROW_CACHE) -> None:
        t = self.tables = tables
        self.V = t.size
        self.digits_isolated = bool(t.digits_isolated)
        self._never = int(t.birth.max()) + 2
        # the left-spine entries as one sorted key (y, then latest death first): the entries of y
        # alive at rank m are those with key <= y * span + (never - m), found for all y at once
        self._span = self._never + 1
        ys = np.repeat(np.arange(self.V, dtype=np.int64), np.diff(t.spine_start))
        self._spine_key = ys * self._span + (self._never - t.spine_death.astype(np.int64))
        ok = t.reachable | t.free
        # per left kind: the tokens allowed without a merge check, and the joined ones
        self._allow: dict[RunKind, np.ndarray] = {}
        self._joined: dict[RunKind, np.ndarray] = {}
        for k in RunKind:
            j = self.junctions(k)
            self._allow[k] = ok & (t.free | (j == Junction.BOUNDARY) | (j == Junction.UNKNOWN))
            self._joined[k] = ok & ~t.free & (j == Junction.JOINED)
        # what a whitespace run that must end may not be followed by: more whitespace, nor (digits
        # cut alone) a digit, before which the run ends with its piece, whole
        ending = [Head.SPACE_RUN, Head.WHITESPACE] + ([Head.DIGIT] if self.digits_isolated else [])
        self._starts_space = np.isin(t.head, ending)
        xs = np.repeat(np.arange(self.V), np.diff(t.merge_start)).tolist()
        self._rank = dict(zip(zip(xs, t.merge_right.tolist()), t.merge_rank.tolist()))
        self._anything = np.ones(self.V, dtype=bool)
        self._anything.setflags(write=False)
        self._row = functools.lru_cache(maxsize=row_cache)(self._packed_row)

    def junctions(self, k: RunKind) -> np.ndarray:
        """(V,) Junction of a token of kind `k` with every token."""
        t = self.tables
        table = np.zeros((len(Head), len(pj.Contraction)), dtype=np.int8)
        for h in Head:
            for c in pj.Contraction:
                table[h, c] = pj.junction(k, h, c, self.digits_isolated)
        return table[t.head, t.contraction]

    # ------------------------------------------------------------------ the merge check

    def _right_spine(self, a: int):
        t, death = self.tables, self._never
        while a >= 0:
            yield a, death
            death, a = int(t.birth[a]), int(t.right[a])

    def conflicts(self, a: int) -> np.ndarray:
        """(V,) bool: the tokens b for which a merge across a|b fires before a and b are built
        (read as one pre-token)."""
        t = self.tables
        out = np.zeros(self.V, dtype=bool)
        ys, ms = [], []
        for x, death in self._right_spine(a):
            lo, hi = int(t.merge_start[x]), int(t.merge_start[x + 1])
            k = lo + int(np.searchsorted(t.merge_rank[lo:hi], death))  # merges before x dies
            ys.append(t.merge_right[lo:k])
            ms.append(t.merge_rank[lo:k])
        y = np.concatenate(ys).astype(np.int64)
        if not y.size:
            return out
        start = t.spine_start[y]
        end = np.searchsorted(self._spine_key, y * self._span + (self._never - np.concatenate(ms)), side="right")
        n = end - start  # the tokens of y's list in which y is alive at the merge's rank: a prefix
        total = int(n.sum())
        if total:
            offsets = np.repeat(start - np.concatenate(([0], np.cumsum(n)[:-1])), n)
            out[t.spine_token[offsets + np.arange(total)]] = True
        return out

    def conflict(self, a: int, b: int) -> bool:
        """`conflicts(a)[b]`, for one pair: the spines against each other."""
        t = self.tables
        lspine = []
        y, death = b, self._never
        while y >= 0:
            lspine.append((y, death))
            death, y = int(t.birth[y]), int(t.left[y])
        for x, xdeath in self._right_spine(a):
            for y, ydeath in lspine:
                m = self._rank.get((x, y))
                if m is not None and m < xdeath and m <= ydeath:
                    return True
        return False

    # ------------------------------------------------------------------ states

    def _kind(self, state: CanonicalState) -> RunKind:
        if state.continuation is Continuation.IN_PUNCT_RUN:
            return RunKind.PUNCT
        return RunKind(int(self.tables.kind[state.last]))

    def _packed_row(self, last: int, kind: RunKind, ends_ws_run: bool) -> np.ndarray:
        """`_compute_row` in bits, (W,) uint64 words as the matcher's masks (what the row cache
        keeps; read-only)."""
        row = bits.pack(self._compute_row(last, kind, ends_ws_run))
        row.setflags(write=False)
        return row

    def _compute_row(self, last: int, kind: RunKind, ends_ws_run: bool) -> np.ndarray:
        joined = self._joined[kind]
        row = self._allow[kind] | (joined & ~self.conflicts(last))
        if kind in pj.WHITESPACE_KINDS:
            row |= joined & self.tables.single_space  # allowed where the run ends after it
        if ends_ws_run:
            row &= ~self._starts_space
        row.setflags(write=False)
        return row

    def unconstrained(self, state: CanonicalState) -> bool:
        """Whether anything may follow (off, nothing before, or a token outside the rules)."""
        t = self.tables
        return (state.continuation in (Continuation.OFF, Continuation.START)
                or bool(t.free[state.last]) or not t.reachable[state.last])

    def allowed_after(self, state: CanonicalState) -> np.ndarray:
        """(V,) bool, read-only: the tokens that keep the sequence canonical after `state`
        (all of them where `unconstrained`)."""
        if self.unconstrained(state):
            return self._anything
        return unpack_row(self._row(state.last, self._kind(state), state.continuation is Continuation.ENDS_WHITESPACE_RUN),
                          self.V)

    def allowed_after_bits(self, state: CanonicalState) -> np.ndarray | None:
        """`allowed_after` in bits: (W,) uint64 words, read-only (`bits`' layout, as the
        matcher's masks); None where every token is allowed (`unconstrained`)."""
        if self.unconstrained(state):
            return None
        return self._row(state.last, self._kind(state), state.continuation is Continuation.ENDS_WHITESPACE_RUN)

    def after(self, state: CanonicalState, token: int) -> CanonicalState:
        """The state once `token` follows."""
        if state.continuation is Continuation.OFF:
            return state
        t = self.tables
        if not 0 <= token < self.V:
            raise ValueError(f"token id {token} outside the vocabulary ({self.V})")
        if t.free[token]:
            return START
        if self.unconstrained(state):
            return CanonicalState(token, Continuation.FREE)
        k = self._kind(state)
        j = pj.junction(k, Head(int(t.head[token])), pj.Contraction(int(t.contraction[token])), self.digits_isolated)
        if j is Junction.JOINED and t.kind[token] == RunKind.APOSTROPHE:
            return CanonicalState(token, Continuation.IN_PUNCT_RUN)
        if (j is Junction.JOINED and k in pj.WHITESPACE_KINDS and t.single_space[token]
                and self.conflict(state.last, token)):
            return CanonicalState(token, Continuation.ENDS_WHITESPACE_RUN)
        return CanonicalState(token, Continuation.FREE)

    def state_after(self, ids, state: CanonicalState = START) -> CanonicalState:
        """The state after the token ids `ids` (the prompt before a completion)."""
        if state.continuation is Continuation.START:
            ids = list(ids)[-8:]  # the continuation depends on the last few tokens only
        for i in ids:
            state = self.after(state, int(i))
        return state

    def is_canonical(self, ids, whole_text: bool = False) -> bool:
        """Whether every step of `ids` is allowed (as the masks would have it); `whole_text`:
        the ids are all the text, so a whitespace run that had to end before a non-space
        ends at the end of the text instead (not canonical)."""
        state = START
        for i in ids:
            if not self.allowed_after(state)[int(i)]:
                return False
            state = self.after(state, int(i))
        return not whole_text or state.continuation is not Continuation.ENDS_WHITESPACE_RUN

    def row_cache_info(self):
        return self._row.cache_info()


# ---------------------------------------------------------------------------------- cache


def tables_path(tokenizer, text: str | None = None) -> Path:
    """The cached tables' file, keyed by the tokenizer's whole serialization (`text`: its
    `to_str()` where the caller has it) and the code that builds them."""
    key = cache.content_hash(tokenizer.to_str() if text is None else text, code_hash(), str(FORMAT_VERSION))
    return cache.cache_dir() / "canonical" / f"canonical-{key}.npz"


_MODEL_OPTIONS = ("dropout", "byte_fallback", "continuing_subword_prefix", "end_of_word_suffix", "ignore_merges")


def spec_outline(tokenizer) -> dict:
    """The parts of a `tokenizers.Tokenizer`'s spec that `_supported` reads (the model's type and
    options, the pre-tokenizer, the normalizer), without serializing its vocabulary and merges:
    `to_str()` and its parse take ~3 s for a 262k SentencePiece vocabulary, which `_supported`
    then refuses."""
    model = tokenizer.model
    options = {k: getattr(model, k) for k in _MODEL_OPTIONS if hasattr(model, k)}
    out: dict = {"model": {"type": type(model).__name__, **options}}
    for part in ("pre_tokenizer", "normalizer"):
        component = getattr(tokenizer, part)
        out[part] = None if component is None else json.loads(component.__getstate__())
    return out


def load_tables(tokenizer, vocab: Vocabulary) -> CanonicalTables:
    """The tables of a tokenizer, from the cache or built (about a second) and cached;
    CanonicalUnsupported, before anything is serialized, where its outline says so
    (`spec_outline`)."""
    _supported(spec_outline(tokenizer))
    text = tokenizer.to_str()
    path = tables_path(tokenizer, text)
    data = cache.read_npz(path)
    if data is not None and set(CanonicalTables.FIELDS) <= set(data) and data["kind"].shape[0] == vocab.size:
        return CanonicalTables(**{f: data[f] for f in CanonicalTables.FIELDS})
    tables = build_tables(tokenizer, vocab, text)
    cache.write_npz(path, **{f: getattr(tables, f) for f in CanonicalTables.FIELDS})
    return tables


def load_canonical(tok) -> CanonicalPairs:
    """The canonical pairs of a `LoadedTokenizer` (CanonicalUnsupported: say why, serve without)."""
    return CanonicalPairs(load_tables(tok.tokenizer, tok.vocab))
