"""The acceptance maths of speculative decoding: the expected speed-up, the γ chooser and the
lossless choice at a drafted position.

With per-token acceptance rate α, draft/target cost ratio c and draft length γ, one verification
step yields (1 − α^(γ+1)) / (1 − α) tokens on average for a cost of cγ + 1 target steps, so the
expected speed-up is

    S(α, c, γ) = (1 − α^(γ+1)) / ((cγ + 1)(1 − α))

(seed 001). On a CPU a forward pass over γ + 1 tokens costs more than over one; with the measured
ratio r(γ) = T(γ + 1) / T(1) the denominator becomes (cγ + r(γ)). `choose_gamma` maximises S
over γ (γ = 0: no speculation, S = 1), so speculation is skipped when it can't pay (α ≤ c).

Verification is lossless: greedy keeps the longest run where the target's (masked) choice agrees;
sampling accepts a drafted token d with probability min(1, p(d)/q(d)) and otherwise resamples
from norm(max(0, p − q)), on the *masked* distributions (`speculative_choice`).
"""

from __future__ import annotations

import torch

MAX_GAMMA = 8


def expected_speedup(alpha: float, c: float, gamma: int, verify_ratio: float = 1.0) -> float:
    """S(α, c, γ); `verify_ratio` is T(γ+1)/T(1) (1 in the seed's model)."""
    if gamma <= 0:
        return 1.0
    if alpha >= 1.0:
        tokens = gamma + 1.0
    else:
        tokens = (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)
    return tokens / (c * gamma + verify_ratio)


def choose_gamma(alpha: float, c: float, max_gamma: int = MAX_GAMMA, verify_ratio=None) -> int:
    """The γ in 0..max_gamma that maximises the expected speed-up (the smallest one when gains
    differ by less than 1e-9); `verify_ratio(γ)` gives T(γ+1)/T(1) (default: 1, the formula as
    stated)."""
    speedups = [1.0] + [
        expected_speedup(alpha, c, g, verify_ratio(g) if verify_ratio else 1.0) for g in range(1, max_gamma + 1)
    ]
    best = max(speedups)
    return next(g for g, s in enumerate(speedups) if s >= best - 1e-9)


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
