"""The KV caches: `GrowingLayer`'s positions written in chunks come back as written, across the
buffer's growth, and the buffer's spare room stays bounded (it grew by doubling: up to twice the
positions held); `CpuCache` likewise, a pass entering it once (`CpuCache.write`); `PromptCache`
makes a prompt's room before its chunks."""

from __future__ import annotations

import pytest
import torch

from lsp_server.model.hf_cache import GrowingCache
from lsp_server.model.kv_cache import (AHEAD_CHUNK, GROW_STEP, SPARE, SPARE_CHUNK, CpuCache, ForwardCancelled,
                                       PrefillCancelled, PromptCache, cache_bytes,
                                       drop_last, grown_capacity, position_bytes, rewind)

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


def _write(cache, n: int, scale=lambda i: 1) -> None:
    """A pass of `n` positions through `CpuCache.write`: layer i gets _chunk * scale(i) (+ 0.3,
    not a float16 value: rounded when stored) as keys, its negation as values."""
    with cache.write(n) as (past, k, v):
        for i in range(k.shape[0]):
            chunk = _chunk(n, past) * scale(i) + 0.3
            k[i : i + 1, :, past : past + n], v[i : i + 1, :, past : past + n] = chunk, -chunk


def test_a_cpu_cache_keeps_every_layer_in_two_tensors_across_growth():
    """`CpuCache`: each layer's positions come back as written (float16: rounded as PyTorch
    rounds) across the growth of the shared buffers; `rewind` moves the one fill mark, and
    writing goes on after it."""
    for dtype in (torch.float32, torch.float16):
        cache = CpuCache(3, dtype, HEADS, DIM)
        scale = lambda i: i + 1  # noqa: E731
        _write(cache, 100, scale)
        first = cache.k
        _write(cache, 300, scale)  # grows the shared buffers once, for every layer
        assert cache.k is not first and cache.k.shape[:2] == (3, HEADS) and cache.k.dtype == dtype
        assert cache.get_seq_length() == 400 and cache.capacity() == grown_capacity(400)
        for i in range(3):
            written = _chunk(400, 0) * (i + 1) + 0.3
            assert torch.equal(cache.k[i : i + 1, :, :400], written.to(dtype))
            assert torch.equal(cache.v[i : i + 1, :, :400], -written.to(dtype))
        rewind(cache, 350)
        assert cache.get_seq_length() == 350
        _write(cache, 2)
        assert cache.get_seq_length() == 352 and torch.equal(cache.k[0:1, :, 350:352], (_chunk(2, 350) + 0.3).to(dtype))
        drop_last(cache, 2)
        assert cache.get_seq_length() == 350
        assert cache_bytes(cache) == 2 * cache.k.numel() * cache.k.element_size()
        assert position_bytes(cache) == 2 * 3 * HEADS * DIM * cache.k.element_size()


def test_a_pass_that_raises_adds_nothing_to_a_cpu_cache():
    """A pass stopped between layers (`ForwardCancelled` inside `CpuCache.write`) leaves the
    cache holding what it held before, whichever layers wrote."""
    cache = CpuCache(2, torch.float16, HEADS, DIM)
    _write(cache, 10)
    try:
        with cache.write(5) as (past, k, v):
            k[0:1, :, past : past + 5] = 1.0  # the first layer wrote
            raise ForwardCancelled()
    except ForwardCancelled:
        pass
    assert cache.get_seq_length() == 10


def test_a_dropped_cpu_cache_is_freed_without_the_cyclic_collector():
    """A document's cache evicted from the prompt cache goes at once: nothing in it points back
    at it (a cycle kept every evicted cache's buffers until the cyclic collector ran)."""
    import gc
    import weakref

    enabled = gc.isenabled()
    gc.disable()
    try:
        cache = CpuCache(2, torch.float16, HEADS, DIM)
        _write(cache, 10)
        gone = weakref.ref(cache.k)
        del cache
        assert gone() is None
    finally:
        if enabled:
            gc.enable()


def test_room_made_ahead_keeps_the_positions_and_grows_once():
    """`make_room` before a prompt: an empty cache gets its buffers at once (the capacity the
    prompt would have grown to), chunks written after it land in them, and a cache that holds
    positions keeps them when it grows."""
    cache = CpuCache(3, torch.float16, HEADS, DIM)
    cache.make_room(1000)
    assert cache.capacity() == grown_capacity(1000) and cache.get_seq_length() == 0
    first = cache.k
    for n in (128, 128, 128, 500):
        _write(cache, n)
    done = cache.get_seq_length()
    assert cache.k is first and done == 884  # no growth: every chunk fitted the room made
    assert torch.equal(cache.k[2:3, :, :done], (_chunk(done, 0) + 0.3).half())
    cache.make_room(2000)
    assert cache.capacity() == grown_capacity(2000) and cache.k is not first
    assert torch.equal(cache.v[1:2, :, :done], -(_chunk(done, 0) + 0.3).half()) and cache.get_seq_length() == done


