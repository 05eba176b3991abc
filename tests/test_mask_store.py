"""The mask store: file format, errors, and soundness on real code (real tokenizer)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from corpus_support import read_source, stdlib_files

from mask_store.canonical import START
from mask_store.matcher import GrammarMatcher
from mask_store.store import FORMAT_VERSION, MaskStoreError, load_store
from mask_store.verify import verify_files


def test_store_roundtrip_and_info(compiled_full, tmp_path):
    compiled, tok = compiled_full
    store = compiled.store
    path = store.save(tmp_path / "s.safetensors")
    again = load_store(
        path, grammar_hash=store.header["grammar_hash"], tokenizer_hash=tok.vocab.hash, vocab_size=tok.vocab.size
    )
    assert again.n_rows == store.n_rows and again.n_states == store.n_states
    for name in ("seq", "row_mask", "dense", "sparse_ids", "sparse_negated", "group_start", "pair_q"):
        assert np.array_equal(getattr(again, name), getattr(store, name))
    info = again.info()
    for key in ("rows", "logical_rows", "nfa_states", "unique_masks", "build_seconds", "grammar_hash",
                "tokenizer_hash", "vocab_size"):
        assert key in info
    assert info["vocab_size"] == tok.vocab.size == 49152
    # identical token sets are stored once
    assert info["unique_masks"] < info["rows"]


def test_each_kind_of_stored_mask_reads_back_as_its_token_set(compiled_full):
    """Bitsets, id lists and the id lists of what a mask leaves out (most of the vocabulary)
    give the same tokens through the store and through the matcher."""
    compiled, tok = compiled_full
    store = compiled.store
    negated = store.sparse_negated.astype(bool)
    assert negated.any() and (~negated).any() and store.dense.shape[0] > 0
    kinds = {"dense": store.row_mask >= 0,
             "sparse": (store.row_mask < 0) & ~negated[np.maximum(~store.row_mask, 0)],
             "negated": (store.row_mask < 0) & negated[np.maximum(~store.row_mask, 0)]}
    for kind, rows in kinds.items():
        picked = np.flatnonzero(rows)[:40]
        assert picked.size, kind
        for r in picked.tolist():
            ids = store.row_tokens(r)
            assert np.array_equal(np.flatnonzero(compiled.masks_to_bool([int(store.row_mask[r])])), ids), kind
            if kind == "negated":
                assert ids.size > tok.vocab.size // 2


def test_a_mask_of_many_rows_is_the_union_of_their_token_sets(compiled_full):
    """Rows of every kind together, several of them stored as what they leave out: the mask is
    the union of each row's tokens."""
    compiled, tok = compiled_full
    store = compiled.store
    negated = np.flatnonzero(store.sparse_negated.astype(bool))
    rng = random.Random(34)
    masks = sorted(set(store.row_mask.tolist()))
    for _ in range(20):
        ids = [~int(k) for k in rng.sample(negated.tolist(), rng.randrange(2, 5))] + rng.sample(masks, 6)
        want = np.zeros(tok.vocab.size, dtype=bool)
        for m in ids:  # one row at a time: each kind's reading is checked above
            want |= compiled.masks_to_bool([m])
        assert np.array_equal(compiled.masks_to_bool(ids), want)


def test_bad_files_give_a_clear_error_naming_the_fix(compiled_full, tmp_path):
    compiled, tok = compiled_full
    store = compiled.store
    good = store.save(tmp_path / "good.safetensors")
    with pytest.raises(MaskStoreError, match="mask-store build"):
        load_store(tmp_path / "missing.safetensors")
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a store")
    with pytest.raises(MaskStoreError, match="corrupt.*mask-store build"):
        load_store(bad)
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(MaskStoreError, match="mask-store build"):
        load_store(truncated)
    with pytest.raises(MaskStoreError, match="another tokenizer.*mask-store build"):
        load_store(good, tokenizer_hash="0" * 16)
    with pytest.raises(MaskStoreError, match="another grammar"):
        load_store(good, grammar_hash="f" * 16)
    # a damaged array (an index out of range) is caught before any mask is made
    store.row_mask = store.row_mask.copy()
    store.row_mask[0] = store.dense.shape[0] + 5
    damaged = store.save(tmp_path / "damaged.safetensors")
    store.row_mask = load_store(good).row_mask
    with pytest.raises(MaskStoreError, match="corrupt"):
        load_store(damaged)
    assert FORMAT_VERSION >= 1


