"""One decoding pass with the local model: from the prompt's logits, masked steps under a fresh
stop policy (`loop.decode`, with speculation when on), then the offer search over its text
(`choose_offer`); and what the passes after it replay and avoid when nothing was offered
(`Tries`: search, don't give up).

A request runs one pass, and more when the offer search finds nothing and the search goes on
(`request.search_again`). A team server's engine runs its passes there instead
(`team.remote_engine.TeamPasses`), with the same `run` signature. `r` is the request's
`request.Request` (not imported: request.py imports this module).

The offer search. Checked before offered: the text a completion offers is the one the stop policy chose only if
the document with it applied passes the edit check; otherwise the search for one that does, in
the model's own order, within a budget of checks:

1. `model`: the policy's stop, as offered (trailing blanks stripped), passes;
2. `earlier-stop`: the longest cut of the generated text before it that passes (line ends,
   lexeme boundaries, and inside its strings before a newline or the closing quotes);
3. `later-stop`: in what the model generated past the stop, the nearest line end after it that
   passes, else the longest cut of the line that follows the stop;
4. `redecode`: (the engine, `request.search_again` over `Tries`) the text of a new decoding pass from the step where
   validity was lost, with the model's next-best tokens there, searched the same way;
5. `empty`: nothing passes (or nothing was generated).

(Within a pass, the next-best tokens at a step are also tried: the stop policy rejects a token
that ends a line where the file can't go on, and the loop samples another.)

Search, don't give up: when no cut of what the model wrote keeps the file valid (the offer
search found none), decode again from the step where validity was lost with the
model's next-best tokens there, before answering nothing.

The step is the one where the completion's first byte was chosen (the tokens before it re-create
the healed text): no cut of the text passed the check, not even of its first line, so the
completion went wrong with its first token (a `return` where the lines after the cursor are a
block's body and need its header, code where they are a docstring's text). Each new pass takes
the tokens before that step again, and there the best token the earlier passes did not take (nor
a shorter spelling of its start: `retur` is not another choice than `return`), in the model's
own order; it then decodes as usual, under a stop policy that reads the rest of the
file: a line may end only where the file can go on (a block header the deeper lines need, a
closing bracket, a dedent), so the following lines steer its last steps. Its text goes through
the offer search like the first pass's; the first pass that offers something is the answer
(`request.search_again`, over `Tries`). Where the following lines can only be a block's body,
the passes start with a token that begins a header the check says fits there
(`header_steering.py`), in the model's order.

Bounded: at most `TRIES` passes, and all of them together generate at most the request's token
limit (the search at most doubles a request's decoding work, and only for answers that would
otherwise be empty); a cancellation ends it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial

from ..model.kv_cache import PromptCache
from .identifiers.later_lines import first_unbound_line, line_start
from .loop import DecodeOutcome, ModelStepper, decode
from .prompt import RecentEncodings, lookup_reference
from .budget import NO_BUDGET, Budget
from .speculation.draft_model import DraftModel
from .speculation.speculator import SpeculationStats, Speculator
from .stopping.policy import StopPolicy, StopReason
from .stopping.rest_of_file import LineScanner, RestOfFile, Start, offered_text

log = logging.getLogger(__name__)
# ---------------------------------------------------------------------------- the offer search

PATHS = ("model", "earlier-stop", "later-stop", "redecode", "empty", "unchecked")
MAX_CHECKS = 64  # cuts tried at most per request
BUDGET_MS = 40.0  # and for at most this long (the first check always runs)


@dataclass(frozen=True)
class Offer:
    cut: int  # bytes of the completion offered (0: none)
    path: str  # which of PATHS gave it
    checks: int  # cuts checked
    ms: float  # time spent checking


EMPTY = Offer(0, "empty", 0, 0.0)


def _cuts(scanner: LineScanner, held: bytes, completion: bytes, depth: int) -> tuple[list[int], list[int]]:
    """The candidate cuts of `completion`: its line ends (newlines, inside brackets too), and
    all of them with its lexeme boundaries, the points inside its strings where the file's text
    may close them (`LineScanner.string_cuts`) and its end, each sorted."""
    scan = scanner.line_ends(held + completion, depth)
    k = len(held)
    ends: set[int] = set()
    cuts = {len(completion)}
    if scan is not None:
        lines, bounds = scan
        ends = {e.cut - k for e in lines if e.cut > k}
        cuts |= ends | {b - k for b, _ in bounds if b > k}
        cuts |= {c - k for c in scanner.string_cuts(held + completion) if c > k}
    ok = range(1, len(completion) + 1)
    return sorted(c for c in ends if c in ok), sorted(c for c in cuts if c in ok)


def choose_offer(rest: RestOfFile, scanner: LineScanner, held: bytes, completion: bytes,
                 depth: int, cut: int, later: bool = True) -> Offer:
    """The cut of `completion` (the generated bytes after the cursor; `held` the open lexeme
    before it, at bracket `depth`) to offer, the policy having chosen `cut`; `later`: whether
    cuts past it may be offered (not where the text past it repeats the file, an echo stop, nor
    where it writes a name a second time, a repeated-name stop).
    Each candidate is asked of the request's `RestOfFile` (the file stays valid, the existing
    text intact)."""
    if rest.compat is None:
        return Offer(cut, "unchecked" if cut else "empty", 0, 0.0)
    strip = not rest.ctx.infix
    t0 = time.perf_counter()
    checks = 0
    first = offered_text(completion, cut, strip)
    if first:
        checks += 1
        if rest.keeps_valid(first):
            return Offer(cut, "model", checks, (time.perf_counter() - t0) * 1000)
    ends, cuts = _cuts(scanner, held, completion, depth)
    order = [(c, "earlier-stop") for c in reversed(cuts) if c < cut]
    # later: the next line ends first (where a completion stops naturally), then the longest
    # cut of the line after the stop
    if later:
        order += [(c, "later-stop") for c in ends if c > cut]
        line_end = min((c for c in ends if c > cut), default=len(completion))
        order += [(c, "later-stop") for c in reversed(cuts) if cut < c < line_end]
    seen = {first}
    for c, path in order:
        text = offered_text(completion, c, strip)
        if not text or text in seen:
            continue
        if checks >= MAX_CHECKS or (time.perf_counter() - t0) * 1000 > BUDGET_MS:
            break
        seen.add(text)
        checks += 1
        if rest.keeps_valid(text):
            return Offer(c, path, checks, (time.perf_counter() - t0) * 1000)
    return Offer(0, "empty", checks, (time.perf_counter() - t0) * 1000)


# ---------------------------------------------------------------------------- search again

TRIES = 3  # next-best tokens tried at the step where validity was lost


@dataclass(frozen=True)
class Pass:
    """One decoding pass and what the offer search made of it."""

    outcome: DecodeOutcome
    offer: Offer
    speculator: object | None = None  # the pass's Speculator, when speculation ran (its statistics)


def restart_step(tokens: Sequence[int], token_bytes: Sequence[bytes], healed: int) -> int:
    """The index in `tokens` of the step whose token wrote byte `healed` of their text
    (len(tokens) if none did): for the `healed` bytes, the step that chose the completion's
    first byte (the tokens before it re-create them); for a byte a refusal points at, the step
    that wrote it (`request.past_refusal`)."""
    n = 0
    for i, t in enumerate(tokens):
        n += len(token_bytes[t])
        if n > healed:
            return i
    return len(tokens)


def code_step(tokens: Sequence[int], token_bytes: Sequence[bytes], healed: int) -> int:
    """The index in `tokens` of the step that chose the completion's first code (its first
    byte past the `healed` ones that is not blank; len(tokens) if none did)."""
    written = b""
    for i, t in enumerate(tokens):
        written += token_bytes[t]
        if written[healed:].strip():
            return i
    return len(tokens)


def same_start(token: bytes, by_bytes: Mapping[bytes, int]) -> set[int]:
    """The tokens spelling `token`'s bytes or a shorter start of them with code in it (`retur`
    for `return`): another spelling of the same text is not another choice."""
    out = set()
    for k in range(1, len(token) + 1):
        t = by_bytes.get(token[:k])
        if t is not None and token[:k].strip():
            out.add(t)
    return out


def ended_where_valid(first: Pass, healed: int, rest: RestOfFile) -> bool:
    """Whether the model's own answer was "nothing here": its first pass ended the line (a
    newline or its end) before writing any code past the `healed` bytes, and the file is valid
    without a completion (the end of a complete line, as after accepting a suggestion). That
    answer fits the file, so there is nothing to search past: forcing its next-best start
    there writes what the model did not want (a trailing comment, a `+ ...` on a done line)."""
    text = first.outcome.generated[healed:]
    return not text.split(b"\n", 1)[0].strip() and rest.compat is not None and rest.keeps_valid(b"")


@dataclass(frozen=True)
class Tries:
    """Where the search stands: the next pass replays `replay` (the tokens before the `step`
    where validity was lost) and bans `avoid` there; all passes together may still generate
    `budget` tokens, in at most `left` passes (`request.search_again` runs them)."""

    step: int
    replay: tuple[int, ...]
    avoid: frozenset[int]
    budget: int
    left: int

    @classmethod
    def after(cls, first: Pass, token_bytes: Sequence[bytes], by_bytes: Mapping[bytes, int], healed: int,
              stop_tokens: frozenset[int], max_tokens: int, steered: bool = False) -> Tries:
        """The first re-decoding pass after `first`. `steered`: the passes are steered as the
        first was (`header_steering.first_line`): its newline and indentation led to an
        indentation that fits, so the search restarts at its first code (the first choice that
        wrote more than blanks is the one banned)."""
        tokens = first.outcome.tokens
        step = (code_step if steered else restart_step)(tokens, token_bytes, healed)
        if step < len(tokens):
            return cls.at(tokens, step, token_bytes, by_bytes, max_tokens)
        # it ended there (nothing past the healed text): its end is banned
        return cls(step, tuple(tokens[:step]), frozenset(stop_tokens), max_tokens, TRIES)

    @classmethod
    def at(cls, tokens: Sequence[int], step: int, token_bytes: Sequence[bytes], by_bytes: Mapping[bytes, int],
           max_tokens: int) -> Tries:
        """The first pass that replays `tokens` before `step` and bans the model's choice there
        (and its shorter spellings)."""
        avoid = frozenset(same_start(token_bytes[tokens[step]], by_bytes) | {tokens[step]})
        return cls(step, tuple(tokens[:step]), avoid, max_tokens, TRIES)

    @property
    def open(self) -> bool:
        """A pass and tokens left for it."""
        return self.left > 0 and self.budget > 0

    @property
    def limit(self) -> int:
        """The next pass's token limit (the replayed tokens included)."""
        return len(self.replay) + self.budget

    def then(self, p: Pass, token_bytes: Sequence[bytes], by_bytes: Mapping[bytes, int],
             repeat: int | None = None) -> Tries | None:
        """After pass `p`, which offered nothing: the next pass, its choice at the step banned
        too, or where `p` wrote a name a second time past the step (`repeat`, the step that wrote
        it: `request.repeated_name_step`), from there with that choice banned; None when the
        search is over (cancelled, no other token at the step)."""
        tokens = p.outcome.tokens
        budget = self.budget - (len(tokens) - len(self.replay))
        if p.outcome.stop.reason == StopReason.CANCELLED or len(tokens) <= self.step:
            return None
        if repeat is not None and self.step < repeat < len(tokens):
            return replace(Tries.at(tokens, repeat, token_bytes, by_bytes, budget), left=self.left - 1)
        t = tokens[self.step]
        return Tries(self.step, self.replay, self.avoid | same_start(token_bytes[t], by_bytes) | {t}, budget,
                     self.left - 1)


