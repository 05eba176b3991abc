"""Speculative decoding under the grammar: grammar-checked drafts from the best source, the
acceptance maths that chooses it, and what it learns across requests.

Draft sources (each draft is checked against the grammar at every position: a token the mask
forbids ends the draft):
- grammar-forced tokens: the mask allows a single token (α = 1, c = 0); the decoder takes them
  without the model, in or out of a draft (`loop.forced_token`);
- prompt lookup (`PromptLookup`, the source that costs nothing: code repeats its names and
  patterns): continue the longest recent n-gram of the text so far from where it occurs earlier
  in the prompt or the output, else in the rest of the document (the text after the cursor, and
  before the prompt's window); c ≈ 0;
- a draft model sharing the tokenizer (`DraftModel`, `--draft-model DIR`: draft_model.py).

The acceptance maths: with per-token acceptance rate α, draft/target cost ratio c and draft
length γ, one verification step yields (1 − α^(γ+1)) / (1 − α) tokens on average for a cost of
cγ + 1 target steps, so the expected speed-up is

    S(α, c, γ) = (1 − α^(γ+1)) / ((cγ + 1)(1 − α))

(seed 001). On a CPU a forward pass over γ + 1 tokens costs more than over one; with the measured
ratio r(γ) = T(γ + 1) / T(1) the denominator becomes (cγ + r(γ)). `choose_gamma` maximises S
over γ (γ = 0: no speculation, S = 1), so speculation is skipped when it can't pay (α ≤ c).
Verification is lossless (`sampling.speculative_choice`).

The source and γ are chosen per position by the expected speed-up, from the α per draft source
(and per kind of draft) and the forward costs T(n) measured so far (`SpeculationStats`, learnt
across requests; per request the decoding steps are tallied by their draft source, `StepTally`).
Those estimates must stay alive when the chooser drafts nothing, or one bad start switches
speculation off for the engine's life (seen on 40 third-party cut points: after a dozen requests
most steps drafted nothing, 287 plain steps to 136 drafts): where the chooser declines a lookup
proposal, the target's own token at that step is compared with the proposal's first token
(`observe`: a free trial of the proposal's kind, what a one-token draft would have verified),
and the drafting cost `c` counts only the work a draft adds (its positions' grammar masks; the
lookup runs at every step either way).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..loop import forced_token
from .draft_model import DraftModel


# ---------------------------------------------------------------------------- the acceptance maths

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


# ---------------------------------------------------------------------------- what speculation learns

@dataclass
class SourceStats:
    drafted: int = 0  # positions verified
    accepted: int = 0
    rejections: int = 0  # verification steps that ended on a disagreement
    seconds: float = 0.0  # time spent drafting: the work a draft adds (its positions' masks, a draft model's steps)
    proposing_seconds: float = 0.0  # the lookup's own time, paid at every step whether it drafts or not
    probe_hits: int = 0  # declined proposals whose first token the target took anyway (`Speculator.observe`)
    probe_misses: int = 0

    def probe(self, hit: bool) -> None:
        self.probe_hits += int(hit)
        self.probe_misses += int(not hit)

    def alpha(self, prior: float = 0.5, weight: float = 2.0) -> float:
        """Per-token acceptance rate (geometric MLE with a weak prior: a source's own α for
        its classes, such as the lookup's match lengths). A declined proposal's trial counts
        as a one-position draft: a hit as an accepted position, a miss as a rejection."""
        kept = self.accepted + self.probe_hits
        return (kept + prior * weight) / (kept + self.rejections + self.probe_misses + weight)


@dataclass
class StepTally:
    """Decoding steps of one kind (a draft source and its kind, or `plain`: no draft): how many,
    the tokens they committed, the γ chosen and the time they took (drafting, the forward pass,
    the choices), so each source's yield can be set against plain steps of the same run."""

    steps: int = 0
    tokens: int = 0
    gamma: int = 0  # summed over the steps
    ms: float = 0.0

    def to_json(self) -> dict:
        return {"steps": self.steps, "tokens": self.tokens, "gamma": self.gamma, "ms": round(self.ms, 2)}


@dataclass
class SpeculationStats:
    """Running estimates of α (per source) and of the forward costs T(n), across requests."""

    sources: dict[str, SourceStats] = field(default_factory=dict)
    forward_ms: dict[int, float] = field(default_factory=dict)  # tokens fed -> EMA of ms
    steps: int = 0
    gamma_sum: int = 0  # over the steps that drafted: the mean γ used
    gamma_steps: int = 0

    def source(self, name: str) -> SourceStats:
        return self.sources.setdefault(name, SourceStats())

    def record_forward(self, n: int, ms: float) -> None:
        n = min(n, MAX_GAMMA + 2)
        old = self.forward_ms.get(n)
        self.forward_ms[n] = ms if old is None else 0.8 * old + 0.2 * ms

    def t(self, n: int) -> float | None:
        n = min(n, MAX_GAMMA + 2)
        if n in self.forward_ms:
            return self.forward_ms[n]
        known = sorted(self.forward_ms)
        if not known:
            return None
        lo = max((k for k in known if k <= n), default=known[0])
        return self.forward_ms[lo]

    def verify_ratio(self, gamma: int) -> float:
        t1, tg = self.t(1), self.t(gamma + 1)
        if not t1 or not tg:
            return 1.0 + 0.05 * gamma  # until measured: a little dearer per extra token
        return max(tg / t1, 1.0)

    def cost_ratio(self, name: str) -> float:
        s = self.sources.get(name)
        t1 = self.t(1)
        if s is None or not s.drafted or not t1:
            return 0.0
        return (s.seconds * 1000 / s.drafted) / t1

    def alpha(self, name: str, kind: str | None = None) -> float:
        """α of a source, or of one kind of its drafts (`lookup` by match length) with the
        source's α as the prior until that kind has a record of its own."""
        a = self.source(name).alpha()
        if kind is None:
            return a
        return self.source(f"{name}/{kind}").alpha(prior=a)

    def choose(self, name: str, kind: str | None = None) -> int:
        return choose_gamma(self.alpha(name, kind), self.cost_ratio(name), MAX_GAMMA, self.verify_ratio)

    def to_json(self) -> dict:
        return {
            "sources": {
                n: {"alpha": round(self.alpha(*n.split("/", 1)), 3), "c": round(self.cost_ratio(n.split("/")[0]), 4),
                    "drafted": s.drafted, "accepted": s.accepted, "probed": s.probe_hits + s.probe_misses,
                    "probe_hits": s.probe_hits}
                for n, s in sorted(self.sources.items())
            },
            "forward_ms": {str(k): round(v, 2) for k, v in sorted(self.forward_ms.items())},
            "gamma_mean": round(self.gamma_sum / self.gamma_steps, 2) if self.gamma_steps else 0,
        }


# ---------------------------------------------------------------------------- prompt lookup

class PromptLookup:
    """Drafts by n-gram lookup in the prompt and the output so far, then in the rest of the
    document (`reference`: what the prompt leaves out, the text after the cursor first, as the
    first match there is the nearest: code repeats the names and patterns around it).

    Matches of one token count too (`min_ngram` 1): they predict worse (α ~0.45 against ~0.85
    for four tokens on the benchmark's cut points) but cover most positions the longer ones
    leave, and the γ chooser weighs each length by its own α."""

    name = "lookup"

    def __init__(self, max_ngram: int = 4, min_ngram: int = 1,
                 reference: list[int] | Callable[[], list[int]] | None = None) -> None:
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        # a callable is asked once, at the first position the prompt has no match for
        # (tokenizing the document's text costs a few milliseconds)
        self._reference = reference

    def reference(self) -> np.ndarray:
        if not isinstance(self._reference, np.ndarray):
            ref = self._reference() if callable(self._reference) else self._reference
            self._reference = np.asarray(ref or [], dtype=np.int64)
        return self._reference

    def propose(self, context: list[int], k: int) -> list[int]:
        return self.propose_with_length(context, k)[0]

    def propose_with_length(self, context: list[int], k: int) -> tuple[list[int], int]:
        """Up to `k` tokens that followed the most recent earlier occurrence of the longest
        matching n-gram at the end of `context`, and that n (0: no match); only without any
        match there, the reference's first occurrence, with n negative. A longer match predicts
        better (and one in the document worse): the speculator keeps α per kind of match."""
        if k <= 0 or len(context) < self.min_ngram + 1:
            return [], 0
        ctx = np.asarray(context, dtype=np.int64)
        found = self._match(ctx, len(context), k, 0)
        if found[0] or self._reference is None:
            return found
        ref = self.reference()
        if not len(ref):
            return found
        proposal, n = self._match(np.concatenate([ref, ctx]), len(context), k, len(ref))
        return proposal, -n

    def _match(self, seq: np.ndarray, ctx_len: int, k: int, ref_len: int) -> tuple[list[int], int]:
        """The continuation of the longest n-gram ending `seq` (its last `ctx_len` tokens the
        context): with `ref_len` 0 its most recent earlier occurrence, else the first one in
        the reference (`seq[:ref_len]`, nearest the cursor), not running past its end.

        The occurrences' last tokens are found with one comparison over `seq`; their match
        length then grows backwards one token at a time, on those few positions only."""
        top = min(self.max_ngram, ctx_len - 1)
        if top < self.min_ngram:
            return [], 0
        limit = ref_len or len(seq)  # a continuation's first token comes before this
        ends = np.flatnonzero(seq[: limit - 1] == seq[-1])  # an occurrence's last token
        if not ends.size:
            return [], 0
        length = np.ones(ends.size, dtype=np.int64)
        alive = np.ones(ends.size, dtype=bool)
        for back in range(1, top):
            idx = ends - back
            alive &= idx >= 0
            alive[alive] = seq[idx[alive]] == seq[-1 - back]
            if not alive.any():
                break
            length += alive
        best = int(length.max())
        if best < self.min_ngram:
            return [], 0
        at = np.flatnonzero(length == best)
        start = int(ends[at[0] if ref_len else at[-1]]) + 1
        return [int(t) for t in seq[start : min(start + k, limit)]], best


# ---------------------------------------------------------------------------- the speculator

@dataclass
class Draft:
    tokens: list[int]
    masks: list  # masks[j]: the mask before position j (masks[0] is the step's own)
    forced: list[bool]  # position j is grammar-forced (no verification needed)
    qs: list  # the draft's distribution per position (None: deterministic)
    source: str
    mask_ms: list = field(default_factory=list)
    kind: str | None = None  # the lookup's match length ("n3"): α is kept per kind too
    gamma: int = 0  # the γ chosen (the draft may be shorter: the grammar or the proposal ended it)

    @property
    def key(self) -> str:
        return f"{self.source}/{self.kind}" if self.kind else self.source


class Speculator:
    """Builds grammar-checked drafts from the best source for the current estimates."""

    def __init__(self, stats: SpeculationStats, context: list[int], stop_tokens: set[int],
                 lookup: PromptLookup | None = None, draft_model: DraftModel | None = None,
                 reference: Callable[[], list[int]] | None = None) -> None:
        self.stats = stats
        self.context = context  # prompt ids; accepted tokens are appended by the decoder
        self.stop_tokens = stop_tokens
        self.lookup = lookup or PromptLookup(reference=reference)  # `reference`: the rest of the document's ids
        self.draft_model = draft_model
        self.request = {"drafts": 0, "drafted": 0, "accepted": 0, "probed": 0, "probe_hits": 0}
        self.steps: dict[str, StepTally] = {}  # by draft key, and "plain"
        self._probe: tuple[str, str | None, int] | None = None  # a declined proposal's (source, kind, first token)
        self._proposed: tuple[str, list[int]] = ("", [])  # the lookup's kind and proposal at the last step

    def _pick(self, ctx: list[int]) -> tuple[str, str | None, int, list[int] | None]:
        """The source (and kind) with the best expected speed-up for this position, its γ and
        the lookup's proposal; γ 0 when no source is expected to pay."""
        best = ("lookup", None, 0, None)
        best_s = 1.0
        proposal, n = self.lookup.propose_with_length(ctx, MAX_GAMMA)
        kind = f"n{n}" if n > 0 else f"n{-n}-doc"  # a match in the prompt or in the document
        self._proposed = (kind, proposal)
        candidates = [("lookup", kind, proposal)] if proposal else []
        if self.draft_model:
            candidates.append(("draft-model", None, None))
        for name, kind, prop in candidates:
            g = self.stats.choose(name, kind)
            sp = expected_speedup(self.stats.alpha(name, kind), self.stats.cost_ratio(name), g,
                                  self.stats.verify_ratio(g))
            if g > 0 and sp > best_s:
                best, best_s = (name, kind, g, prop), sp
        return best

    def draft(self, matcher, mask0, accepted: list[int], budget: int, sampler, narrow=None) -> Draft | None:
        """A draft for the step whose mask is `mask0` (None: none pays, or the grammar ends it at
        once). `narrow(j, tokens, mask)`: the mask the decoding loop would use at drafted position
        j (`tokens` drafted before it) given the grammar's (the first line's steering), None
        where the loop would decide that position otherwise: the draft ends before it."""
        self._probe = None
        t0 = time.perf_counter()
        ctx = self.context + accepted
        name, kind, gamma, proposal = self._pick(ctx)
        t1 = time.perf_counter()
        self.stats.source("lookup").proposing_seconds += t1 - t0  # paid at every step, drafting or not
        gamma = min(gamma, budget)
        if gamma <= 0:
            self._declined(mask0)
            return None
        self.stats.gamma_sum += gamma
        self.stats.gamma_steps += 1
        fork = matcher.fork() if matcher is not None else None
        tokens, masks, forced, qs, mask_ms = [], [mask0], [], [], []
        for j in range(gamma):
            m = masks[-1]
            q = None
            t = forced_token(m, self.stop_tokens) if m is not None else None
            is_forced = t is not None
            if not is_forced:
                if proposal is not None:
                    if j >= len(proposal):
                        break
                    t = proposal[j]
                else:
                    t, q = self.draft_model.next(ctx + tokens, m, sampler)
                    if t is None:
                        break
                forbidden = m is not None and not m[t]  # by the grammar
                if t in self.stop_tokens or forbidden:
                    break  # the draft ends here
            if fork is not None:
                if not fork.accept_token(t):
                    break
                tm = time.perf_counter()
                m = fork.next_token_mask()
                mask_ms.append((time.perf_counter() - tm) * 1000)
                if narrow is not None and (m := narrow(j + 1, tokens + [t], m)) is None:
                    break  # the position after `t` is the loop's alone: the draft ends before `t`
                masks.append(m)
            else:
                masks.append(None)
            tokens.append(t)
            forced.append(is_forced)
            qs.append(q)
        src = self.stats.source(name)
        src.seconds += time.perf_counter() - t1
        if not any(not f for f in forced):  # nothing to verify: plain fast-forward handles it
            return None
        self.request["drafts"] += 1
        return Draft(tokens, masks, forced, qs, name, mask_ms, kind, gamma)

    def _declined(self, mask0) -> None:
        """No draft at this step: remember the lookup's proposal (`_pick`'s), if its first token
        is one the step allows, as a trial for `observe`."""
        kind, proposal = self._proposed
        if not proposal:
            return
        t = proposal[0]
        if t in self.stop_tokens or (mask0 is not None and not mask0[t]):
            return
        self._probe = ("lookup", kind, t)

    def observe(self, token: int | None) -> None:
        """The target took `token` at a step that drafted nothing: a one-position trial of the
        proposal declined there (`_declined`), kept in the estimates apart from the drafts."""
        if self._probe is None:
            return
        name, kind, proposed = self._probe
        self._probe = None
        hit = token == proposed
        for key in (name, f"{name}/{kind}"):
            self.stats.source(key).probe(hit)
        self.request["probed"] += 1
        self.request["probe_hits"] += int(hit)

    def record(self, draft: Draft, agreed: int, disagreed: bool) -> None:
        """`agreed` verified (non-forced) positions were kept; `disagreed`: the run ended on a
        position where the target chose otherwise."""
        keys = [draft.source] + ([draft.key] if draft.kind else [])
        for key in keys:
            src = self.stats.source(key)
            src.drafted += agreed + int(disagreed)
            src.accepted += agreed
            src.rejections += int(disagreed)
        self.request["drafted"] += agreed + int(disagreed)
        self.request["accepted"] += agreed

    def record_step(self, draft: Draft | None, tokens: int, seconds: float, token: int | None = None,
                    verified: tuple[int, bool] | None = None) -> None:
        """A decoding step ended: `tokens` committed in `seconds` (a draft's or a plain step's;
        a plain step's `token`, the target's own: the trial of the proposal declined there,
        `observe`; a draft's `verified`: what its verification found, `record`)."""
        if draft is None:
            self.observe(token)
        elif verified is not None:
            self.record(draft, *verified)
        tally = self.steps.setdefault(draft.key if draft else "plain", StepTally())
        tally.steps += 1
        tally.tokens += tokens
        tally.gamma += draft.gamma if draft else 0
        tally.ms += seconds * 1000

    def to_json(self) -> dict:
        steps = {k: t.to_json() for k, t in sorted(self.steps.items())}
        return {**self.stats.to_json(), "request": {**self.request, "steps": steps}}
