"""Token sets as bits: the one layout every packed mask in syntaxlock uses, and its pack/unpack.

The layout: bit t of a set is bit t % 8 of byte t // 8 (`np.packbits(..., bitorder="little")`).
Read as little-endian words of k bits, that is bit t % k of word t // k, so one packing serves
every word width:

- uint64 words (W = ceil(V / 64)): the store's dense masks (`MaskStore.dense`, on disk), the
  matcher's masks (`CompiledGrammar.config_bits`), the lexer's byte sets (4 words for 256 bytes);
- int32 words (ceil(V / 32)): the device bitmask (`lsp_server.model.token_bitmask`, as XGrammar
  and vLLM lay it out), and the team batch's host rows;
- bytes: the canonical rows the matcher memoizes, the builder's compact sets and the store's dead
  byte sets (32 bytes for 256).

Bits past the set's length are clear: a token past the mask is never allowed. numpy's views of
these words are native-endian; on a little-endian machine (every one syntaxlock runs on) they
agree with the bytes, and this module refuses to load on any other.

Why by hand: numpy's `packbits`/`unpackbits` do the work; what is here is the one place that
says which bit is which token, the padding to whole words and the fast paths measured below.
"""

from __future__ import annotations

import sys

import numpy as np

if sys.byteorder != "little":  # the words' views would put the tokens in another order
    raise ImportError("syntaxlock's packed masks assume a little-endian machine")

# below this many ids, bits are set one by one in the words (`np.bitwise_or.at`: 4 us for 20 ids,
# 20 us for 2,000, 180 us for 20,000); above, through booleans packed (17 us, 20 us, 86 us)
_SET_ONE_BY_ONE_AT_MOST = 2048


def n_words(count: int, dtype=np.uint64) -> int:
    """The words of `dtype` that hold `count` bits."""
    bits = np.dtype(dtype).itemsize * 8
    return -(-int(count) // bits)


def pack(bools: np.ndarray, words: int | None = None, dtype=np.uint64) -> np.ndarray:
    """(..., n) booleans as (..., words) words of `dtype` (default: as few as hold n), bit t of
    the last axis at word t // k, bit t % k; the bits past n are clear. A new array."""
    bools = np.asarray(bools, dtype=bool)
    n = bools.shape[-1]
    words = n_words(n, dtype) if words is None else int(words)
    nbytes = words * np.dtype(dtype).itemsize
    if n > nbytes * 8:
        raise ValueError(f"{n} bits do not fit in {words} words of {np.dtype(dtype).name}")
    packed = np.ascontiguousarray(np.packbits(bools, axis=-1, bitorder="little"))
    if packed.shape[-1] != nbytes:
        out = np.zeros((*bools.shape[:-1], nbytes), dtype=np.uint8)
        out[..., : packed.shape[-1]] = packed
        packed = out
    return packed.view(dtype)


def unpack(packed: np.ndarray, count: int) -> np.ndarray:
    """(..., count) booleans (a new, writable array) from words of any width (`pack`'s layout).
    All the bits unpacked, then sliced: twice as fast as `np.unpackbits(..., count=count)`
    (262k tokens: 20 vs 38 us)."""
    b = np.unpackbits(np.ascontiguousarray(packed).view(np.uint8), axis=-1, bitorder="little")
    return b[..., :count].view(bool)


def token_ids(packed: np.ndarray, count: int) -> np.ndarray:
    """The sorted ids (int64) of the set bits below `count` of one packed set."""
    return np.flatnonzero(unpack(packed, count))


def set_ids(words: np.ndarray, ids: np.ndarray) -> None:
    """Set the bits of ids `ids` in 1-D uint64 `words` in place."""
    if ids.size <= _SET_ONE_BY_ONE_AT_MOST:
        i = ids.astype(np.int64)
        np.bitwise_or.at(words, i >> 6, np.left_shift(np.uint64(1), (i & 63).astype(np.uint64)))
        return
    b = np.zeros(words.shape[0] * 64, dtype=bool)
    b[ids] = True
    words |= pack(b, words.shape[0])


def contains(words: np.ndarray, token: int) -> bool:
    """Whether bit `token` of 1-D uint64 `words` is set."""
    return bool(int(words[token >> 6]) >> (token & 63) & 1)


def are_set(words: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """(len(ids),) booleans: which of `ids` are set in 1-D uint64 `words`."""
    i = np.asarray(ids, dtype=np.int64)
    return (words[i >> 6] >> (i & 63).astype(np.uint64) & np.uint64(1)).astype(bool)


def clear_ids(words: np.ndarray, ids: np.ndarray) -> None:
    """Clear the bits of `ids` in 1-D uint64 `words` in place."""
    i = np.asarray(ids, dtype=np.int64)
    np.bitwise_and.at(words, i >> 6, ~np.left_shift(np.uint64(1), (i & 63).astype(np.uint64)))
