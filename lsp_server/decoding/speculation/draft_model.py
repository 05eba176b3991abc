"""A small model with the target's tokenizer as a draft source (`--draft-model DIR`)."""

from __future__ import annotations

import torch

from ...model.kv_cache import rewind
from ..sampling import masked_logits


class DraftModel:
    """A small model with the target's tokenizer as a draft source (its own KV cache)."""

    name = "draft-model"

    def __init__(self, runtime) -> None:
        self.runtime = runtime
        self._ids: list[int] = []
        self._past = None

    def _logits_after(self, context: list[int]) -> torch.Tensor:
        common = 0
        n = min(len(self._ids), len(context))
        while common < n and self._ids[common] == context[common]:
            common += 1
        common = min(common, len(context) - 1)
        if self._past is not None and common > 0:
            rewind(self._past, common)
            logits, self._past = self.runtime.forward(context[common:], self._past)
        else:
            logits, self._past = self.runtime.forward(context)
        self._ids = list(context)
        return logits[-1]

    def next(self, context: list[int], mask, sampler) -> tuple[int | None, torch.Tensor | None]:
        """The draft model's token after `context` under `mask`, and its distribution q."""
        row = masked_logits(self._logits_after(context), mask, set())
        if not torch.isfinite(row).any():
            return None, None
        q = sampler.probabilities(row)
        if sampler.temperature <= 0:
            return int(torch.argmax(q)), q
        return int(torch.multinomial(q, 1, generator=sampler.generator_for(q.device))), q
