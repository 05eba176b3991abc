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


def test_a_cpu_cache_keeps_every_layer_in_two_tensors_across_growth():
    """`CpuCache`: each layer's positions come back as written (float16: rounded as PyTorch
    rounds) across the growth of the shared buffers, cropping moves one layer's mark, and the
    views follow the marks."""
    from lsp_server.model.kv_cache import CpuCache

    for dtype in (torch.float32, torch.float16):
        cache = CpuCache(3, dtype)
        written = []
        for i, layer in enumerate(cache.layers):
            k = _chunk(100, 0) * (i + 1) + 0.3  # not a float16 value: rounded when stored
            layer.write(k, -k)
            written.append(k)
        first = cache.k
        for i, layer in enumerate(cache.layers):  # grows the shared buffers once, for every layer
            k = _chunk(300, 100) * (i + 1) + 0.3
            layer.write(k, -k)
            written[i] = torch.cat([written[i], k], dim=2)
        assert cache.k is not first and cache.k.shape[:2] == (3, HEADS) and cache.k.dtype == dtype
        for i, layer in enumerate(cache.layers):
            assert layer._k.data_ptr() == cache.k[i].data_ptr()
            assert torch.equal(layer.keys, written[i].to(dtype)) and torch.equal(layer.values, -written[i].to(dtype))
        cache.layers[1].crop(-50)
        assert [layer.get_seq_length() for layer in cache.layers] == [400, 350, 400]
        assert not cache.lengths_agree(400) and cache.layers[1].keys.shape[2] == 350
        rewind(cache, 350)
        cache.extend(2)
        assert cache.lengths_agree(352) and cache.layers[2].values.shape[2] == 352
        assert cache_bytes(cache) == 2 * cache.k.numel() * cache.k.element_size()


def test_a_dropped_cpu_cache_is_freed_without_the_cyclic_collector():
    """A document's cache evicted from the prompt cache goes at once: its layers don't point
    back at it (a cycle kept every evicted cache's buffers until the cyclic collector ran)."""
    import gc
    import weakref

    from lsp_server.model.kv_cache import CpuCache

    enabled = gc.isenabled()
    gc.disable()
    try:
        cache = CpuCache(2, torch.float16)
        for layer in cache.layers:
            layer.write(_chunk(10, 0), _chunk(10, 0))
        gone = weakref.ref(cache.k)
        del cache, layer
        assert gone() is None
    finally:
        if enabled:
            gc.enable()


def test_room_made_ahead_keeps_the_positions_and_grows_once():
    """`make_room` before a prompt: an empty cache gets its buffers at once (the capacity the
    prompt would have grown to), chunks written after it land in them, and a cache that holds
    positions keeps them when it grows."""
    from lsp_server.model.kv_cache import CpuCache, grown_capacity

    cache = CpuCache(3, torch.float16, HEADS, DIM)
    cache.make_room(1000)
    assert cache.capacity() == grown_capacity(1000) and cache.get_seq_length() == 0
    first = cache.k
    done = 0
    for n in (128, 128, 128, 500):
        for layer in cache.layers:
            layer.write(_chunk(n, done), -_chunk(n, done))
        done += n
    assert cache.k is first  # no growth: every chunk fitted the room made
    assert torch.equal(cache.layers[2].keys, _chunk(done, 0).half())
    cache.make_room(2000)
    assert cache.capacity() == grown_capacity(2000) and cache.k is not first
    assert torch.equal(cache.layers[1].values, -_chunk(done, 0).half()) and cache.lengths_agree(done)
    CpuCache(3).make_room(1000)  # without the heads' shape: nothing to do until the first write


def test_prompt_cache_makes_a_prompts_room_before_its_chunks():
    """`PromptCache.prefill` sizes a new cache for the whole prompt before the first chunk: every
    chunk writes into the same buffers (no growth, no copy), and a longer prompt on the same
    document grows them once."""
    from lsp_server.model.kv_cache import CpuCache, grown_capacity
    from lsp_server.model.prompt_cache import PromptCache

    class Runtime:
        prefill_chunk = 4

        def __init__(self) -> None:
            self.buffers: list[int] = []

        def new_cache(self) -> CpuCache:
            return CpuCache(2, torch.float16, HEADS, DIM)

        def forward(self, ids, past, keep=1, cancel=None):
            start = past.get_seq_length()
            for layer in past.layers:
                layer.write(_chunk(len(ids), start), -_chunk(len(ids), start))
            self.buffers.append(past.k.data_ptr())
            return torch.zeros(1, 8), past

    runtime = Runtime()
    cache = PromptCache(runtime)
    _, past, _ = cache.prefill("doc", list(range(300)))
    assert len(runtime.buffers) == 75 and len(set(runtime.buffers)) == 1
    assert past.capacity() == grown_capacity(300) and past.lengths_agree(300)
    _, again, reused = cache.prefill("doc", list(range(300)) + list(range(500)))
    assert again is past and reused == 300 and past.capacity() == grown_capacity(800)
    assert len(set(runtime.buffers[75:])) == 1  # grown once, before the new chunks
    assert torch.equal(past.layers[1].keys, _chunk(800, 0).half())
