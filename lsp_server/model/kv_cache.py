"""KV caches: the CPU model's (`CpuCache`), the buffers of transformers' cache layers
(`GrowingBuffers`, `hf_cache`), and the cache of each document's last prompt (`PromptCache`).

transformers' `DynamicCache` concatenates every layer's keys and values with the new ones at
each forward pass: a decoding step at a 1,000-token context copies the whole cache (60 tensors,
~14 MB for SmolLM2-135M) to add one position, about a quarter of the step's time on this CPU.
Here buffers have spare room (grown in steps of `GROW_STEP` positions when full) and new
positions are written in place; cropping (rolling back rejected draft tokens, keeping only the
prompt after a completion) just moves the fill mark (`rewind`, `drop_last`).

`CpuCache` (the CPU model's, `cpu_decoder`) keeps every layer's keys in one tensor [layers,
kv_heads, capacity, head_dim] (and the values in another) under one fill mark: the decode
kernels run all the layers of a short pass in one call over those two tensors. A forward pass
enters it once, `CpuCache.write`: room for the pass's positions, which count as held only once
the pass is over, so a pass stopped between two layers (a cancellation: `ForwardCancelled`)
leaves the cache exactly as it was. Its element type is float16 by default (`KV_DTYPE`): a
decoding step at 1,000 positions reads the whole cache (46 MB for SmolLM2-135M in float32, 23 MB
in float16), so half the bytes is half the attention's memory traffic and the KV memory. Keys
and values are rounded to float16 once, when written (by PyTorch's conversion or the kernels'
`_mm256_cvtps_ph`, both round to nearest even, so either writer stores the same bits), and every
reader converts them back exactly: a verification pass still gives each row the bits of single
steps. The logits differ from a float32 cache's by the rounding (relative 2^-11; docs/latency.md).

`PromptCache` keeps the KV cache of the last prompt of each document: a new request whose prompt
shares a prefix with it runs only the tokens after the shared part. Documents are kept least
recently used first out under a memory cap (`memory_mb`, the `cacheMemoryMB` setting):
SmolLM2-135M holds 23 KB per position on the CPU (30 layers, 3 KV heads of 64 dims, float16), so
a 1,000-token prompt and its completion take ~29 MB. Before a prompt is computed, documents are
evicted until it fits beside the others, so the cap bounds the peak as well as what stays.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

KV_DTYPE = torch.float16  # the CPU model's cache (`CpuCache`); float32 keeps transformers' exact bits

# A buffer that must grow gets room for the positions needed plus at least `SPARE`, rounded up to
# `GROW_STEP`: a kept prompt of n positions holds at most n + SPARE + GROW_STEP (doubling held up to
# 2n: a 1,000-token prompt and its completion took 2,048 positions, 94 MB for SmolLM2-135M, now
# 1,280, 59 MB). The copies cost little: a 1,000-token prompt in chunks of 128 is copied 4 times
# (~1,500 positions, ~70 MB of memcpy, ~1% of its prefill), a decoding step every GROW_STEP positions.
GROW_STEP = 256
SPARE = 128


def grown_capacity(needed: int) -> int:
    """The positions a buffer that must hold `needed` gets (see `GROW_STEP`)."""
    return -(-(needed + SPARE) // GROW_STEP) * GROW_STEP


class ForwardCancelled(Exception):
    """A forward pass was stopped between two layers; the cache is as it was before it."""


class GrowingBuffers:
    """One layer's keys and values in a buffer that grows in steps (`GROW_STEP`); `keys`/`values`
    are views of the filled positions. Plain (no transformers): `hf_cache.GrowingLayer` gives it
    transformers' cache-layer interface."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._k = self._v = None
        self._len = 0
        self._views()
        self.is_initialized = False

    def _views(self) -> None:
        """`keys`/`values`: views of the filled positions (None before the first write)."""
        self.keys = None if self._k is None else self._k[..., : self._len, :]
        self.values = None if self._v is None else self._v[..., : self._len, :]

    def _reserve(self, needed: int, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        cap = 0 if self._k is None else self._k.shape[-2]
        if needed <= cap:
            return
        cap = grown_capacity(needed)
        k = key_states.new_empty(key_states.shape[:-2] + (cap, key_states.shape[-1]))
        v = value_states.new_empty(value_states.shape[:-2] + (cap, value_states.shape[-1]))
        if self._len:
            k[..., : self._len, :] = self._k[..., : self._len, :]
            v[..., : self._len, :] = self._v[..., : self._len, :]
        self._k, self._v = k, v

    def write(self, key_states: torch.Tensor, value_states: torch.Tensor):
        """Append the positions of `key_states`/`value_states` [..., n, D]; the filled views."""
        n = key_states.shape[-2]
        end = self._len + n
        self._reserve(end, key_states, value_states)
        self._k[..., self._len : end, :] = key_states
        self._v[..., self._len : end, :] = value_states
        self.is_initialized = True
        self._fill(end)
        return self.keys, self.values

    def _fill(self, length: int) -> None:
        """The first `length` positions are the cache: `keys`/`values` view them."""
        self._len = length
        self._views()

    def get_seq_length(self) -> int:
        return self._len

    def grow_to(self, length: int) -> None:
        """Room for `length` positions (for a kernel writing them in place; the layer must
        hold some already)."""
        self._reserve(length, self._k[..., :0, :], self._v[..., :0, :])

    def extend(self, n: int) -> None:
        """`n` positions were written in place after the filled ones."""
        self._fill(self._len + n)

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError("crop takes a negative count of positions to remove")
        if tokens_to_remove == 0 or self._k is None:
            return
        self._fill(max(0, self._len + tokens_to_remove))

    def reset(self) -> None:
        self._k = self._v = None
        self._len = 0
        self._views()
        self.is_initialized = False


class CpuCache:
    """The KV cache of the CPU model (`cpu_decoder`): every layer's keys and values in two tensors
    `k` and `v` [layers, kv_heads, capacity, head_dim] of `dtype` (None until room is made), the
    first `get_seq_length()` positions of each held; see the module's doc."""

    def __init__(self, layers: int, dtype: torch.dtype, kv_heads: int, head_dim: int) -> None:
        if dtype not in (torch.float16, torch.float32):
            raise ValueError(f"a CPU cache holds float16 or float32, not {dtype}")
        self.dtype = dtype
        self.shape = (layers, kv_heads, head_dim)
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None
        self._len = 0

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self._len

    def capacity(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def make_room(self, positions: int) -> None:
        """Room for `positions` in every layer (the positions held kept): a prompt computed in
        chunks makes room for all of them before the first, so its buffers grow once, not once
        per chunk, and an empty cache never holds an old and a new buffer at once (the growth's
        peak, docs/memory.md)."""
        if positions <= self.capacity():
            return
        layers, kv_heads, head_dim = self.shape
        shape = (layers, kv_heads, grown_capacity(positions), head_dim)
        k, v = torch.empty(shape, dtype=self.dtype), torch.empty(shape, dtype=self.dtype)
        if self._len:
            k[:, :, : self._len] = self.k[:, :, : self._len]
            v[:, :, : self._len] = self.v[:, :, : self._len]
        self.k, self.v = k, v

    @contextmanager
    def write(self, rows: int) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
        """A forward pass's `rows` new positions: yields (past, k, v), the positions held before
        and the buffers, with room for positions past .. past+rows-1, which the pass writes in
        every layer; they count as held once the block ends. A pass that raises (a cancellation
        between layers) adds nothing, whichever layers it wrote."""
        past = self._len
        self.make_room(past + rows)
        yield past, self.k, self.v
        self._len = past + rows

    def crop(self, tokens_to_remove: int) -> None:
        """Drop the last `-tokens_to_remove` positions (transformers' `crop` with a negative count)."""
        if tokens_to_remove > 0:
            raise ValueError("crop takes a negative count of positions to remove")
        self._len = max(0, self._len + tokens_to_remove)


def rewind(past, length: int) -> None:
    """Keep the first `length` positions of a cache: each layer on its own where it has layers
    (transformers' caches), else the whole cache (`CpuCache`, CUDA's `StaticKV`)."""
    layers = getattr(past, "layers", None)
    for part in layers if layers is not None else [past]:
        extra = part.get_seq_length() - length
        if extra > 0:
            part.crop(-extra)


def drop_last(past, n: int) -> None:
    """Drop a cache's last `n` positions (a verification pass's rejected draft)."""
    rewind(past, past.get_seq_length() - n)


def _buffers(past) -> list[torch.Tensor] | None:
    """The tensors a cache keeps its keys and values in (spare room included: a `GrowingBuffers`
    layer's own buffers), or None where it has none to show (it says its `nbytes`)."""
    if isinstance(past, CpuCache):
        return [t for t in (past.k, past.v) if t is not None]
    layers = getattr(past, "layers", None)
    if layers is None:
        return None
    out = []
    for layer in layers:
        for name in ("_k", "_v") if isinstance(layer, GrowingBuffers) else ("keys", "values"):
            t = getattr(layer, name, None)
            if isinstance(t, torch.Tensor):
                out.append(t)
    return out


def cache_bytes(past) -> int:
    """The memory a cache holds: its key and value buffers (spare room included), or what the
    cache says (`nbytes`)."""
    buffers = _buffers(past)
    if buffers is None:
        return int(getattr(past, "nbytes", 0))
    return sum(t.numel() * t.element_size() for t in buffers)


def position_bytes(past) -> float:
    """The memory one position takes in a cache (all layers' keys and values; 0 when it holds
    none): from its buffers' shapes, or what the cache says (`nbytes`) per position held."""
    buffers = _buffers(past)
    if buffers is None:
        held = past.get_seq_length() if hasattr(past, "get_seq_length") else 0
        return getattr(past, "nbytes", 0) / held if held else 0.0
    return sum(t.numel() * t.element_size() / t.shape[-2] for t in buffers if t.dim() >= 2 and t.shape[-2])


PREFILL_CHUNK = 128  # a request's prompt tokens per forward pass (a chunk once started is finished)
# work ahead's prompt tokens per forward pass: a chunk once started is finished and kept, so a
# keystroke waits for at most one chunk and nothing the work ahead computed is ever thrown away
# (stopping between the layers of 256-token chunks lost up to 255 tokens of work to each
# keystroke: docs/latency.md). 24 tokens: a pass short enough for the layers in C (at most
# MAX_ATTENTION_ROWS rows), as fast per token as any (SmolLM2 after 500 tokens: 24 rows 2.2-2.4 ms
# a token, 32 rows 2.2-2.8, 64 rows 2.8-3.0, 128 rows 2.4), and a keystroke's wait ~55 ms there
# (64 tokens: ~190 ms, the warm requests' p90 spent in `queue`)
AHEAD_CHUNK = 24
# the work ahead's chunk for the window with a context block, which the window without it serves
# in the meantime (decoding/parts.py): not worth a keystroke's wait for 64 tokens
SPARE_CHUNK = 16
MB = 1 << 20


class PrefillCancelled(Exception):
    """The prompt's forward passes were stopped by a cancellation: the cache holds `computed`
    positions of the prompt (`reused` of them were there before)."""

    def __init__(self, computed: int, reused: int = 0) -> None:
        super().__init__(f"prefill cancelled after {computed} tokens")
        self.computed = computed
        self.reused = reused


@dataclass
class _Entry:
    ids: list[int]
    past: object  # transformers Cache holding len(ids) positions
    logits: torch.Tensor | None  # logits after the last id (None: not computed, a cancelled prefill)


class PromptCache:
    """The KV cache of the last prompt of each document (LRU over documents, under a memory cap
    and a count), computed by `runtime` (a `runtime.ModelRuntime`: `forward`, `new_cache`)."""

    def __init__(self, runtime, max_documents: int = 64) -> None:
        self.runtime = runtime
        self.max_documents = max_documents
        self._entries: dict[str, _Entry] = {}  # least recently used first
        self.stats = {"reused_tokens": 0, "computed_tokens": 0, "evicted": 0}
        self._bytes_per_position = 0.0  # what a position took in the last document kept
        # a runtime may fix its own chunk (scripted models take a prompt in one call)
        self.chunk = int(getattr(runtime, "prefill_chunk", PREFILL_CHUNK))
        self.ahead_chunk = int(getattr(runtime, "prefill_chunk", AHEAD_CHUNK))

    def missing(self, key: str, ids: list[int]) -> int:
        """How many of `ids` a prefill under `key` would run through the model now."""
        return len(ids) - _reusable(self._entries.get(key), ids)

    def prefill(self, key: str, ids: list[int], cancel=None, memory_mb: float | None = None,
                ahead: bool = False, chunk: int | None = None, spare: bool = False):
        """(logits after `ids`, a cache holding them, positions reused): reuses the document's
        cached prefix. The new tokens run in chunks of PREFILL_CHUNK (AHEAD_CHUNK for work
        `ahead` of a request), and `cancel()` is asked before each chunk: a chunk once started
        is finished, so a cancelled prefill raises `PrefillCancelled` having lost nothing, and
        keeps the chunks it finished for the next request on the document (typing on, or the
        request the prefill was made for, usually shares that prefix). A request superseded by
        the next keystroke likewise leaves its chunk to the next request, where stopping inside
        it would lose it (at 8 keys a second no chunk of 128 tokens would ever be finished). The
        other documents are then evicted, least recently used first, down to `memory_mb` in all.
        `chunk`: the tokens per forward pass instead (a runtime's own chunk still wins). `spare`:
        work no request waits for (the window with the context block, while the one without it
        serves): `cancel()` is asked between the layers of a chunk too, and a chunk stopped
        inside is lost (the cache as it was before it), so that a keystroke waits for one layer,
        not a chunk."""
        entry = self._entries.pop(key, None)
        self._make_room(len(ids), memory_mb)
        common = _reusable(entry, ids)
        if entry is not None and common == len(ids) == len(entry.ids):  # the same prompt, its logits kept
            past, logits = entry.past, entry.logits
        else:
            past = None
            if common > 0:
                past = entry.past
                rewind(past, common)
            if past is None:  # the CPU model's cache, made here to be sized once (None: forward makes one)
                past = getattr(self.runtime, "new_cache", lambda: None)()
            make_room = getattr(past, "make_room", None)
            if make_room is not None:  # the whole prompt's room at once, not a growth per chunk
                make_room(len(ids))
            done = common
            logits = None
            size = self.ahead_chunk if ahead else self.chunk
            if chunk is not None and not hasattr(self.runtime, "prefill_chunk"):
                size = chunk
            try:
                while done < len(ids):
                    if cancel is not None and cancel():
                        raise ForwardCancelled()
                    part = ids[done : done + size]
                    out, past = self.runtime.forward(part, past, cancel=cancel if spare else None)
                    logits = out[-1]
                    done += len(part)
            except ForwardCancelled:
                self.stats["reused_tokens"] += common
                self.stats["computed_tokens"] += done - common
                if done > 0 and past is not None:  # logits None: the next request recomputes the last
                    self._keep(key, _Entry(list(ids[:done]), past, logits), memory_mb)
                raise PrefillCancelled(done, common) from None
        self.stats["reused_tokens"] += common
        self.stats["computed_tokens"] += len(ids) - common
        self._keep(key, _Entry(list(ids), past, logits), memory_mb)
        return logits, past, common

    def _make_room(self, positions: int, memory_mb: float | None) -> None:
        """Before a prompt of `positions` is computed, evict the least recently used documents
        until it fits beside the rest under the cap (as the documents kept so far took memory
        per position, spare room not counted): the cap then bounds the peak too (within a
        growth step), not only what is kept after."""
        if memory_mb is None or not self._entries or not self._bytes_per_position:
            return
        need = positions * self._bytes_per_position
        while self._entries and self.memory_bytes() + need > memory_mb * MB:
            self._entries.pop(next(iter(self._entries)))
            self.stats["evicted"] += 1

    def _keep(self, key: str, entry: _Entry, memory_mb: float | None) -> None:
        self._bytes_per_position = position_bytes(entry.past) or self._bytes_per_position
        self._entries[key] = entry
        cap = None if memory_mb is None else memory_mb * MB
        while len(self._entries) > 1 and (len(self._entries) > self.max_documents
                                          or cap is not None and self.memory_bytes() > cap):
            self._entries.pop(next(iter(self._entries)))
            self.stats["evicted"] += 1

    def memory_bytes(self) -> int:
        """The memory the documents' KV caches hold."""
        return sum(cache_bytes(e.past) for e in list(self._entries.values()))

    def documents(self) -> list[str]:
        """The documents held, least recently used first."""
        return list(self._entries)

    def release(self, key: str, past, length: int) -> None:
        """After decoding with `past`, keep only the prompt's part for the next request."""
        entry = self._entries.get(key)
        if entry is not None and entry.past is past:
            rewind(past, length)

    def forget(self, key: str) -> None:
        self._entries.pop(key, None)

    def move(self, key: str, to: str) -> None:
        """What is kept under `key` kept under `to` instead (in place of what was there)."""
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._entries.pop(to, None)
            self._entries[to] = entry


def _reusable(entry: _Entry | None, ids: list[int]) -> int:
    """The positions of `ids` a prefill finds in `entry`: all of them when it holds exactly
    `ids` and their logits, else their shared prefix less the last position when that is all
    of `ids` (its logits must be computed again)."""
    if entry is None:
        return 0
    n = min(len(entry.ids), len(ids))
    common = 0
    while common < n and entry.ids[common] == ids[common]:
        common += 1
    if common == len(ids) == len(entry.ids) and entry.logits is not None:
        return common
    return max(0, min(common, len(ids) - 1))
