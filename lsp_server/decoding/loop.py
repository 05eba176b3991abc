"""The decoding loop: masked sampling, fast-forward of forced tokens, stop decisions.

One step: the matcher's mask for the next token (unless unconstrained); if it leaves exactly one
token, take it without asking the model (fast-forward: it is fed with the next forward pass);
otherwise run the model on the pending tokens, mask its logits and sample. Every accepted token
goes to the `StopPolicy`, which may end the completion or reject the token (it would end the
line where the file can't go on): the token is then rolled back and banned for this step.

On the CPU the mask is computed before the forward pass rather than beside it: fast-forward
needs it to decide whether the model runs at all, and it costs ~0.3 ms on average against ~45 ms
for a forward pass of the default model on this CPU. On CUDA, where a forward pass is only
queued, the pending tokens' pass is launched first and the mask computed while the device runs
it (`ModelStepper.launch`; not after a fast-forward, so forced runs are still fed together), and
`MaskOverlap` tallies how much of the mask time that hid (docs/gpu.md).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from collections.abc import Callable, Sequence

import numpy as np
import torch

from mask_store.matcher import GrammarMatcher

from ..model.device_timing import ForwardClock
from ..model.kv_cache import ForwardCancelled, rewind
from ..model.mask_overlap import MaskOverlap
from .fast_forward import forced_token
from .sampling import Sampler, choose
from .stopping.decision import Decision, Stop, StopReason, Verdict
from .stopping.policy import StopPolicy

MAX_REJECTS = 4  # tokens banned at one step before the completion ends where it can


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
    with the next forward pass, and the KV cache they grow. Forward passes are timed on the
    device that runs them (`ForwardClock`: CUDA events, read once the pass is over)."""

    def __init__(self, forward: Callable, logits: torch.Tensor, past, on_forward=None,
                 launch_early: bool | None = None) -> None:
        self._forward = forward
        self.logits = logits
        self.past = past
        self.pending: list[int] = []
        self.forward_ms: list[float] = []
        self.on_forward = on_forward  # (tokens fed, ms) for the speculation cost estimates
        self.clock = ForwardClock(logits.device, self._timed)
        # launch_early None: where the device runs asynchronously (CUDA)
        self.overlap = MaskOverlap(logits.device, launch_early)

    def _timed(self, tokens: int, ms: float) -> None:
        self.forward_ms.append(ms)
        if self.on_forward:
            self.on_forward(tokens, ms)

    def feed(self, token: int) -> None:
        self.pending.append(token)

    def unfeed(self) -> None:
        self.pending.pop()

    def _run(self, ids: list[int], keep: int = 1) -> torch.Tensor:
        self.clock.flush()
        self.clock.begin()
        logits, self.past = self._forward(ids, self.past, keep)
        self.clock.end(len(ids))
        return logits

    def launch(self) -> None:
        """On a device that runs asynchronously, start the forward pass over the pending tokens
        now (before the step's mask is computed: the mask work then overlaps it). Pending
        tokens after a fast-forward wait, so forced runs are still fed in one pass."""
        if self.pending and self.overlap.enabled and not self.overlap.after_forced:
            self.current_logits()
            self.overlap.launched()

    def current_logits(self) -> torch.Tensor:
        if self.pending:
            self.logits = self._run(self.pending)[-1]
            self.pending = []
        return self.logits

    def verify(self, draft: list[int]) -> list[torch.Tensor]:
        """One forward pass over the pending tokens and `draft`: the logits before each drafted
        position and after the last (len(draft) + 1 rows)."""
        self._base = self.past.get_seq_length() + len(self.pending)
        logits = self._run(self.pending + draft, len(draft) + 1)
        rows = list(logits[-len(draft) - 1 :]) if self.pending else [self.logits] + list(logits)
        self.pending = []
        return rows

    def keep(self, kept: int, next_token: int | None) -> None:
        """After a verification: keep the first `kept` drafted positions in the cache; the
        token chosen after them is fed with the next pass."""
        rewind(self.past, self._base + kept)
        self.pending = [] if next_token is None else [next_token]


