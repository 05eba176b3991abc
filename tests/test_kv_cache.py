"""`GrowingLayer`: positions written in chunks come back as written, across the buffer's
growth, and the buffer's spare room stays bounded (it grew by doubling: up to twice the
positions held)."""

from __future__ import annotations

import torch

from lsp_server.model.hf_cache import GrowingCache
from lsp_server.model.kv_cache import GROW_STEP, SPARE, cache_bytes, rewind

HEADS, DIM = 3, 8


def _chunk(n: int, start: int) -> torch.Tensor:
    pos = torch.arange(start, start + n, dtype=torch.float32)
    return pos.view(1, 1, n, 1).expand(1, HEADS, n, DIM).contiguous()


def _feed(cache: GrowingCache, sizes: list[int]) -> int:
    done = 0
    for n in sizes:
        k = _chunk(n, done)
        cache.update(k, -k, 0)
        done += n
    return done


def test_chunks_come_back_as_written_across_growth():
    cache = GrowingCache()
    done = _feed(cache, [100, 128, 128, 300, 1, 1, 500])
    layer = cache.layers[0]
    expected = _chunk(done, 0)
    assert layer.get_seq_length() == done
    assert torch.equal(layer.keys, expected) and torch.equal(layer.values, -expected)


def test_spare_room_is_bounded_by_a_step_not_by_the_positions_held():
    for sizes in ([1000], [128] * 8, [256] * 4, [1000] + [1] * 64, [1100], [2000, 48]):
        cache = GrowingCache()
        done = _feed(cache, sizes)
        capacity = cache.layers[0]._k.shape[-2]
        assert capacity >= done
        assert capacity < done + SPARE + GROW_STEP, (sizes, capacity)
        assert cache_bytes(cache) == 2 * capacity * HEADS * DIM * 4


def test_rewind_keeps_the_first_positions_and_writing_goes_on_after_them():
    cache = GrowingCache()
    _feed(cache, [300])
    rewind(cache, 120)
    layer = cache.layers[0]
    assert layer.get_seq_length() == 120
    k = _chunk(10, 500)
    cache.update(k, -k, 0)
    assert torch.equal(layer.keys[..., :120, :], _chunk(120, 0))
    assert torch.equal(layer.keys[..., 120:, :], k) and layer.get_seq_length() == 130
