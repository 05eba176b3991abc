"""The vocabulary-wide walk of the store builder (`token_lexing.first_lexeme` over a `TokenMatrix`)
against its plain definition: each token read byte by byte from each lexer state."""

from __future__ import annotations

import random

import numpy as np
import pytest

from grammar_tools.lexing.lexer_automaton import load_lexer_automaton
from mask_store.builder import _union
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
