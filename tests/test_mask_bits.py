"""`mask_store.bits`: the one layout of packed masks (token t at bit t % k of word t // k, for
words of k = 8, 32 or 64 bits), and its pack, unpack and bit setting."""

import numpy as np
import pytest

from mask_store import bits


@pytest.mark.parametrize("vocab_size", [61, 1000, 5000])
def test_token_bits_are_set_in_words_and_read_back_as_booleans(vocab_size):
    """`set_ids` (bit by bit for a few ids, through packed booleans for many), `pack` and
    `unpack` agree on one layout whatever the vocabulary's size (not a multiple of 64 or 8 here)."""
    rng = np.random.default_rng(34)
    words = bits.n_words(vocab_size)
    assert words == -(-vocab_size // 64)
    # both ways of setting bits where the vocabulary has more tokens than the one-by-one limit
    most = bits._SET_ONE_BY_ONE_AT_MOST
    for k in [0, 1, 7, min(vocab_size, most), min(vocab_size, most + 1), vocab_size]:
        ids = np.sort(rng.choice(vocab_size, size=k, replace=False)).astype(np.uint16)
        want = np.zeros(vocab_size, dtype=bool)
        want[ids] = True
        start = rng.integers(0, 2, size=vocab_size).astype(bool)  # bits already set stay set
        w = bits.pack(start[None, :], words)[0].copy()
        bits.set_ids(w, ids)
        got = bits.unpack(w, vocab_size)
        assert got.shape == (vocab_size,) and got.flags.writeable
        assert np.array_equal(got, want | start), k
        assert np.array_equal(bits.token_ids(w, vocab_size), np.flatnonzero(want | start))


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.uint64])
def test_every_word_width_puts_token_t_at_bit_t_mod_k_of_word_t_div_k(dtype):
    """The store's uint64 words, the device's int32 words and the canonical rows' bytes are one
    layout: packed in any width, the same bytes; token t is bit t % k of word t // k; the bits
    past the set are clear."""
    rng = np.random.default_rng(7)
    n = 1234
    mask = rng.integers(0, 2, size=n).astype(bool)
    words = bits.pack(mask, dtype=dtype)
    k = np.dtype(dtype).itemsize * 8
    assert words.dtype == dtype and words.shape == (bits.n_words(n, dtype),) == (-(-n // k),)
    for t in (0, 1, 63, 64, 500, n - 1):
        assert bool((int(words[t // k]) >> (t % k)) & 1) == mask[t], t
    assert not bits.unpack(words, words.size * k)[n:].any()
    assert bits.pack(mask, dtype=np.uint8).tobytes() == words.tobytes()[: -(-n // 8)]
    assert np.array_equal(bits.unpack(words, n), mask)


def test_rows_pack_along_the_last_axis():
    """(n, 256) byte sets (the lexer's) pack to (n, 4) words and back, row by row."""
    rng = np.random.default_rng(3)
    rows = rng.integers(0, 2, size=(5, 256)).astype(bool)
    packed = bits.pack(rows)
    assert packed.shape == (5, 4)
    assert np.array_equal(bits.unpack(packed, 256), rows)
    assert np.array_equal(bits.unpack(bits.pack(rows, dtype=np.uint8), 256), rows)
    assert np.array_equal(bits.pack(rows[2]), packed[2])


def test_too_few_words_is_an_error():
    with pytest.raises(ValueError, match="do not fit"):
        bits.pack(np.ones(65, dtype=bool), 1)


def test_a_strided_array_packs_as_its_copy():
    """An array whose rows are not contiguous (a transpose, a slice) packs as its contiguous copy."""
    rng = np.random.default_rng(5)
    cols = rng.integers(0, 2, size=(256, 6)).astype(bool)
    assert np.array_equal(bits.pack(cols.T), bits.pack(np.ascontiguousarray(cols.T)))
    assert np.array_equal(bits.pack(cols[::2].T, dtype=np.int32), bits.pack(np.ascontiguousarray(cols[::2].T), dtype=np.int32))


def test_bits_are_read_and_cleared_one_by_one_as_the_booleans_say():
    """`contains`, `are_set` and `clear_ids` read and clear the bits `pack` set (the matcher's
    masks made in words: the end of sequence, healing's dead ends), repeated ids included."""
    rng = np.random.default_rng(35)
    for n in (1, 63, 64, 65, 1000):
        want = rng.random(n) < 0.5
        w = bits.pack(want).copy()
        ids = rng.integers(0, n, size=20)
        assert [bits.contains(w, int(t)) for t in range(n)] == want.tolist()
        assert np.array_equal(bits.are_set(w, ids), want[ids])
        bits.clear_ids(w, np.concatenate([ids, ids[:3]]))
        want[ids] = False
        assert np.array_equal(bits.unpack(w, n), want)
    assert bits.are_set(bits.pack(np.ones(70, dtype=bool)), np.array([], dtype=np.int64)).shape == (0,)
