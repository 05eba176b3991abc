"""The decoding loop: masked sampling, fast-forward of forced tokens, stop decisions.

One step: the matcher's mask for the next token (unless unconstrained); if it leaves exactly one
token, take it without asking the model (fast-forward, `forced_token`: it is fed with the next
forward pass, and a draft counts it as accepted without verification; with SmolLM2's 49k-token
vocabulary such positions are rare, but they cost nothing);
otherwise run the model on the pending tokens, mask its logits and sample. Every accepted token
goes to the `StopPolicy`, which may end the completion or reject the token (it would end the
line where the file can't go on): the token is then rolled back and banned for this step.

On the CPU the mask is computed before the forward pass rather than beside it: fast-forward
needs it to decide whether the model runs at all, and it costs ~0.3 ms on average against ~10-15 ms
for a forward pass of the default model on this CPU. On CUDA, where a forward pass is only
queued, the pending tokens' pass is launched first and the mask computed while the device runs
it (`ModelStepper.launch`; not after a fast-forward, so forced runs are still fed together), and
`StepTiming` tallies how much of the mask time that hid (docs/gpu.md).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from collections.abc import Callable, Sequence

import numpy as np
import torch

from mask_store.matcher import GrammarMatcher, MaskBuffer

from ..model.kv_cache import ForwardCancelled, drop_last
from ..model.step_timing import StepTiming
from .budget import NO_BUDGET, Budget
from .sampling import Sampler, choose
from .stopping.policy import Decision, Stop, StopReason, Verdict, StopPolicy

MAX_REJECTS = 4  # tokens banned at one step before the completion ends where it can


def forced_token(mask: np.ndarray, stop_tokens: set[int]) -> int | None:
    """The only token `mask` allows (fast-forward: sampling could only pick it), or None when it
    allows none, several, or only a stop token. Counted, not listed: the step's mask usually
    allows thousands (listing them took 30-50 us at 49k tokens, 250 us at 262k; counting 5 and 20)."""
    if np.count_nonzero(mask) != 1:
        return None
    token = int(np.argmax(mask))
    return None if token in stop_tokens else token


UNDECIDED = Stop(0, StopReason.MAX_TOKENS)  # a pass's stop until one is decided


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
    device that runs them (`StepTiming`: CUDA events, read once the pass is over)."""

    def __init__(self, forward: Callable, logits: torch.Tensor, past, on_forward=None,
                 launch_early: bool | None = None) -> None:
        self._forward = forward
        self.logits = logits
        self.past = past
        self.pending: list[int] = []
        self.forward_ms: list[float] = []
        self.forward_cpu_ms = 0.0  # the calling thread's CPU time in the passes (`RequestTimes.model_ran`)
        self.on_forward = on_forward  # (tokens fed, ms) for the speculation cost estimates
        # launch_early None: where the device runs asynchronously (CUDA)
        self.timing = StepTiming(logits.device, self._timed, launch_early)

    def _timed(self, tokens: int, ms: float) -> None:
        self.forward_ms.append(ms)
        if self.on_forward:
            self.on_forward(tokens, ms)

    def feed(self, token: int) -> None:
        self.pending.append(token)

    def unfeed(self) -> None:
        self.pending.pop()

    def _run(self, ids: list[int], keep: int = 1, wanted: np.ndarray | None = None) -> torch.Tensor:
        cpu = time.thread_time()
        with self.timing.forward(len(ids)):
            logits, self.past = self._forward(ids, self.past, keep, wanted=wanted)
        self.forward_cpu_ms += (time.thread_time() - cpu) * 1000
        return logits

    def launch(self) -> None:
        """On a device that runs asynchronously, start the forward pass over the pending tokens
        now (before the step's mask is computed: the mask work then overlaps it). Pending
        tokens after a fast-forward wait, so forced runs are still fed in one pass."""
        if self.pending and self.timing.may_launch:
            self.current_logits()
            self.timing.launched()

    def current_logits(self, wanted: np.ndarray | None = None) -> torch.Tensor:
        """The logits after everything fed (the pending tokens fed now); `wanted`: the only
        tokens whose logits the step reads (its mask: the runtime may leave the others -inf)."""
        if self.pending:
            self.logits = self._run(self.pending, 1, wanted)[-1]
            self.pending = []
        return self.logits

    def verify(self, draft: list[int], wanted: np.ndarray | None = None) -> list[torch.Tensor]:
        """One forward pass over the pending tokens and `draft`: the logits before each drafted
        position and after the last (len(draft) + 1 rows); `wanted`: as `current_logits`'s,
        for all the rows."""
        self._drafted = len(draft)
        logits = self._run(self.pending + draft, len(draft) + 1, wanted)
        rows = list(logits[-len(draft) - 1 :]) if self.pending else [self.logits] + list(logits)
        self.pending = []
        return rows

    def keep(self, kept: int, next_token: int | None) -> None:
        """After a verification: keep the first `kept` drafted positions in the cache; the
        token chosen after them is fed with the next pass."""
        drop_last(self.past, self._drafted - kept)
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
    budget: Budget = NO_BUDGET,
) -> DecodeOutcome:
    """Generate until the policy stops, the model ends, the guard or a cancellation.

    A re-decoding (`model_pass.Tries`) first takes the `replay` tokens an earlier pass accepted (fed
    to the model with the next forward pass, not asked for), and the step after them may not
    take a token of `avoid` (the earlier passes' choices there): the model's next-best, among
    the tokens `steer(room, written)` allows when given (`room`: the healed bytes still to
    re-create; `written`: the bytes written after them),
    up to the first that writes more than blanks (what the following lines need:
    header_steering.py). `names`: an `identifiers.IdentifierGuide` that reshapes each sampled
    position's logits and mask towards names that exist. `budget`: once it has expired, the pass
    ends at the longest stop so far that ends a complete line (`StopReason.BUDGET`; decoding goes
    on until there is one, or until the line has had the budget's span from the pass's start:
    then the longest valid cut of it, `_Decoding.budget_stop`)."""
    return _Decoding(stepper, matcher, token_bytes, stop_tokens, sampler, policy, max_tokens, cancel,
                     speculator, avoid, steer, names, budget).run(replay)


