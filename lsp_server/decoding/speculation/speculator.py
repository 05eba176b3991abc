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
α and costs measured so far (`stats`).
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
        self.request = {"drafts": 0, "drafted": 0, "accepted": 0}
        self.steps: dict[str, StepTally] = {}  # by draft key, and "plain"

    def _pick(self, ctx: list[int]) -> tuple[str, str | None, int, list[int] | None]:
        """The source (and kind) with the best expected speed-up for this position, its γ and
        the lookup's proposal; γ 0 when no source is expected to pay."""
        best = ("lookup", None, 0, None)
        best_s = 1.0
        proposal, n = self.lookup.propose_with_length(ctx, MAX_GAMMA)
        kind = f"n{n}" if n > 0 else f"n{-n}-doc"  # a match in the prompt or in the document
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

    def draft(self, matcher, mask0, accepted: list[int], budget: int, sampler) -> Draft | None:
        t0 = time.perf_counter()
        ctx = self.context + accepted
        name, kind, gamma, proposal = self._pick(ctx)
        gamma = min(gamma, budget)
        if gamma <= 0:
            self.stats.source("lookup").seconds += time.perf_counter() - t0
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
                masks.append(fork.next_token_mask())
                mask_ms.append((time.perf_counter() - tm) * 1000)
            else:
                masks.append(None)
            tokens.append(t)
            forced.append(is_forced)
            qs.append(q)
        src = self.stats.source(name)
        src.seconds += time.perf_counter() - t0
        if not any(not f for f in forced):  # nothing to verify: plain fast-forward handles it
            return None
        self.request["drafts"] += 1
        return Draft(tokens, masks, forced, qs, name, mask_ms, kind, gamma)

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
