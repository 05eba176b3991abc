"""A KV cache that grows in place, and forward passes that a cancellation stops between layers.

transformers' `DynamicCache` concatenates every layer's keys and values with the new ones at
each forward pass: a decoding step at a 1,000-token context copies the whole cache (60 tensors,
~14 MB for SmolLM2-135M) to add one position, about a quarter of the step's time on this CPU,
and a prompt fed in chunks copies it once per chunk. `GrowingBuffers` keeps each layer's keys and
values in a buffer with spare room (grown in steps of `GROW_STEP` positions when full) and
writes new positions in place;
attention reads a view of the filled part. Cropping (rolling back rejected draft tokens, keeping
only the prompt after a completion) just moves the fill mark.

`StopBetweenLayers` lets a cancellation stop a forward pass between two decoder layers: a
prompt of a thousand tokens no longer has to finish a pass before a newer request can run.
The layers that already ran hold the stopped pass's positions; `rewind` drops them so the cache
is again exactly what it was before the pass.

Nothing here imports transformers (the CPU model's cache is `CpuCache`); `hf_cache.GrowingCache`
is the same buffers as a transformers `Cache`, for transformers' model classes (the GPU path,
architectures `cpu_decoder` does not compute).

`CpuCache` keeps every layer's keys in one tensor [layers, kv_heads, capacity, head_dim] (and the
values in another), each layer's `CacheLayer` a view of its slice: the decode kernels run all the
layers of a short pass in one call (`DecodeKernels.decoder_layers`) over those two tensors. Its
element type is float16 by default (`KV_DTYPE`): a decoding step at 1,000 positions reads the
whole cache (46 MB for SmolLM2-135M in float32, 23 MB in float16) and the server keeps a prompt's
cache per document, so half the bytes is half the attention's memory traffic and the KV memory.
Keys and values are rounded to float16 once, when written (by PyTorch's conversion or the
kernels' `_mm256_cvtps_ph`, both round to nearest even, so either writer stores the same bits),
and every reader converts them back exactly: a verification pass still gives each row the bits
of single steps. The logits differ from a float32 cache's by the keys' and values' rounding
(relative 2^-11); docs/latency.md has the measured difference.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable

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


class GrowingBuffers:
    """One layer's keys and values in a buffer that grows in steps (`GROW_STEP`); `keys`/`values`
    are views of the filled positions. Plain (no transformers): the CPU model's cache
    (`CpuCache`); `hf_cache.GrowingLayer` gives it transformers' cache-layer interface."""

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