def decode(
    stepper: ModelStepper,
    matcher: GrammarMatcher | None,
    token_bytes: list[bytes],
    stop_tokens: set[int],
    sampler: Sampler,
    policy: StopPolicy,
    max_tokens: int,
    cancel: Callable[[], bool] = lambda: False,
    speculator=None,
    replay: Sequence[int] = (),
    avoid: frozenset[int] = frozenset(),
    steer: Callable[[int], np.ndarray] | None = None,
    names=None,
) -> DecodeOutcome:
    """Generate until the policy stops, the model ends, the guard or a cancellation.

    A re-decoding (`redecode.py`) first takes the `replay` tokens an earlier pass accepted (fed
    to the model with the next forward pass, not asked for), and the step after them may not
    take a token of `avoid` (the earlier passes' choices there): the model's next-best, among
    the tokens `steer(room)` allows when given (`room`: the healed bytes still to re-create),
    up to the first that writes more than blanks (what the following lines need:
    header_steering.py). `names`: an `identifiers.IdentifierGuide` that reshapes each sampled
    position's logits and mask towards names that exist."""
    out = DecodeOutcome([], b"", Stop(0, StopReason.MAX_TOKENS))
    generated = bytearray()
    first_banned = [set(avoid)] if avoid else []  # consumed by the first position decided after the replay
    # the steps after the replay take tokens `steer` allows until one writes more than blanks
    first_only = [] if steer is None else [steer]
    healed = policy.cursor - len(policy.held)

    def commit(token: int, forced: bool) -> Decision:
        """Accept `token`: matcher, bytes, stop policy (Verdict.REJECT undoes it)."""
        if matcher is not None and not matcher.accept_token(token):
            # the mask is exact but inside an f-/t-string, where it is the lexeme's and the
            # fields' expressions are parsed as tokens are taken: choosing again among the
            # rest is sampling from the exact mask (rejection sampling)
            out.rejected += 1
            return Verdict.REJECT
        generated.extend(token_bytes[token])
        decision = policy.after_token(bytes(generated))
        if decision is Verdict.REJECT:
            if matcher is not None:
                matcher.rollback(1)
            del generated[len(generated) - len(token_bytes[token]) :]
            out.rejected += 1
            return Verdict.REJECT
        out.tokens.append(token)
        if first_only and token_bytes[token].strip():
            first_only.clear()
        if forced:
            out.forced += 1
        else:
            out.sampled += 1
        return decision

    def at_eos() -> Stop | None:
        """The model ended: the stop if the text may end here (None: try another token)."""
        stop = policy.fallback(bytes(generated), StopReason.EOS, at_end=True)
        if matcher is None or stop.cut + policy.cursor - len(policy.held) >= len(generated):
            return stop
        out.rejected += 1
        return None

    def position(row, mask, draft_token=None, q=None, forced=False):
        """Decide one position from its logits row: (token, decision) where decision is a
        Stop, Verdict.CONTINUE, or a Stop from giving up."""
        banned: set[int] = first_banned.pop() if first_banned else set()
        avoided = len(banned)
        if banned and forced and draft_token in banned:
            return None, Stop(0, StopReason.NO_CONTINUATION)  # no other token at this step
        if names is not None and mask is not None and not forced:
            row, mask = names.shape(row, mask, matcher, bytes(generated))
        while True:
            if forced:
                token = draft_token
            else:
                token = choose(sampler, row, mask, banned, draft_token if not banned else None, q)
            if token is None:
                return None, policy.fallback(bytes(generated), StopReason.NO_CONTINUATION, at_end=False)
            if token in stop_tokens:
                stop = at_eos()
                if stop is not None:
                    return token, stop
                banned.add(token)
            else:
                decision = commit(token, forced)
                if decision is not Verdict.REJECT:
                    return token, decision
                banned.add(token)
                forced = False
            if len(banned) - avoided > MAX_REJECTS:
                return None, policy.fallback(bytes(generated), StopReason.LINE_END, at_end=False)

    for token in replay:
        stepper.feed(token)
        if commit(token, True) is not Verdict.CONTINUE:  # the earlier pass went on after it: never
            out.stop = Stop(0, StopReason.NO_CONTINUATION)
            out.generated = bytes(generated)
            return out
    try:  # a cancellation is also seen between the layers of a forward pass
        while True:
            if cancel():
                out.stop = Stop(0, StopReason.CANCELLED)
                break
            if len(out.tokens) >= max_tokens:
                out.stop = policy.fallback(bytes(generated), StopReason.MAX_TOKENS, at_end=False)
                break
            step_start, step_tokens = time.perf_counter(), len(out.tokens)  # for the step tallies
            mask = None
            if matcher is not None:
                stepper.launch()  # CUDA: step t's forward runs while its mask is computed
                t0 = time.perf_counter()
                mask = matcher.next_token_mask()
                out.mask_ms.append((time.perf_counter() - t0) * 1000)
                stepper.overlap.masked(out.mask_ms[-1])
                if first_only:
                    only = first_only[0](max(healed - len(generated), 0))
                    n = min(len(mask), len(only))
                    mask = np.concatenate([mask[:n] & only[:n], np.zeros(len(mask) - n, dtype=bool)])
                if not mask.any():
                    out.stop = policy.fallback(bytes(generated), StopReason.NO_CONTINUATION, at_end=False)
                    break
                token = forced_token(mask, stop_tokens)
                if token is not None and first_banned:
                    if token in first_banned.pop():  # the grammar leaves no other token at this step
                        out.stop = Stop(0, StopReason.NO_CONTINUATION)
                        break
                stepper.overlap.step(forced=token is not None)
                if token is not None:  # fast-forward: the grammar leaves one token; the model isn't asked
                    stepper.feed(token)
                    decision = commit(token, True)
                    if decision is Verdict.REJECT:
                        stepper.unfeed()
                        out.stop = policy.fallback(bytes(generated), StopReason.LINE_END, at_end=False)
                        break
                    if isinstance(decision, Stop):
                        out.stop = decision
                        break
                    continue
            draft = None
            if speculator is not None:
                draft = speculator.draft(matcher, mask, out.tokens, max_tokens - len(out.tokens), sampler)
            if draft is not None:
                out.mask_ms.extend(draft.mask_ms)  # the drafted positions' masks, computed while drafting
            if draft is None:
                token, decision = position(stepper.current_logits(), mask)
                if token is not None and token not in stop_tokens:
                    stepper.feed(token)
                if speculator is not None:
                    speculator.record_step(None, len(out.tokens) - step_tokens, time.perf_counter() - step_start)
                if isinstance(decision, Stop):
                    out.stop = decision
                    break
                continue
            # speculative step: verify the whole draft with one forward pass
            rows = stepper.verify(draft.tokens)
            kept, agreed, stop = 0, 0, None
            n = len(draft.tokens)
            for j in range(n + 1):
                if len(out.tokens) >= max_tokens:
                    stop = policy.fallback(bytes(generated), StopReason.MAX_TOKENS, at_end=False)
                    break
                d = draft.tokens[j] if j < n else None
                is_forced = j < n and draft.forced[j]
                m = draft.masks[j] if matcher is not None else None
                token, decision = position(rows[j], m, d, draft.qs[j] if j < n else None, is_forced)
                if isinstance(decision, Stop):
                    stop = decision
                    if j < n and not is_forced:
                        speculator.record(draft, agreed, token != d)
                    break
                if j < n and token == d:
                    kept += 1
                    agreed += 0 if is_forced else 1
                    continue
                if j < n:
                    speculator.record(draft, agreed, True)
                else:
                    speculator.record(draft, agreed, False)
                stepper.keep(kept, token)
                break
            speculator.record_step(draft, len(out.tokens) - step_tokens, time.perf_counter() - step_start)
            if stop is not None:
                out.stop = stop
                break
    except ForwardCancelled:
        out.stop = Stop(0, StopReason.CANCELLED)
    out.generated = bytes(generated)
    stepper.clock.finish()
    stepper.overlap.close()
    out.forward_ms = stepper.forward_ms
    return out
