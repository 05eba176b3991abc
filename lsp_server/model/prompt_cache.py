"""`PromptCache` keeps the KV cache of the last prompt of each document: a new request whose
prompt shares a prefix with it runs only the tokens after the shared part.

Documents are kept least-recently-used first out under a memory cap (`memory_mb`, the
`cacheMemoryMB` setting): SmolLM2-135M holds 23 KB per position on the CPU (30 layers, 3 KV heads
of 64 dims, keys and values in float16: `kv_cache.KV_DTYPE`; 46 KB in float32 elsewhere), so a
1,000-token prompt and its completion take ~29 MB (the buffers grow in steps:
`kv_cache.GROW_STEP`). Before a prompt is computed, documents are evicted
until it fits beside the others, so the cap bounds the peak as well as what stays.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .kv_cache import ForwardCancelled, cache_bytes, position_bytes, rewind
from .runtime import ModelRuntime

PREFILL_CHUNK = 128  # a request's prompt tokens per forward pass (a chunk once started is finished)
# work ahead's prompt tokens per forward pass: a chunk once started is finished and kept, so a
# keystroke waits for at most one chunk (64 tokens: ~70 ms at 1.1 ms per prompt token, ~150 ms
# at 2.4) and nothing the work ahead computed is ever thrown away (stopping between the layers
# of 256-token chunks lost up to 255 tokens of work to each keystroke: docs/latency.md)
AHEAD_CHUNK = 64
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
    and a count)."""

    def __init__(self, runtime: ModelRuntime, max_documents: int = 64) -> None:
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
                ahead: bool = False):
        """(logits after `ids`, a cache holding them, positions reused): reuses the document's
        cached prefix. The new tokens run in chunks of PREFILL_CHUNK (AHEAD_CHUNK for work
        `ahead` of a request), and `cancel()` is asked before each chunk: a chunk once started
        is finished, so a cancelled prefill raises `PrefillCancelled` having lost nothing, and
        keeps the chunks it finished for the next request on the document (typing on, or the
        request the prefill was made for, usually shares that prefix). A request superseded by
        the next keystroke likewise leaves its chunk to the next request, where stopping inside
        it would lose it (at 8 keys a second no chunk of 128 tokens would ever be finished). The
        other documents are then evicted, least recently used first, down to `memory_mb` in all."""
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
            try:
                while done < len(ids):
                    if cancel is not None and cancel():
                        raise ForwardCancelled()
                    chunk = ids[done : done + (self.ahead_chunk if ahead else self.chunk)]
                    out, past = self.runtime.forward(chunk, past)
                    logits = out[-1]
                    done += len(chunk)
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