def _sample_files(n_tokens: int, seed: int):
    files = [p for p in stdlib_files(include_tests=False) if 2000 < p.stat().st_size < 60000]
    random.Random(seed).shuffle(files)
    return files


@pytest.mark.slow
def test_soundness_on_stdlib_sample(compiled_full):
    """At every position of real files the true next token is allowed (>= 40,000 tokens), with
    canonical tokenization on (its masks are within the grammar's: sound with it off too)."""
    compiled, tok = compiled_full
    files, total = [], 0
    for p in _sample_files(40_000, seed=11):
        data = read_source(p)
        if data is None:
            continue
        files.append(p)
        total += len(tok.encode(data.decode()))
        if total >= 42_000:
            break
    report = verify_files(compiled, tok.encode, files, canonical=START)
    assert report.tokens >= 40_000
    assert report.n_rejections == 0, report.summary()["first_rejections"]
    assert report.canonical_masks >= report.tokens
    assert report.canonical_fallbacks == 0


@pytest.mark.slow
def test_mask_agrees_with_accept_token_on_every_token(compiled_full):
    """Exactness of the store against the run-time transition: at sampled positions a token
    is in the mask iff the matcher can accept it."""
    compiled, tok = compiled_full
    rng = random.Random(3)
    files = _sample_files(0, seed=4)[:6]
    checked = 0
    for p in files:
        data = read_source(p)
        if data is None:
            continue
        ids = tok.encode(data.decode())
        m = GrammarMatcher.from_prefix(compiled, b"")
        stops = set(rng.sample(range(len(ids)), 5))
        for i, t in enumerate(ids):
            if i in stops:
                mask = m.next_token_mask()
                for cand in range(tok.vocab.size):
                    if cand in tok.vocab.eos:
                        continue
                    f = m.fork()
                    assert bool(mask[cand]) == f.accept_token(cand), (p, i, tok.vocab.token_bytes[cand])
                checked += 1
            assert m.accept_token(t)
    assert checked >= 25


def test_healing_candidates_are_the_tokens_that_start_with_or_begin_the_typed_text(compiled_full):
    comp, _ = compiled_full
    vocab = comp.vocab
    spellings = list(enumerate(vocab.token_bytes))
    for text in (b" ", b"os", b" pa", b"self.", b"\xff", b"\xe2\x80"):
        want = {i for i, b in spellings if b and i not in vocab.special and b.startswith(text)}
        assert set(vocab.tokens_starting_with(text)) == want
        got = vocab.tokens_compatible_with(text).tolist()
        shorter = {vocab.by_bytes[text[:k]] for k in range(1, len(text)) if text[:k] in vocab.by_bytes}
        assert sorted(got) == sorted(want | shorter)  # each once


def test_the_forked_token_walk_gives_the_store_of_one_process(compiled_full, monkeypatch, forks_here):
    """The lexer states' walks run in forked workers, merged in the states' order: every array of
    the store (rows, masks, the newline rows' indentation ids) and its indentations are the same
    as when one process walks them all."""
    if not forks_here:
        return  # run and passed in a fresh interpreter (`forks_here`)
    from mask_store import builder
    from mask_store.store import ARRAYS

    compiled, tok = compiled_full
    pools = []

    def counted_pool(processes):
        pools.append(processes)
        return forked_pool(processes)

    forked_pool = builder.forked_pool
    monkeypatch.setattr(builder, "forked_pool", counted_pool)

    def build(processes: int):
        monkeypatch.setattr(builder, "WALK_PROCESSES", processes)
        return builder.StoreBuilder(tok.vocab, compiled.lexer, progress=False).build({})

    one = build(1)
    assert pools == []
    forked = build(2)
    assert pools == [2]  # the walk did run in forked workers
    assert one.indents == forked.indents and one.indents
    for name in ARRAYS:
        assert np.array_equal(getattr(one, name), getattr(forked, name)), name
    assert np.array_equal(forked.row_mask, compiled.store.row_mask)  # the store the tests use