class RecordingRuntime:
    """A runtime that writes each pass into a `CpuCache` and records its length and buffer."""

    def __init__(self) -> None:
        self.calls: list[int] = []  # tokens per pass
        self.buffers: list[int] = []  # the cache's key buffer at each pass

    def new_cache(self) -> CpuCache:
        return CpuCache(2, torch.float16, HEADS, DIM)

    def forward(self, ids, past, keep=1, cancel=None, wanted=None):
        _write(past, len(ids))
        self.calls.append(len(ids))
        self.buffers.append(past.k.data_ptr())
        return torch.zeros(1, 8), past


def test_prompt_cache_makes_a_prompts_room_before_its_chunks():
    """`PromptCache.prefill` sizes a new cache for the whole prompt before the first chunk: every
    chunk writes into the same buffers (no growth, no copy), and a longer prompt on the same
    document grows them once."""

    class Runtime(RecordingRuntime):
        prefill_chunk = 4  # the runtime's own chunk

    runtime = Runtime()
    cache = PromptCache(runtime)
    _, past, _ = cache.prefill("doc", list(range(300)))
    assert len(runtime.buffers) == 75 and len(set(runtime.buffers)) == 1
    assert past.capacity() == grown_capacity(300) and past.get_seq_length() == 300
    _, again, reused = cache.prefill("doc", list(range(300)) + list(range(500)))
    assert again is past and reused == 300 and past.capacity() == grown_capacity(800)
    assert len(set(runtime.buffers[75:])) == 1  # grown once, before the new chunks
    assert torch.equal(past.k[1:2, :, :800], (_chunk(800, 0) + 0.3).half())


def test_spare_work_is_stopped_inside_a_chunk_and_other_work_between_chunks():
    """The window with a context block (`spare`): a request stops it between the layers of a
    chunk (the runtime asks `cancel` inside its pass), the chunks before kept, the one stopped
    lost; any other prefill is stopped only between chunks (a chunk once started is finished)."""

    class Runtime(RecordingRuntime):
        def forward(self, ids, past, keep=1, cancel=None, wanted=None):
            if cancel is not None and cancel():  # between two layers: the cache as it was
                raise ForwardCancelled()
            return super().forward(ids, past, keep, cancel, wanted)

    def after(asked: int):
        calls = []
        return lambda: calls.append(1) or len(calls) >= asked

    runtime = Runtime()
    cache = PromptCache(runtime)
    # asked before each chunk and inside each pass: the 6th time is inside the third chunk
    with pytest.raises(PrefillCancelled) as stopped:
        cache.prefill("doc", list(range(200)), cancel=after(6), ahead=True, chunk=SPARE_CHUNK, spare=True)
    assert runtime.calls == [SPARE_CHUNK] * 2 and stopped.value.computed == 2 * SPARE_CHUNK
    assert cache.missing("doc", list(range(200))) == 200 - 2 * SPARE_CHUNK
    other = Runtime()
    with pytest.raises(PrefillCancelled) as stopped:
        PromptCache(other).prefill("doc", list(range(200)), cancel=after(6), ahead=True, chunk=SPARE_CHUNK)
    assert other.calls == [SPARE_CHUNK] * 5 and stopped.value.computed == 5 * SPARE_CHUNK


def test_a_prefill_takes_the_chunk_it_is_given_and_keeps_what_it_computed():
    """Work ahead in chunks of `chunk` tokens (the window with a context block: SPARE_CHUNK),
    a cancellation between them keeping every chunk computed."""
    runtime = RecordingRuntime()
    cache = PromptCache(runtime)
    with pytest.raises(PrefillCancelled) as stopped:
        cache.prefill("doc", list(range(200)), cancel=lambda: len(runtime.calls) == 3, ahead=True, chunk=SPARE_CHUNK)
    assert runtime.calls == [SPARE_CHUNK] * 3 and stopped.value.computed == 3 * SPARE_CHUNK
    assert cache.missing("doc", list(range(200))) == 200 - 3 * SPARE_CHUNK
    cache.prefill("doc", list(range(200)), ahead=True)
    whole, rest = divmod(200 - 3 * SPARE_CHUNK, AHEAD_CHUNK)  # the rest in chunks of AHEAD_CHUNK, the last shorter
    assert runtime.calls[3:] == [AHEAD_CHUNK] * whole + ([rest] if rest else [])