# ---------------------------------------------------------------------------- one pass



def pass_offer(r, scanner: LineScanner, outcome) -> Offer:
    """The offer search over a pass's text (`choose_offer`), then, when a names guide
    decoded it, the names cut (`names_cut`); its checks are counted as checks, the rest as names."""
    completion = outcome.generated[len(r.heal) :]
    offer = choose_offer(r.rest, scanner, r.held + r.heal, completion, r.depth, outcome.stop.cut,
                         later=outcome.stop.reason not in (StopReason.ECHO, StopReason.REPEATED))
    if r.guide is None:
        return offer
    t, checked = time.perf_counter(), r.rest.check_ms
    offer = names_cut(r, scanner, completion, offer)
    r.spent("names", (time.perf_counter() - t) * 1000 - (r.rest.check_ms - checked))
    return offer


def names_cut(r, scanner: LineScanner, completion: bytes, offer: Offer) -> Offer:
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
        self.reference_encodings = RecentEncodings(runtime.tokenizer)  # the speculator's reference texts
        self.draft_model = DraftModel(draft_runtime) if draft_runtime is not None else None

    def _speculator(self, r) -> Speculator | None:
        """A speculator for one decoding pass (None: speculation off)."""
        if not r.opts.speculative:
            return None
        reference = partial(lookup_reference, self.reference_encodings, r.before, r.after, r.prompt)
        return Speculator(self.spec_stats, list(r.prompt.ids), self.stop_tokens, draft_model=self.draft_model,
                          reference=reference)

    def run(self, r, matcher, logits, past, replay=(), avoid=frozenset(), limit=None, steer=None,
            budget: Budget = NO_BUDGET, start: Start = Start.CURSOR_LINE) -> Pass:
        """One decoding pass from the prompt (after `replay`, `avoid` banned at the next step:
        `Tries`), stopped by a fresh `StopPolicy` over the request's rest of the file (`start`:
        where the steering puts the first code, `FirstLine.start`), and the offer search over its text."""
        stepper = ModelStepper(partial(self.runtime.forward, cancel=r.cancel), logits, past,
                               on_forward=self.spec_stats.record_forward)
        speculator = self._speculator(r)
        policy = StopPolicy(r.rest, self.scanner, r.held, r.heal, r.depth, start, r.line_head)
        try:
            outcome = decode(stepper, matcher, r.compiled.tokens, self.stop_tokens, r.sampler, policy,
                             limit or r.max_tokens, r.cancel, speculator, replay=replay, avoid=avoid,
                             steer=steer, names=r.guide, budget=budget)
        finally:
            self.prompt_cache.release(r.cache_key, stepper.past, len(r.prompt.ids))
            r.spent("model", sum(stepper.forward_ms))
            r.times.model_ran(stepper.forward_cpu_ms)
        r.spent("mask", sum(outcome.mask_ms))
        log.debug("generated %r (healed %r), stop %s", outcome.generated, r.heal, outcome.stop)
        if outcome.stop.reason == StopReason.CANCELLED:
            return Pass(outcome, EMPTY, speculator)
        return Pass(outcome, pass_offer(r, self.scanner, outcome), speculator)
