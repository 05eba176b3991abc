"""Speculative decoding under the grammar: grammar-checked drafts from the best source.

Draft sources (each draft is checked against the grammar at every position: a token the mask
forbids ends the draft):
- grammar-forced tokens: the mask allows a single token (α = 1, c = 0); the decoder takes them
  without the model, in or out of a draft (`fast_forward`);
- prompt lookup (`PromptLookup`): continue the longest recent n-gram of the text so far from
  where it occurs earlier in the prompt or the output, else in the rest of the document (the
  text after the cursor, and before the prompt's window); code repeats names and patterns; c ≈ 0;
- a draft model sharing the tokenizer (`DraftModel`, `--draft-model DIR`).

The source and γ are chosen per position by the expected speed-up (`acceptance`), from the
α and costs measured so far (`stats`). Those estimates must stay alive when the chooser drafts
nothing, or one bad start switches speculation off for the engine's life (seen on 40
third-party cut points: after a dozen requests most steps drafted nothing, 287 plain steps to
136 drafts): where the chooser declines a lookup proposal, the target's own token at that step
is compared with the proposal's first token (`observe`: a free trial of the proposal's kind,
what a one-token draft would have verified), and the drafting cost `c` counts only the work a
draft adds (its positions' grammar masks; the lookup runs at every step either way).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..fast_forward import forced_token
from .acceptance import MAX_GAMMA, expected_speedup
from .draft_model import DraftModel
from .lookup import PromptLookup
from .stats import SpeculationStats, StepTally


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
                 lookup: PromptLookup | None = None, draft_model: DraftModel | None = None) -> None:
        self.stats = stats
        self.context = context  # prompt ids; accepted tokens are appended by the decoder
        self.stop_tokens = stop_tokens
        self.lookup = lookup or PromptLookup()
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

    def record_step(self, draft: Draft | None, tokens: int, seconds: float) -> None:
        """A decoding step ended: `tokens` committed in `seconds` (a draft's or a plain step's)."""
        tally = self.steps.setdefault(draft.key if draft else "plain", StepTally())
        tally.steps += 1
        tally.tokens += tokens
        tally.gamma += draft.gamma if draft else 0
        tally.ms += seconds * 1000

    def to_json(self) -> dict:
        steps = {k: t.to_json() for k, t in sorted(self.steps.items())}
        return {**self.stats.to_json(), "request": {**self.request, "steps": steps}}
