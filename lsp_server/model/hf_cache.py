"""`kv_cache.GrowingBuffers` as a transformers cache: for transformers' model classes (the GPU
path, and CPU models that `cpu_decoder` does not compute). Kept apart from `kv_cache` so that the
CPU path never imports transformers."""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

from .kv_cache import GrowingBuffers


class GrowingLayer(GrowingBuffers, DynamicLayer):
    """transformers' cache layer over `GrowingBuffers` (positions written in place)."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        return self.write(key_states, value_states)


class GrowingCache(DynamicCache):
    """A `DynamicCache` whose layers are `GrowingLayer`s (one appended per model layer)."""

    def __init__(self) -> None:
        Cache.__init__(self, layer_class_to_replicate=GrowingLayer)
