"""The vocabulary-wide walk of the store builder (`token_lexing.first_lexeme` over a `TokenMatrix`)
against its plain definition: each token read byte by byte from each lexer state."""

from __future__ import annotations

import random

import numpy as np
import pytest

from grammar_tools.lexing.lexer_automaton import load_lexer_automaton
from mask_store.builder import TokenSets, _union, assemble, compact, token_ids
from mask_store import token_lexing
from mask_store.token_lexing import TokenMatrix, first_lexeme, staying_bytes


@pytest.fixture(scope="module")
def lexer():
    return load_lexer_automaton()


def _vocabulary() -> list[bytes]:
    """Tokens with long shared prefixes, ones that are prefixes of others,
    strings, comments, newlines with indentation, partial UTF-8, an empty and a special one."""
    words = [b"def", b"define", b"definitely", b"de", b"d", b" def", b" return", b" ret", b"return",
             b"\n", b"\n   ", b"\n    ", b"\n    return", b"\t", b"    ", b"  ", b"(", b"()", b"():", b"):\n",
             b'"', b'""', b'"""', b"'abc", b"f'", b"rb'", b"#", b"# comment", b"0x", b"0x1F", b"1.5e",
             b"123", b"1_000", b"\xc3", b"\xc3\xa9", b"caf\xc3\xa9", b"==", b"=", b"->", b"**=", b"...",
             b"\\", b"\\\n", b"", b"<|special|>"]
    rng = random.Random(34)
    alphabet = b"ab_ (\"'\n#1.=\\\xe2"
    for _ in range(300):
        base = rng.choice(words)
        words.append(base + bytes(rng.choice(alphabet) for _ in range(rng.randrange(0, 6))))
    return words


def _plain(table: np.ndarray, d: int, data: bytes) -> tuple[int, int] | None:
    """(end, state) by reading `data` from d one byte at a time: None if d can't take its first
    byte, end -1 if the lexeme takes the whole token."""
    cur = d
    for i, b in enumerate(data):
        nxt = int(table[cur, b])
        if nxt < 0:
            return None if i == 0 else (i, cur)
        cur = nxt
    return -1, cur


def test_first_lexeme_is_each_token_read_byte_by_byte_from_every_state(lexer):
    vocab = _vocabulary()
    special = {len(vocab) - 1}
    tokens = TokenMatrix.from_vocab(vocab, special)
    usable = [i for i, b in enumerate(vocab) if b and i not in special]
    assert tokens.ids.tolist() == usable
    walked_any = 0
    for d in range(lexer.n_states):
        ids, end, state = first_lexeme(lexer.table, tokens, d)
        want = {t: _plain(lexer.table, d, vocab[t]) for t in usable}
        want = {t: v for t, v in want.items() if v is not None}
        assert ids.tolist() == sorted(want), d
        assert list(zip(end.tolist(), state.tolist())) == [want[t] for t in ids.tolist()], d
        walked_any += int(ids.size)
    assert walked_any  # the states take some of these tokens


def test_the_walk_that_skips_the_tokens_staying_in_their_state_reads_the_same(lexer, monkeypatch):
    """With `staying_bytes` (as the builder walks: per first byte and staying set, the tokens
    that leave it, worked out once), every state gives what the plain walk gives, here on a
    small vocabulary (the skip is on for any size)."""
    monkeypatch.setattr(token_lexing, "_MANY_TOKENS", 0)
    vocab = _vocabulary()
    tokens = TokenMatrix.from_vocab(vocab, {len(vocab) - 1})
    staying = staying_bytes(lexer.table, tokens)
    assert 1 < staying.sets.shape[0] < lexer.n_states  # states share their staying sets
    skipped = 0
    for d in range(lexer.n_states):
        plain = first_lexeme(lexer.table, tokens, d)
        fast = first_lexeme(lexer.table, tokens, d, staying)
        for a, b in zip(plain, fast):
            assert a.dtype == b.dtype and np.array_equal(a, b), d
        skipped += int((plain[1] == -1).sum())
    assert skipped and staying._walked  # tokens stayed, and the per-byte answers were kept


@pytest.mark.parametrize("vocab_size", [64, 5000])
def test_the_union_of_token_sets_is_their_sorted_distinct_ids(vocab_size):
    rng = np.random.default_rng(34)
    parts = [np.sort(rng.choice(64, size=rng.integers(1, 40), replace=False)).astype(np.int32) for _ in range(5)]
    assert _union(parts, vocab_size).tolist() == np.unique(np.concatenate(parts)).tolist()


