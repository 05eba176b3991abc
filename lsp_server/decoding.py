"""The decoding loop: masked sampling, fast-forward of forced tokens, stop decisions.

One step: the matcher's mask for the next token (unless unconstrained); if it leaves exactly one
token, take it without asking the model (fast-forward: it is fed with the next forward pass);
otherwise run the model on the pending tokens, mask its logits and sample. Every accepted token
goes to the `StopPolicy`, which may end the completion or reject the token (it would end the
line where the file can't go on): the token is then rolled back and banned for this step.

The mask is computed before the forward pass rather than beside it: fast-forward needs it to
decide whether the model runs at all, and it costs ~0.3 ms on average against ~45 ms for a
forward pass of the default model on this CPU (`GrammarMatcher.next_token_mask_async` is there
for callers that prefer the overlap).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from mask_store.matcher import GrammarMatcher

from .stopping import REJECT, Stop, StopPolicy

MAX_REJECTS = 4  # tokens banned at one step before the completion ends where it can


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


@dataclass
class DecodeOutcome:
    tokens: list[int]  # accepted tokens (healing tokens included), in order
    generated: bytes  # their bytes
    stop: Stop
    sampled: int = 0
    forced: int = 0
    rejected: int = 0
    mask_ms: list[float] = field(default_factory=list)
    forward_ms: list[float] = field(default_factory=list)


class ModelStepper:
    """The model side of the loop: logits after everything fed so far, tokens waiting to be fed
    with the next forward pass, and the KV cache they grow."""

    def __init__(self, forward: Callable, logits: torch.Tensor, past) -> None:
        self._forward = forward
        self.logits = logits
        self.past = past
        self.pending: list[int] = []
        self.forward_ms: list[float] = []

    def feed(self, token: int) -> None:
        self.pending.append(token)

    def unfeed(self) -> None:
        self.pending.pop()

    def current_logits(self) -> torch.Tensor:
        if self.pending:
            t0 = time.perf_counter()
            logits, self.past = self._forward(self.pending, self.past)
            self.forward_ms.append((time.perf_counter() - t0) * 1000)
            self.logits = logits[-1]
            self.pending = []
        return self.logits


def decode(
    stepper: ModelStepper,
    matcher: GrammarMatcher | None,
    token_bytes: list[bytes],
    stop_tokens: set[int],
    sampler: Sampler,
    policy: StopPolicy,
    max_tokens: int,
    cancel: Callable[[], bool] = lambda: False,
) -> DecodeOutcome:
    """Generate until the policy stops, the model ends, the guard or a cancellation."""
    out = DecodeOutcome([], b"", Stop(0, "max-tokens"))
    eos = sorted(stop_tokens)
    generated = bytearray()
    banned: set[int] = set()
    while True:
        if cancel():
            out.stop = Stop(0, "cancelled")
            break
        if len(out.tokens) >= max_tokens:
            out.stop = policy.fallback(bytes(generated), "max-tokens", at_end=False)
            break
        mask = None
        forced = None
        if matcher is not None:
            t0 = time.perf_counter()
            mask = matcher.next_token_mask()
            out.mask_ms.append((time.perf_counter() - t0) * 1000)
            if banned:
                mask[list(banned)] = False
            allowed = np.flatnonzero(mask)
            if allowed.size == 0:
                out.stop = policy.fallback(bytes(generated), "no-continuation", at_end=False)
                break
            if allowed.size == 1 and int(allowed[0]) not in stop_tokens:
                forced = int(allowed[0])
        if forced is not None:
            token = forced
        else:
            logits = masked_logits(stepper.current_logits(), mask, banned)
            if not torch.isfinite(logits).any():
                out.stop = policy.fallback(bytes(generated), "no-continuation", at_end=False)
                break
            token = sampler.choose(logits)
        if token in stop_tokens:
            stop = policy.fallback(bytes(generated), "eos", at_end=True)
            if stop.cut + policy.cursor - len(policy.held) >= len(generated) or matcher is None:
                out.stop = stop
                break
            # the model wants to end where the file can't: not this token
            banned.add(token)
            out.rejected += 1
            if len(banned) > MAX_REJECTS:
                out.stop = stop
                break
            continue
        if matcher is not None and not matcher.accept_token(token):
            raise RuntimeError(f"token {token} passed the mask but the matcher rejected it")
        stepper.feed(token)
        generated += token_bytes[token]
        decision = policy.after_token(bytes(generated))
        if decision == REJECT:
            if matcher is not None:
                matcher.rollback(1)
            stepper.unfeed()
            del generated[len(generated) - len(token_bytes[token]) :]
            banned.add(token)
            out.rejected += 1
            if len(banned) > MAX_REJECTS:
                out.stop = policy.fallback(bytes(generated), "line-end", at_end=False)
                break
            continue
        banned.clear()
        out.tokens.append(token)
        if forced is not None:
            out.forced += 1
        else:
            out.sampled += 1
        if isinstance(decision, Stop):
            out.stop = decision
            break
    out.generated = bytes(generated)
    out.forward_ms = stepper.forward_ms
    return out
