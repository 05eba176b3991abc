"""Choosing a token from a logits row under the grammar's mask: greedy or temperature + top-p
sampling, and the speculative choice at a drafted position.

Speculative sampling is lossless (speculation/speculator.py): greedy keeps the longest run where
the target's (masked) choice agrees; sampling accepts a drafted token d with probability
min(1, p(d)/q(d)) and otherwise resamples from norm(max(0, p − q)), on the *masked*
distributions (`speculative_choice`)."""

from __future__ import annotations

import numpy as np
import torch

from ..model.token_bitmask import BitmaskUpload, apply_token_bitmask_inplace, masked_argmax


class Sampler:
    """Greedy (temperature 0) or temperature + top-p sampling over masked logits.

    Random draws use a generator on the device of the tensors they draw from (`generator_for`:
    one per device, made on first use and seeded with `seed`), so a seed gives the same
    result on the same device, and CUDA logits never meet a CPU generator."""

    def __init__(self, temperature: float = 0.0, top_p: float = 1.0, seed: int | None = None) -> None:
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.seed = None if seed is None else int(seed)
        self._generators: dict[torch.device, torch.Generator] = {}

    def generator_for(self, device: torch.device) -> torch.Generator:
        """The sampler's generator on `device` (seeded with the sampler's seed when it has one)."""
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        g = self._generators.get(device)
        if g is None:
            g = self._generators[device] = torch.Generator(device=device)
            if self.seed is not None:
                g.manual_seed(self.seed)
            else:
                g.seed()
        return g

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
        return int(torch.multinomial(p, 1, generator=self.generator_for(p.device)))


def masked_logits(logits: torch.Tensor, mask: np.ndarray | None, banned: set[int]) -> torch.Tensor:
    """Logits with disallowed tokens at -inf (`mask` covers the tokenizer's vocabulary; logits
    past it, padding rows of some models, are never allowed). Logits on an accelerator are
    masked there (`device_masked_logits`)."""
    if logits.device.type != "cpu":
        return device_masked_logits(logits, mask, banned)
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


# a disallowed token's logit is pushed this far down (float32's largest is ~3.4e38): below any
# finite logit a model gives, without making it -inf (see `greedy_choice`)
_FAR = np.float32(3e38)


def greedy_choice(logits: torch.Tensor, mask: np.ndarray, banned: set[int],
                  scratch: np.ndarray | None = None) -> int | None:
    """The argmax of `masked_logits(logits, mask, banned)` (the first of equal maxima, as
    `torch.argmax`) without building it, in two tries:
    - the row's own argmax: where the grammar allows it (and it is finite) it is the answer (no
      logit is above it, none equal before it): one pass over the row, and the model's first
      choice is usually one the grammar allows;
    - else the logits plus 0 where allowed and -3e38 elsewhere, made without a branch per
      token (a select, `np.where(mask, logits, -inf)`, mispredicts on the grammar's scattered
      masks: 140 us at 49k tokens, 840 us at 262k, against 30 and 160): where its argmax is an
      allowed, finite logit it is the select's answer (every allowed logit is itself there,
      every other lies below it); otherwise (no finite logit allowed, or an infinite or NaN
      one left out) the select decides (`_select_choice`).
    `scratch`: the caller's float32 room for the shifted row (at least as long as the mask's
    part of it, reused step after step: a new row each step is a fresh mapping and its page
    faults where it is large, 1 MB at 262k tokens). None where no allowed logit is finite."""
    allowed = mask[: logits.shape[0]]
    if banned:
        allowed = allowed.copy()
        allowed[[t for t in banned if t < allowed.shape[0]]] = False
    values = logits.detach().float().numpy()[: allowed.shape[0]]
    best = int(values.argmax())
    if allowed[best] and np.isfinite(values[best]):  # the model's own first choice is allowed: it is the answer
        return best
    n = allowed.shape[0]
    room = scratch[:n] if scratch is not None and scratch.shape[0] >= n else None
    shifted = np.multiply(allowed.view(np.uint8), _FAR, out=room, dtype=np.float32)  # _FAR where allowed, 0 elsewhere
    shifted -= _FAR
    with np.errstate(over="ignore", invalid="ignore"):  # a logit beyond ±3e38 overflows (then the select decides)
        shifted += values
    best = int(shifted.argmax())
    if allowed[best] and np.isfinite(values[best]):
        return best
    return _select_choice(values, allowed)


