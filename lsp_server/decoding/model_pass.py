"""One decoding pass with the local model: from the prompt's logits, masked steps under a fresh
stop policy (`loop.decode`, with speculation when on), then the offer search over its text.

A request runs one pass, and more when the offer search finds nothing and the search goes on
(`request.search_again`). A team server's engine runs its passes there instead
(`team.remote_engine.TeamPasses`), with the same `run` signature.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

from ..model.kv_cache import PromptCache
from .budget import NO_BUDGET, Budget
from .identifiers.later_lines import first_unbound_line, line_start
from .loop import ModelStepper, decode
from .offer import EMPTY, Offer, choose_offer
from .prompt import lookup_reference
from .redecode import Pass
from .speculation.draft_model import DraftModel
from .speculation.lookup import PromptLookup
from .speculation.speculator import Speculator
from .speculation.stats import SpeculationStats
from .stopping.context import Start
from .stopping.decision import StopReason
from .stopping.line_scanner import LineScanner
from .stopping.policy import StopPolicy
from .stopping.rest_of_file import offered_text

if TYPE_CHECKING:
    from .request import Request

log = logging.getLogger(__name__)


def pass_offer(r: Request, scanner: LineScanner, outcome) -> Offer:
    """The offer search over a pass's text (`offer.choose_offer`), then, when a names guide
    decoded it, the names cut (`names_cut`); its checks are counted as checks, the rest as names."""
    completion = outcome.generated[len(r.heal) :]
    offer = choose_offer(r.rest, scanner, r.held + r.heal, completion, r.depth, outcome.stop.cut,
                         later=outcome.stop.reason != StopReason.ECHO)
    if r.guide is None:
        return offer
    t, checked = time.perf_counter(), r.rest.check_ms
    offer = names_cut(r, scanner, completion, offer)
    r.times.add("names", (time.perf_counter() - t) * 1000 - (r.rest.check_ms - checked))
    return offer


def names_cut(r: Request, scanner: LineScanner, completion: bytes, offer: Offer) -> Offer:
    """`offer`, or the longest cut before the first of its later lines that reads a name bound
    nowhere it can be read and that passes the offer's checks (identifiers/later_lines.py);
    `offer` itself where no such cut passes, or the names analysis is not ready."""
    rest = r.rest
    if not offer.cut or rest.compat is None:
        return offer
    after = rest.tail.decode() + r.after[len(rest.ctx.covered) :]
    for _ in range(3):  # a cut may leave a name read above it unbound (a function's body reads late)
        written = offered_text(completion, offer.cut, not rest.ctx.infix)
        line = first_unbound_line(r.before, written.decode("utf-8", errors="replace"), after)
        if line is None:
            return offer
        shorter = choose_offer(rest, scanner, r.held + r.heal, completion, r.depth, line_start(written, line),
                               later=False)
        if not shorter.cut:
            return offer
        log.info("names: cut before line %d of %r, which reads a name bound nowhere", line, written[:60])
        offer = replace(shorter, path="earlier-stop", checks=offer.checks + shorter.checks, ms=offer.ms + shorter.ms)
    return offer


class ModelPasses:
    """Decoding passes with the local model (and the draft model, when one is loaded)."""

    def __init__(self, runtime, prompt_cache: PromptCache, scanner: LineScanner, stop_tokens: frozenset[int],
                 draft_runtime=None) -> None:
        self.runtime = runtime
        self.prompt_cache = prompt_cache
        self.scanner = scanner
        self.stop_tokens = stop_tokens
        self.spec_stats = SpeculationStats()  # α and forward costs, learnt across requests
        self.draft_model = DraftModel(draft_runtime) if draft_runtime is not None else None

    def _speculator(self, r: Request) -> Speculator | None:
        """A speculator for one decoding pass (None: speculation off)."""
        if not r.opts.speculative:
            return None
        reference = partial(lookup_reference, self.runtime.tokenizer, r.before, r.after, r.prompt)
        return Speculator(self.spec_stats, list(r.prompt.ids), self.stop_tokens, PromptLookup(reference=reference),
                          draft_model=self.draft_model)

    def run(self, r: Request, matcher, logits, past, replay=(), avoid=frozenset(), limit=None, steer=None,
            budget: Budget = NO_BUDGET, start: Start = Start.CURSOR_LINE) -> Pass:
        """One decoding pass from the prompt (after `replay`, `avoid` banned at the next step:
        redecode.py), stopped by a fresh `StopPolicy` over the request's rest of the file (`start`:
        where the steering puts the first code, `FirstLine.start`), and the offer search over its text."""
        stepper = ModelStepper(partial(self.runtime.forward, cancel=r.cancel), logits, past,
                               on_forward=self.spec_stats.record_forward)
        speculator = self._speculator(r)
        policy = StopPolicy(r.rest, self.scanner, r.held, r.heal, r.depth, start)
        try:
            outcome = decode(stepper, matcher, r.compiled.tokens, self.stop_tokens, r.sampler, policy,
                             limit or r.max_tokens, r.cancel, speculator, replay=replay, avoid=avoid,
                             steer=steer, names=r.guide, budget=budget)
        finally:
            self.prompt_cache.release(r.cache_key, stepper.past, len(r.prompt.ids))
            r.times.add("model", sum(stepper.forward_ms))
        r.times.add("mask", sum(outcome.mask_ms))
        log.debug("generated %r (healed %r), stop %s", outcome.generated, r.heal, outcome.stop)
        if outcome.stop.reason == StopReason.CANCELLED:
            return Pass(outcome, EMPTY, speculator)
        return Pass(outcome, pass_offer(r, self.scanner, outcome), speculator)
