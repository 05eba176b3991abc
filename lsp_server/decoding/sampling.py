"""Choosing a token from a logits row under the grammar's mask: greedy or temperature + top-p
sampling, and the speculative choice at a drafted position."""

from __future__ import annotations

import numpy as np
import torch

from .speculation.acceptance import speculative_choice


class Sampler:
    """Greedy (temperature 0) or temperature + top-p sampling over masked logits."""

    def __init__(self, temperature: float = 0.0, top_p: float = 1.0, seed: int | None = None) -> None:
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.generator = torch.Generator()
        if seed is not None:
            self.generator.manual_seed(int(seed))
        else:
            self.generator.seed()

    def probabilities(self, logits: torch.Tensor) -> torch.Tensor:
        """The distribution sampling draws from (after temperature and top-p)."""
        if self.temperature <= 0:
            p = torch.zeros_like(logits)
            p[int(torch.argmax(logits))] = 1.0
            return p
        p = torch.softmax(logits / self.temperature, dim=-1)
        if self.top_p < 1.0:
            sp, idx = torch.sort(p, descending=True)
            keep = torch.cumsum(sp, 0) - sp < self.top_p
            keep[0] = True
            q = torch.zeros_like(p)
            q[idx[keep]] = sp[keep]
            p = q / q.sum()
        return p

    def choose(self, logits: torch.Tensor) -> int:
        if self.temperature <= 0:
            return int(torch.argmax(logits))
        p = self.probabilities(logits)
        return int(torch.multinomial(p, 1, generator=self.generator))


def masked_logits(logits: torch.Tensor, mask: np.ndarray | None, banned: set[int]) -> torch.Tensor:
    """Logits with disallowed tokens at -inf (`mask` covers the tokenizer's vocabulary; logits
    past it, padding rows of some models, are never allowed)."""
    out = logits.clone()
    n = out.shape[0]
    if mask is not None:
        m = torch.from_numpy(mask)
        if m.shape[0] < n:
            out[m.shape[0] :] = float("-inf")
            out[: m.shape[0]][~m] = float("-inf")
        else:
            out[~m[:n]] = float("-inf")
    if banned:
        out[list(banned)] = float("-inf")
    return out


def greedy_choice(logits: torch.Tensor, mask: np.ndarray, banned: set[int]) -> int | None:
    """The argmax of `masked_logits(logits, mask, banned)` (the first of equal maxima, as
    `torch.argmax`) without building it: the allowed logits only (a third of the time)."""
    allowed = np.flatnonzero(mask[: logits.shape[0]])
    if banned:
        allowed = allowed[~np.isin(allowed, list(banned))]
    if not allowed.size:
        return None
    values = logits[torch.from_numpy(allowed)]
    if not torch.isfinite(values).any():
        return None
    return int(allowed[int(torch.argmax(values))])


def choose(sampler: Sampler, row: torch.Tensor, mask, banned: set[int], draft: int | None = None, q=None) -> int | None:
    """The token for one position (None: nothing allowed); with a drafted token, speculative
    sampling keeps the target's distribution (greedy: plain argmax)."""
    if sampler.temperature <= 0 and mask is not None:
        return greedy_choice(row, mask, banned)
    logits = masked_logits(row, mask, banned)
    if not torch.isfinite(logits).any():
        return None
    if sampler.temperature <= 0 or draft is None:
        return sampler.choose(logits)
    return speculative_choice(sampler.probabilities(logits), draft, q, sampler.generator)