def _select_choice(values: np.ndarray, allowed: np.ndarray) -> int | None:
    """`greedy_choice`'s answer by a select over the whole row (None: no allowed logit is finite)."""
    selected = np.where(allowed, values, -np.inf)
    best = int(selected.argmax())
    if not np.isfinite(selected[best]):
        return None
    return best


def device_masked_logits(logits: torch.Tensor, mask: np.ndarray | None, banned: set[int]) -> torch.Tensor:
    """`masked_logits` on the logits' device: the mask packed on the host, copied in one small
    transfer and applied in place as a bitmask (`token_bitmask`), no index tensor for it."""
    out = logits.clone()
    if mask is not None:
        apply_token_bitmask_inplace(out, bitmask_upload(out.shape[-1], out.device)(mask))
    if banned:
        out[list(banned)] = float("-inf")
    return out


_uploads: dict[tuple[torch.device, int], BitmaskUpload] = {}


def bitmask_upload(vocab_size: int, device: torch.device) -> BitmaskUpload:
    """The packed mask's buffers for logits of `vocab_size` on `device` (made once each)."""
    key = (torch.device(device), int(vocab_size))
    up = _uploads.get(key)
    if up is None:
        up = _uploads[key] = BitmaskUpload(vocab_size, device)
    return up


def choose(sampler: Sampler, row: torch.Tensor, mask, banned: set[int], draft: int | None = None, q=None,
           scratch: np.ndarray | None = None) -> int | None:
    """The token for one position (None: nothing allowed); with a drafted token, speculative
    sampling keeps the target's distribution (greedy: plain argmax). Logits on an accelerator
    are masked there with the packed bitmask, and a greedy choice is one device→host read.
    `scratch`: `greedy_choice`'s room, the caller's (float32, as long as the row)."""
    if row.device.type != "cpu":
        return device_choice(sampler, row, mask, banned, draft, q)
    if sampler.temperature <= 0 and mask is not None:
        return greedy_choice(row, mask, banned, scratch)
    logits = masked_logits(row, mask, banned)
    if not torch.isfinite(logits).any():
        return None
    return _draw(sampler, logits, draft, q)


def device_choice(sampler: Sampler, row: torch.Tensor, mask, banned: set[int], draft: int | None = None,
                  q=None) -> int | None:
    """`choose` with the mask applied on the row's device as a packed bitmask; greedy reads
    the token and whether anything was allowed in one transfer. The CPU keeps `greedy_choice`
    (it gathers only the allowed logits: faster there, docs/gpu.md)."""
    logits = device_masked_logits(row, mask, banned)
    best = masked_argmax(logits)
    if best is None or sampler.temperature <= 0:
        return best
    return _draw(sampler, logits, draft, q)


def _draw(sampler: Sampler, logits: torch.Tensor, draft: int | None, q) -> int:
    """A token from masked logits with something allowed (speculative at a drafted position)."""
    if sampler.temperature <= 0 or draft is None:
        return sampler.choose(logits)
    p = sampler.probabilities(logits)
    return speculative_choice(p, draft, q, sampler.generator_for(p.device))


def speculative_choice(p: torch.Tensor, draft: int, q: torch.Tensor | None, generator: torch.Generator) -> int:
    """One position of speculative sampling: keep `draft` with probability min(1, p/q), else
    draw from norm(max(0, p − q)). `q` None: the draft was deterministic (q = one-hot).
    `generator` is on the device of `p` (its uniform draw is made there)."""
    pd = float(p[draft])
    qd = 1.0 if q is None else float(q[draft])
    if qd > 0 and float(torch.rand(1, generator=generator, device=generator.device)) < min(1.0, pd / qd):
        return draft
    if q is None:
        residual = p.clone()
        residual[draft] = 0.0
    else:
        residual = torch.clamp(p - q, min=0.0)
    total = float(residual.sum())
    if total <= 0:  # p == q: the draft is always kept above; fall back to p itself
        residual, total = p, float(p.sum())
    return int(torch.multinomial(residual / total, 1, generator=generator))