class CacheLayer(GrowingBuffers):
    """One layer of a `CpuCache`: its buffers are views of the cache's slice for the layer
    [1, kv_heads, capacity, head_dim], and the cache makes room for all layers at once. Its
    `keys`/`values` views are made when read: a decoding step moves every layer's fill mark
    (twice when a draft is rolled back), and making 60 views each time cost ~0.3 ms a step."""

    @property
    def keys(self) -> torch.Tensor | None:
        return None if self._k is None else self._k[..., : self._len, :]

    @property
    def values(self) -> torch.Tensor | None:
        return None if self._v is None else self._v[..., : self._len, :]

    def _views(self) -> None:
        pass  # made when read (the properties)

    def __init__(self, cache: CpuCache, index: int) -> None:
        super().__init__()
        # a weak reference: the cache holds its layers, and a cycle would keep a dropped cache's
        # buffers (an evicted document's, tens of MB) until Python's cyclic collector ran, which
        # held ~200 MB over 40 requests (docs/memory.md)
        self._cache = weakref.ref(cache)
        self._index = index

    def _reserve(self, needed: int, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self._cache().reserve(needed, key_states.shape[1], key_states.shape[-1])

    def attach(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """The cache moved its buffers: this layer's are now `k`/`v` (positions copied)."""
        self._k, self._v = k, v
        self._fill(self._len)

    def reset(self) -> None:
        self._fill(0)
        self.is_initialized = False


class CpuCache:
    """The KV cache of the CPU model (`cpu_decoder`): one `CacheLayer` per decoder layer, all of
    them views of two tensors `k` and `v` [layers, kv_heads, capacity, head_dim] of `dtype`
    (None until the first write); see the module's doc."""

    def __init__(self, layers: int, dtype: torch.dtype = KV_DTYPE, kv_heads: int = 0, head_dim: int = 0) -> None:
        if dtype not in (torch.float16, torch.float32):
            raise ValueError(f"a CPU cache holds float16 or float32, not {dtype}")
        self.dtype = dtype
        self.kv_heads, self.head_dim = kv_heads, head_dim  # 0: known at the first write
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None
        self.layers = [CacheLayer(self, i) for i in range(layers)]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.layers[layer_idx].get_seq_length() if self.layers else 0

    def capacity(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def reserve(self, needed: int, kv_heads: int, head_dim: int) -> None:
        """Room for `needed` positions in every layer (each layer's positions kept)."""
        if needed <= self.capacity():
            if (self.k.shape[1], self.k.shape[3]) != (kv_heads, head_dim):
                raise ValueError(f"this cache holds {self.k.shape[1]} heads of {self.k.shape[3]}, "
                                 f"not {kv_heads} of {head_dim}")
            return
        shape = (len(self.layers), kv_heads, grown_capacity(needed), head_dim)
        k, v = torch.empty(shape, dtype=self.dtype), torch.empty(shape, dtype=self.dtype)
        for i, layer in enumerate(self.layers):
            n = layer.get_seq_length()
            if n:
                k[i, :, :n] = self.k[i, :, :n]
                v[i, :, :n] = self.v[i, :, :n]
        self.k, self.v = k, v
        for i, layer in enumerate(self.layers):
            layer.attach(k[i : i + 1], v[i : i + 1])

    def make_room(self, positions: int) -> None:
        """Room for `positions` in every layer before a prompt's passes write them (the heads'
        shape given at construction, else nothing done): a prompt computed in chunks then grows
        its buffers once, not once per chunk, and an empty cache never holds an old and a new
        buffer of every layer at once (the growth's peak, docs/memory.md)."""
        if self.kv_heads and self.head_dim and positions > self.capacity():
            self.reserve(positions, self.kv_heads, self.head_dim)

    def lengths_agree(self, length: int) -> bool:
        """Every layer holds `length` positions."""
        return all(layer._len == length for layer in self.layers)

    def extend(self, n: int) -> None:
        """`n` positions were written in place after the filled ones, in every layer."""
        for layer in self.layers:
            layer.extend(n)


def rewind(past, length: int) -> None:
    """Keep the first `length` positions of a cache: each layer on its own (layers may differ
    in length after a pass stopped between layers), or the whole cache where it has no layers."""
    layers = getattr(past, "layers", None)
    for part in layers if layers is not None else [past]:
        extra = part.get_seq_length() - length
        if extra > 0:
            part.crop(-extra)


class ForwardCancelled(Exception):
    """A forward pass was stopped between two layers; the cache was rewound to before it."""


class StopBetweenLayers:
    """Forward pre-hooks on a model's decoder layers that raise `ForwardCancelled` when the
    current pass's `cancel()` says so (one Python call per layer: ~1 µs against milliseconds)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self._local = threading.local()
        self.layers = 0
        for module in model.modules():
            if type(module).__name__.endswith("DecoderLayer"):
                module.register_forward_pre_hook(self._check)
                self.layers += 1

    def _check(self, module, args) -> None:
        cancel = getattr(self._local, "cancel", None)
        if cancel is not None and cancel():
            raise ForwardCancelled()

    def run(self, cancel: Callable[[], bool] | None, fn: Callable, past):
        """`fn()` with `cancel` checked before each layer; on a cancellation the cache `past`
        is rewound to its length before the pass and `ForwardCancelled` raised."""
        before = past.get_seq_length() if past is not None else 0
        self._local.cancel = cancel
        try:
            return fn()
        except ForwardCancelled:
            if past is not None:
                rewind(past, before)
            raise
        finally:
            self._local.cancel = None


def cache_bytes(past) -> int:
    """The memory a cache holds: its layers' key and value buffers (spare room included), or
    what the cache says (`nbytes`) when it has no layers."""
    layers = getattr(past, "layers", None)
    if layers is None:
        return int(getattr(past, "nbytes", 0))
    total = 0
    for layer in layers:
        for name in ("_k", "_v") if isinstance(layer, GrowingBuffers) else ("keys", "values"):
            t = getattr(layer, name, None)
            if isinstance(t, torch.Tensor):
                total += t.numel() * t.element_size()
    return total


def position_bytes(past) -> float:
    """The memory one position takes in a cache (all layers' keys and values; 0 when it holds
    none): from its buffers' shapes, or what the cache says (`nbytes`) per position held."""
    layers = getattr(past, "layers", None)
    if layers is None:
        held = past.get_seq_length() if hasattr(past, "get_seq_length") else 0
        return getattr(past, "nbytes", 0) / held if held else 0.0
    total = 0.0
    for layer in layers:
        for name in ("_k", "_v") if isinstance(layer, GrowingBuffers) else ("keys", "values"):
            t = getattr(layer, name, None)
            if isinstance(t, torch.Tensor) and t.dim() >= 2 and t.shape[-2]:
                total += t.numel() * t.element_size() / t.shape[-2]
    return total