def test_the_compiled_grammar_stays_as_built_and_a_completion_counts_its_own(compiled_full):
    """Masks computed (canonical tokenization on, a fork, a second matcher) change nothing of the
    `CompiledGrammar` but its `memo`; the canonical counts are the matchers': shared by a matcher
    and its forks, and by matchers handed one record, and not by another matcher."""
    from mask_store.matcher import MaskCounts

    compiled, tok = compiled_full
    plain = {k: v for k, v in vars(compiled).items() if isinstance(v, (dict, list, int, tuple, str))}
    kept = {k: (type(v), len(v) if hasattr(v, "__len__") else v) for k, v in plain.items()}
    bound = {k: id(v) for k, v in vars(compiled).items()}
    masks0 = compiled.memo.stats["masks"]
    counts = MaskCounts()
    state = compiled.canonical.state_after(tok.encode("def f(x):\n    return"))
    m = GrammarMatcher.from_prefix(compiled, b"def f(x):\n    return", canonical=state, counts=counts)
    fork = m.fork()
    assert fork.counts is m.counts is counts
    m.next_token_mask()
    fork.accept_token(tok.vocab.by_bytes[b" x"])
    fork.next_token_mask()
    again = GrammarMatcher.from_prefix(compiled, b"y = (", canonical=state, counts=counts)
    again.next_token_mask()
    other = GrammarMatcher.from_prefix(compiled, b"z = [", canonical=state)
    other.next_token_mask()
    assert counts.canonical_masks == 3 and other.counts.canonical_masks == 1
    assert compiled.memo.stats["masks"] > masks0  # the memo filled...
    assert {k: id(v) for k, v in vars(compiled).items()} == bound  # ...nothing else rebound
    assert {k: (type(v), len(v) if hasattr(v, "__len__") else v) for k, v in plain.items()} == kept
    assert not hasattr(compiled, "stats")


def test_a_configuration_mask_in_words_is_its_mask_in_booleans(compiled_full):
    """`config_bits` (memoized in words) and `config_mask` (booleans) give the same tokens, the
    second time from the memo too; `next_token_mask` ORs the configurations' words."""
    compiled, tok = compiled_full
    m = GrammarMatcher.from_prefix(compiled, b"def f(x):\n    return (x")
    assert len(m.configs) >= 1
    want = np.zeros(tok.vocab.size, dtype=bool)
    for c in m.configs:
        first = compiled.config_mask(c)
        bits = compiled.config_bits(c)
        assert not bits.flags.writeable and bits.dtype == np.uint64
        assert np.array_equal(first, compiled.config_mask(c))
        want |= first
    assert np.array_equal(m.next_token_mask(), want | _eos_where_complete(m, tok))


def _eos_where_complete(m, tok) -> np.ndarray:
    out = np.zeros(tok.vocab.size, dtype=bool)
    if m.is_complete():
        out[sorted(tok.vocab.eos)] = True
    return out


def test_dead_token_words_made_row_by_row_are_the_dead_token_masks(compiled_full):
    """`dead_token_words` packs one dead set at a time: every row is `dead_token_masks`' row in
    bits (usable tokens whose first byte ends the lexeme), read-only; the compiled grammar's."""
    from mask_store import bits
    from mask_store.compiled import dead_token_masks, dead_token_words

    compiled, tok = compiled_full
    rows = dead_token_words(compiled.store, tok.vocab, compiled.W)
    want = dead_token_masks(compiled.store, tok.vocab)
    assert rows.shape == (want.shape[0], compiled.W) and want.shape[0] > 1 and not rows.flags.writeable
    assert np.array_equal(bits.unpack(rows, compiled.V), want)
    assert np.array_equal(compiled._dead_masks, rows)