def _random_sets(rng, vocab_size: int, n: int) -> list[np.ndarray]:
    """Sorted distinct id sets of every size: empty, a few ids, about the break-even of the two
    compact forms, most of the vocabulary, all of it."""
    sizes = [0, 1, 3, vocab_size // 32, vocab_size // 32 + 1, vocab_size // 2, vocab_size - 1, vocab_size]
    sizes += rng.integers(0, vocab_size + 1, size=n - len(sizes)).tolist()
    return [np.sort(rng.choice(vocab_size, size=k, replace=False)).astype(np.int32) for k in sizes]


@pytest.mark.parametrize("vocab_size", [61, 1000, 4099])
def test_a_compact_token_set_holds_the_same_ids_in_its_smaller_form(vocab_size):
    """Few ids stay ids, many become a bitset (4 bytes an id against one bit a token); the
    ids read back are the set's, whatever the vocabulary's size (not a multiple of 8 here)."""
    rng = np.random.default_rng(34)
    for ids in _random_sets(rng, vocab_size, 40):
        c = compact(ids, vocab_size)
        as_bits = (vocab_size + 7) // 8
        assert c.dtype == (np.int32 if ids.size * 4 <= as_bits else np.uint8)
        assert c.nbytes == min(ids.size * 4, as_bits)
        assert token_ids(c, vocab_size).tolist() == ids.tolist()
        assert np.array_equal(compact(ids.copy(), vocab_size), c)  # equal sets, equal forms


@pytest.mark.parametrize("vocab_size", [61, 1000])
def test_the_union_of_compact_token_sets_is_their_ids_union(vocab_size):
    rng = np.random.default_rng(35)
    sets = _random_sets(rng, vocab_size, 30)
    for _ in range(30):
        picked = [sets[i] for i in rng.choice(len(sets), size=rng.integers(2, 5), replace=False)]
        want = np.unique(np.concatenate(picked)).tolist()
        assert _union([compact(p, vocab_size) for p in picked], vocab_size).tolist() == want
        mixed = [compact(p, vocab_size) if k % 2 else p for k, p in enumerate(picked)]
        assert _union(mixed, vocab_size).tolist() == want


def test_equal_token_sets_are_kept_once_whatever_their_size():
    sets = TokenSets(1000)
    rng = np.random.default_rng(36)
    for ids in _random_sets(rng, 1000, 20):
        key, kept = sets.keyed(ids)
        again_key, again = sets.keyed(ids.copy())
        assert key == again_key and again is kept
        assert token_ids(kept, 1000).tolist() == ids.tolist()


@pytest.mark.parametrize("vocab_size", [61, 1000])
def test_assemble_stores_the_same_arrays_from_ids_or_compact_sets(lexer, vocab_size):
    """The builder hands `assemble` compact sets (with their digests), the streamliner ids or
    compact sets: the store is the same, each row's tokens the union of its parts, each
    distinct set stored once."""
    from mask_store.nfa_states import NfaStates
    from mask_store.store import ARRAYS

    rng = np.random.default_rng(37)
    sets = _random_sets(rng, vocab_size, 40)
    groups = [{(g, r): [sets[i] for i in rng.choice(len(sets), size=rng.integers(1, 4), replace=False)]
               for r in range(rng.integers(1, 8))} for g in range(6)]
    nfa = NfaStates.of(lexer)
    Q = nfa.q_term.shape[0]

    def build(form):
        made = TokenSets(vocab_size)
        as_given = [{seq: [form(made, p) for p in parts] for seq, parts in grp.items()} for grp in groups]
        digests = {id(c): k for k, c in made.index.items()} if form is not _ids else None
        return assemble(header={}, vocab_size=vocab_size, n_terminals=lexer.grammar.n_terminals, indents=[],
                        nfa=nfa, q_group=np.zeros(Q, dtype=np.int32), q_boundary=np.full(Q, -1, dtype=np.int32),
                        d_dead=np.zeros(lexer.n_states, dtype=np.int32), dead_sets=np.zeros((1, 32), dtype=np.uint8),
                        groups=as_given, digests=digests)

    by_ids, by_compact = build(_ids), build(lambda made, p: made(p))
    for name in ARRAYS:
        assert np.array_equal(getattr(by_ids, name), getattr(by_compact, name)), name
    r = 0
    for grp in groups:
        for seq in sorted(grp):
            assert by_compact.row_tokens(r).tolist() == np.unique(np.concatenate(grp[seq])).tolist()
            r += 1
    distinct = {tuple(by_compact.row_tokens(k).tolist()) for k in range(by_compact.n_rows)}
    assert by_compact.info()["unique_masks"] == len(distinct)


def _ids(made, ids):
    return ids