class _Decoding:
    """One decoding pass's state and its steps: `mask` (the grammar's, then steering), `commit`
    (a token accepted: matcher, bytes, stop policy), `position` (sample one position, trying the
    next-best while the policy rejects), `speculate` (verify a draft in one forward pass), `run`."""

    def __init__(self, stepper: ModelStepper, matcher: GrammarMatcher | None, token_bytes: list[bytes],
                 stop_tokens: set[int], sampler: Sampler, policy: StopPolicy, max_tokens: int,
                 cancel: Callable[[], bool], speculator, avoid: frozenset[int],
                 steer: Callable[[int], np.ndarray] | None, names=None, budget: Budget = NO_BUDGET) -> None:
        self.stepper = stepper
        self.matcher = matcher
        # the words every step's grammar mask is made in (the matcher fills them), and the room
        # a greedy choice shifts the logits in (`sampling.greedy_choice`): one of each a pass
        self.buffer = MaskBuffer(matcher.compiled) if matcher is not None else None
        self.scratch = np.empty(stepper.logits.shape[-1], dtype=np.float32) if stepper is not None else None
        self.token_bytes = token_bytes
        self.stop_tokens = stop_tokens
        self.sampler = sampler
        self.policy = policy
        self.max_tokens = max_tokens
        self.cancel = cancel
        self.speculator = speculator
        self.out = DecodeOutcome([], b"", UNDECIDED)
        self.generated = bytearray()
        self.avoid: set[int] | None = set(avoid) if avoid else None  # banned at the first position decided after the replay
        self.steer = steer  # the steps after the replay take tokens it allows until one writes more than blanks
        self.healed = policy.cursor - len(policy.held)
        self.names = names  # an identifiers.IdentifierGuide, or None
        self.budget = budget
        self.line_budget = budget.for_line()  # the line being written gets the budget's span from here
        self._lines_tried = 0  # line ends written when the budget's stop was last looked for

    # ------------------------------------------------------------------ one position

    def mask(self) -> np.ndarray | None:
        """The tokens allowed at this step (None: unconstrained): the grammar's mask, narrowed by
        the steering while it lasts. The one place a step's mask is made."""
        if self.matcher is None:
            return None
        self.stepper.launch()  # CUDA: step t's forward runs while its mask is computed
        t0 = time.perf_counter()
        mask = self.matcher.next_token_mask(self.buffer)
        self.out.mask_ms.append((time.perf_counter() - t0) * 1000)
        self.stepper.timing.masked(self.out.mask_ms[-1])
        if self.steer is not None:
            steered = self._steered(mask, len(self.generated))
            if steered is not None:
                return steered
            self.steer = None  # the blanks taken lead nowhere it allows (canonical tokenization): the grammar's mask
        return mask

    def _steered(self, mask: np.ndarray, generated: int) -> np.ndarray | None:
        """The grammar's `mask` narrowed by the steering once `generated` bytes are written
        (None: it leaves nothing)."""
        only = self.steer(max(self.healed - generated, 0), generated - self.healed)
        n = min(len(mask), len(only))
        steered = np.concatenate([mask[:n] & only[:n], np.zeros(len(mask) - n, dtype=bool)])
        return steered if steered.any() else None

    def draft_masks(self):
        """For a draft made at this step (`Speculator.draft`'s `narrow`): the mask `mask` would
        give at a drafted position once the tokens drafted before it are committed -- the
        grammar's, narrowed by the steering while it lasts (a drafted position checked against
        the grammar's mask alone could keep a token the steered step refuses); None where the
        steering would leave nothing there (the draft ends before it). None: no steering."""
        if self.steer is None:
            return None
        written = len(self.generated)

        def narrow(_j: int, tokens: list[int], mask: np.ndarray) -> np.ndarray | None:
            spelled = [self.token_bytes[t] for t in tokens]
            if any(b.strip() for b in spelled):  # a token wrote more than blanks: the steering has ended
                return mask
            return self._steered(mask, written + sum(map(len, spelled)))

        return narrow

    def take_avoided(self) -> set[int]:
        """The tokens banned at this position (the earlier passes' choices, once)."""
        banned, self.avoid = self.avoid or set(), None
        return banned

    def commit(self, token: int, forced: bool) -> Decision:
        """Accept `token`: matcher, bytes, stop policy (Verdict.REJECT undoes it)."""
        out = self.out
        if self.matcher is not None and not self.matcher.accept_token(token):
            # the mask is exact but inside an f-/t-string, where it is the lexeme's and the
            # fields' expressions are parsed as tokens are taken: choosing again among the
            # rest is sampling from the exact mask (rejection sampling)
            out.rejected += 1
            return Verdict.REJECT
        spelled = self.token_bytes[token]
        self.generated.extend(spelled)
        decision = self.policy.after_token(bytes(self.generated))
        if decision is Verdict.REJECT:
            if self.matcher is not None:
                self.matcher.rollback(1)
            del self.generated[len(self.generated) - len(spelled) :]
            out.rejected += 1
            return Verdict.REJECT
        out.tokens.append(token)
        if self.steer is not None and spelled.strip():
            self.steer = None
        if forced:
            out.forced += 1
        else:
            out.sampled += 1
        return decision

    def stop_where_it_can(self, reason: StopReason, at_end: bool = False) -> Stop:
        return self.policy.fallback(bytes(self.generated), reason, at_end=at_end)

    def budget_stop(self) -> Stop | None:
        """The budget ran out: the longest stop so far that ends a complete line and keeps the
        file valid (the policy's own fallback, so the same whole-file checks as any stop), or an
        echo stop; None while there is none (looked for again after the next line end). Once the
        line being written has had its own budget too (`Budget.for_line`), any stop of the
        fallback that offers something: single-line, the longest valid cut of the line so far
        (looked for again after every step while there is none)."""
        written = bytes(self.generated[self.healed :]) if self.healed > 0 else bytes(self.generated)
        lines = written.count(b"\n")
        line_spent = self.line_budget.expired()
        if lines == self._lines_tried and not line_spent:
            return None
        self._lines_tried = lines
        stop = self.policy.fallback(bytes(self.generated), StopReason.BUDGET, at_end=False)
        if stop.reason is StopReason.ECHO:
            return stop
        end = self.policy.cursor + stop.cut
        # the line's time is spent, or the cut falls at a line end
        at_line_end = line_spent or (self.policy.held + bytes(self.generated))[end : end + 1] == b"\n"
        if stop.cut > 0 and at_line_end:
            return stop
        return None

    def at_eos(self) -> Stop | None:
        """The model ended: the stop if the text may end here (None: try another token)."""
        stop = self.stop_where_it_can(StopReason.EOS, at_end=True)
        if self.matcher is None or stop.cut + self.healed >= len(self.generated):
            return stop
        self.out.rejected += 1
        return None

    def position(self, row, mask, draft_token=None, q=None, forced=False) -> tuple[int | None, Decision]:
        """Decide one position from its logits row: (token, decision) where decision is a
        Stop, Verdict.CONTINUE, or a Stop from giving up."""
        banned = self.take_avoided()
        avoided = len(banned)
        if forced and draft_token in banned:
            return None, Stop(0, StopReason.NO_CONTINUATION)  # no other token at this step
        guided = self.names is not None and mask is not None  # a constrained step with the names guide
        shaped, shaped_for = (row, mask), None  # the guide's row and mask, for the `banned` of that size
        while True:
            if forced:
                token = draft_token
            else:
                if guided and shaped_for != len(banned):  # first, and again after a token is banned
                    shaped, shaped_for = self.names.shape(row, mask, self.matcher, bytes(self.generated), banned), len(banned)
                token = choose(self.sampler, *shaped, banned, draft_token if not banned else None, q, self.scratch)
            if token is None:
                return None, self.stop_where_it_can(StopReason.NO_CONTINUATION)
            if token in self.stop_tokens:
                stop = self.at_eos()
                if stop is not None:
                    return token, stop
                banned.add(token)
            else:
                decision = self.commit(token, forced)
                if decision is not Verdict.REJECT:
                    return token, decision
                banned.add(token)
                forced = False
            if len(banned) - avoided > MAX_REJECTS:
                return None, self.stop_where_it_can(StopReason.LINE_END)

    # ------------------------------------------------------------------ steps

    def fast_forward(self, mask: np.ndarray) -> Stop | Verdict | None:
        """The grammar leaves one token: take it without asking the model (None: it leaves more)."""
        token = forced_token(mask, self.stop_tokens)
        if token is not None and token in self.take_avoided():  # (nothing avoided: an empty set)
            return Stop(0, StopReason.NO_CONTINUATION)  # the grammar leaves no other token at this step
        self.stepper.timing.step(forced=token is not None)
        if token is None:
            return None
        self.stepper.feed(token)
        decision = self.commit(token, True)
        if decision is Verdict.REJECT:
            self.stepper.unfeed()
            return self.stop_where_it_can(StopReason.LINE_END)
        return decision

    def sample(self, mask: np.ndarray | None) -> tuple[int | None, Decision]:
        """One position from the model's logits (no draft): the token chosen, and the decision."""
        token, decision = self.position(self.stepper.current_logits(mask), mask)
        if token is not None and token not in self.stop_tokens:
            self.stepper.feed(token)
        return token, decision

    def speculate(self, draft) -> tuple[Stop | None, tuple[int, bool] | None]:
        """Verify a whole draft with one forward pass: the positions it got right are kept, the
        first it got wrong takes the model's own token (a Stop when one ended the completion);
        and what the verification found (`Speculator.record`: verified positions agreed, the
        run ended on a disagreement; None: not counted)."""
        out = self.out
        # the tokens any of the verified positions allows (the masks the loop chooses under below)
        wanted = np.logical_or.reduce(draft.masks) if self.matcher is not None else None
        rows = self.stepper.verify(draft.tokens, wanted)
        kept, agreed = 0, 0
        n = len(draft.tokens)
        for j in range(n + 1):
            if len(out.tokens) >= self.max_tokens:
                return self.stop_where_it_can(StopReason.MAX_TOKENS), None
            d = draft.tokens[j] if j < n else None
            is_forced = j < n and draft.forced[j]
            m = draft.masks[j] if self.matcher is not None else None
            token, decision = self.position(rows[j], m, d, draft.qs[j] if j < n else None, is_forced)
            if isinstance(decision, Stop):
                return decision, (agreed, token != d) if j < n and not is_forced else None
            if j < n and token == d:
                kept += 1
                agreed += 0 if is_forced else 1
                continue
            self.stepper.keep(kept, token)
            return None, (agreed, j < n)
        return None, None

    def replayed(self, replay: Sequence[int]) -> bool:
        """Take an earlier pass's tokens again (False: the policy did not go on after one)."""
        for token in replay:
            self.stepper.feed(token)
            if self.commit(token, True) is not Verdict.CONTINUE:  # the earlier pass went on after it: never
                return False
        return True

    def run(self, replay: Sequence[int]) -> DecodeOutcome:
        out = self.out
        if not self.replayed(replay):
            out.stop = Stop(0, StopReason.NO_CONTINUATION)
            out.generated = bytes(self.generated)
            return out
        try:  # a cancellation is also seen between the layers of a forward pass
            out.stop = self._steps()
        except ForwardCancelled:
            out.stop = Stop(0, StopReason.CANCELLED)
        out.generated = bytes(self.generated)
        self.stepper.timing.close()
        out.forward_ms = self.stepper.forward_ms
        return out

    def _steps(self) -> Stop:
        """Decoding steps until one stops: mask, fast-forward, draft and verify, or sample."""
        out, speculator = self.out, self.speculator
        while True:
            if self.cancel():
                return Stop(0, StopReason.CANCELLED)
            if len(out.tokens) >= self.max_tokens:
                return self.stop_where_it_can(StopReason.MAX_TOKENS)
            step_start, step_tokens = time.perf_counter(), len(out.tokens)  # for the step tallies
            mask = self.mask()
            if mask is not None:
                if not mask.any():
                    return self.stop_where_it_can(StopReason.NO_CONTINUATION)
                forwarded = self.fast_forward(mask)
                if isinstance(forwarded, Stop):
                    return forwarded
                if forwarded is not None:
                    continue
            draft = None
            if speculator is not None:
                draft = speculator.draft(self.matcher, mask, out.tokens, self.max_tokens - len(out.tokens), self.sampler,
                                         self.draft_masks())
            if draft is None:
                token, decision = self.sample(mask)
                if speculator is not None:  # the token is a declined proposal's trial (`Speculator.observe`)
                    speculator.record_step(None, len(out.tokens) - step_tokens, time.perf_counter() - step_start, token)
            else:
                out.mask_ms.extend(draft.mask_ms)  # the drafted positions' masks, computed while drafting
                decision, verified = self.speculate(draft)
                speculator.record_step(draft, len(out.tokens) - step_tokens, time.perf_counter() - step_start,
                                       verified=verified)
            if isinstance(decision, Stop):
                return decision
            if self.budget.expired():
                stop = self.budget_stop()
                if stop is not None:
                    return stop
