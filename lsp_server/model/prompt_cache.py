"""`PromptCache` keeps the KV cache of the last prompt of each document: a new request whose
prompt shares a prefix with it runs only the tokens after the shared part."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .kv_cache import ForwardCancelled, rewind
from .runtime import ModelRuntime

PREFILL_CHUNK = 128  # prompt tokens per forward pass (a cancellation stops a pass between layers)


class PrefillCancelled(Exception):
    """The prompt's forward passes were stopped by a cancellation (`computed` tokens kept)."""

    def __init__(self, computed: int) -> None:
        super().__init__(f"prefill cancelled after {computed} tokens")
        self.computed = computed


@dataclass
class _Entry:
    ids: list[int]
    past: object  # transformers Cache holding len(ids) positions
    logits: torch.Tensor | None  # logits after the last id (None: not computed, a cancelled prefill)


class PromptCache:
    """The KV cache of the last prompt of each document (LRU over documents)."""

    def __init__(self, runtime: ModelRuntime, max_documents: int = 4) -> None:
        self.runtime = runtime
        self.max_documents = max_documents
        self._entries: dict[str, _Entry] = {}
        self.stats = {"reused_tokens": 0, "computed_tokens": 0}
        self.chunk = int(getattr(runtime, "prefill_chunk", PREFILL_CHUNK))

    def prefill(self, key: str, ids: list[int], cancel=None):
        """(logits after `ids`, a cache holding them): reuses the document's cached prefix.
        The new tokens run in chunks of PREFILL_CHUNK, and `cancel()` is asked before each
        decoder layer of each chunk: a cancelled prefill raises `PrefillCancelled` and keeps
        the chunks it finished for the next request on the document (typing on usually shares
        that prefix)."""
        entry = self._entries.pop(key, None)
        common = 0
        if entry is not None:
            n = min(len(entry.ids), len(ids))
            while common < n and entry.ids[common] == ids[common]:
                common += 1
        if entry is not None and common == len(ids) == len(entry.ids) and entry.logits is not None:
            past, logits = entry.past, entry.logits
        else:
            past = None
            if entry is not None and common > 0:
                past = entry.past
                if common == len(ids):  # the new prompt is a prefix of the old one: recompute the last
                    common -= 1
                rewind(past, common)
            else:
                common = 0
            done = common
            logits = None
            try:
                while done < len(ids):
                    if cancel is not None and cancel():
                        raise ForwardCancelled()
                    chunk = ids[done : done + self.chunk]
                    out, past = self.runtime.forward(chunk, past, cancel=cancel)
                    logits = out[-1]
                    done += len(chunk)
            except ForwardCancelled:
                if done > 0 and past is not None:  # logits None: the next request recomputes the last
                    self._keep(key, _Entry(list(ids[:done]), past, logits))
                raise PrefillCancelled(done) from None
        self.stats["reused_tokens"] += common
        self.stats["computed_tokens"] += len(ids) - common
        self._keep(key, _Entry(list(ids), past, logits))
        return logits, past, common

    def _keep(self, key: str, entry: _Entry) -> None:
        self._entries[key] = entry
        while len(self._entries) > self.max_documents:
            self._entries.pop(next(iter(self._entries)))

    def release(self, key: str, past, length: int) -> None:
        """After decoding with `past`, keep only the prompt's part for the next request."""
        entry = self._entries.get(key)
        if entry is not None and entry.past is past:
            rewind(past, length)

    def forget(self, key: str) -> None:
        self._entries.pop(key, None)
