"""One completion request, top to bottom (`complete`): a document split at the cursor in, the
answer that keeps the file valid out.

    prepare         the prompt window (with token healing), the grammar matcher after the text
                    before the cursor, the rest of the file every step asks about, the names guide
    steer           what the rest of the file lets the first line be, and the steering of its first
                    tokens (`HeaderStarts.steering`)
    prefill         the prompt through the model (what the document's KV cache does not hold)
    decode          one pass: masked steps under the stop policy, then the offer search over its
                    text (`EngineParts.passes`: model_pass.ModelPasses, or a team server's)
    search again    nothing offered: passes from the step where validity was lost (`Tries`; where
                    the pass looped on a repeated parameter or keyword, from the repetition)
    past a refusal  CPython's compiler over the file with the answer (`compiler_gate`, below);
                    where it refuses a token the answer wrote, passes from that token's step
    assemble        the answer (text, replace range, stop reason, offer path) and its figures

Each step reads the one `Request` value `prepare` made; the request's time goes to its parts
(`Request.spent`, `RequestTimes`). The caller (`CompletionEngine.complete`) holds the engine's
lock, and serves typed-through answers before it gets here (shown.py).

The compiler gate, the last check of an answer: CPython's compiler, where the grammar cannot see.

The grammar and the edit check decide every stop and every offer, so an offered answer parses.
CPython's compiler refuses a few files that parse: checks made after the parse, in the compiler
and the symbol table (a keyword argument given twice, `yield from` or `return value` in an
`async def` generator, `nonlocal` of a name no enclosing function has, a `*` target twice). No
grammar holds them (they need names compared across a statement, or the kind of the enclosing
function), so the file with the answer is compiled once, before it is offered (the project's one
oracle, `grammar_tools.parsing.cpython_check`; ~1 ms for 400 lines, ~10 ms for 3,500), and an
answer the compiler refuses *where it was written* is not offered. Where the refusal points at a
byte the answer wrote (the second `key` of `f(key=1, key=2)`), the token that wrote it is where
validity was lost, as the grammar's loss is for `search again`: passes from its step with it
banned (`past_refusal`), the first answer the compiler accepts offered (a small model's loop of
`justify="right", justify="left", ...` becomes its next-best argument, where nothing was offered).

Which refusals: only those made after the file parsed (`refused_lines(..., after_parse=True)`).
What the parser refuses is the grammar's business, per target version, and this interpreter may
be older than the version a document targets (a 3.12 f-string is no error there): a file this
interpreter cannot parse is left to the grammar's verdict. Where: the refusal's lines must touch
the lines the answer wrote, or the line after them (a keyword argument the answer repeats from
the line below is reported there), or anywhere when the file *without* the answer compiles:
then the refusal can only be the answer's (a keyword argument it repeats from three lines below
is reported three lines below). Otherwise a refusal elsewhere is the file's own (`return` outside
a function further down) and refuses nothing here.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace

from grammar_tools.lexing.lexer_automaton import START, LexError
from grammar_tools.parsing.cpython_check import Refused, refused_lines
from grammar_tools.parsing.incremental import ParseError
from grammar_tools.parsing.versions import format_version
from mask_store import canonical as canonical_tokenization
from mask_store.matcher import GrammarMatcher, MaskCounts

from ..model.kv_cache import PrefillCancelled
from ..options import EngineOptions
from .header_steering import FREE, FirstLine, Fit
from .identifiers.guide import IdentifierGuide
from .identifiers.modes import IdentifierMode
from .loop import DecodeOutcome
from .model_pass import EMPTY, Pass, Tries, ended_where_valid, restart_step
from .parts import EngineParts, plain_window_key, request_document
from .prompt import Prompt
from .repeated_names import repeated_name_at
from .results import RequestTimes, Cancel, CompletionRequest, CompletionResult, Figures, nothing
from .sampling import Sampler
from .stopping.policy import Stop, StopReason
from .stopping.rest_of_file import RestOfFile

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Request:
    """What every step of one request reads (made once by `prepare`)."""

    req: CompletionRequest
    opts: EngineOptions
    before: str  # the document split at the cursor
    after: str
    compiled: object  # the compiled grammar of the document's target version
    prompt: Prompt  # its ids, the healed bytes backed off
    heal: bytes  # the prompt's healed bytes, which the first tokens spell again
    cache_key: str  # the key of the prompt's KV cache (`parts.request_window`)
    matcher: GrammarMatcher | None  # None: unconstrained
    recovery: object | None  # how a syntax error before the cursor was skipped
    held: bytes  # the open lexeme before the cursor (healed bytes left out)
    depth: int  # bracket depth where `held` starts
    rest: RestOfFile  # the text after the cursor, as every step asks about it
    sampler: Sampler
    max_tokens: int
    cancel: Cancel
    guide: IdentifierGuide | None = None  # names that exist (None: off or not ready)
    times: RequestTimes = field(default_factory=RequestTimes)  # where the request's time goes (`spent`)

    @property
    def line_head(self) -> bytes:
        """The cursor's line before `held` (what the stop policy reads repeated names from)."""
        before = self.before.encode()
        held_start = len(before) - len(self.heal) - len(self.held)
        return before[before.rfind(b"\n", 0, held_start) + 1 : held_start]

    def spent(self, part: str, ms: float) -> None:
        """`ms` of the request's time went to `part` (results.PARTS): every step's time goes
        through here."""
        self.times.add(part, ms)


def complete(parts: EngineParts, req: CompletionRequest, opts: EngineOptions, cancel: Cancel,
             times: RequestTimes) -> tuple[CompletionResult, Request | None]:
    """The answer at the request's cursor, and the request it was made for (its document split
    at the cursor, the rest of the file; None: the request ended before reading the rest of the
    file); `times` gets the parts of its time but the lock's."""
    t0 = time.perf_counter()
    r = prepare(parts, req, opts, cancel, times)
    if isinstance(r, StopReason):
        times.add("setup", (time.perf_counter() - t0) * 1000)
        return nothing(req, r, opts), None
    shape, steering = steer(parts, r)
    if shape.fit is Fit.NOTHING:
        log.info("no completion: nothing fits the rest of the file at the cursor")
        setup_done(r, t0, r.rest.check_ms)
        return nothing(req, StopReason.NO_CONTINUATION, opts), r
    checked = setup_done(r, t0, r.rest.check_ms)
    try:
        logits, past, reused = prefill(parts, r)
    except PrefillCancelled:
        return nothing(req, StopReason.CANCELLED, opts), None
    prompt_ms = (time.perf_counter() - t0) * 1000
    t1 = time.perf_counter()
    chosen = parts.passes.run(r, r.matcher, logits, past, replay=req.resume, budget=req.budget, steer=steering,
                              start=shape.start)
    searched = worth_searching(r, chosen)
    if searched:
        chosen = search_again(parts, r, chosen, steering, shape)
    chosen, refusal = past_refusal(parts, r, chosen, steering, shape)
    decode_ms = (time.perf_counter() - t1) * 1000
    checks = r.rest.check_ms
    r.spent("checks", checks - checked)
    r.spent("names", r.guide.stats["ms"] if r.guide else 0.0)
    return assemble(r, chosen, refusal, reused, prompt_ms, decode_ms, checks, budget_cut(r, chosen, searched)), r


# ---------------------------------------------------------------------------- the steps


def prepare(parts: EngineParts, req: CompletionRequest, opts: EngineOptions, cancel: Cancel,
            times: RequestTimes) -> Request | StopReason:
    """The prompt (its last token backed off when the grammar can re-create it: healing), the
    grammar matcher after the text before the cursor (constrained), the rest of the file the
    completion must respect and the names guide; a StopReason when the text before the cursor
    does not parse."""
    before, after = req.text[: req.cursor], req.text[req.cursor :]
    compiled, prompt, cache_key, parser = request_document(parts, req, before, after, opts)
    heal = prompt.healed
    before_b = before.encode()
    mode = req.mode or opts.mode
    sampler = Sampler(opts.temperature, opts.top_p, opts.seed)
    max_tokens = req.max_tokens or opts.max_tokens
    if not opts.constrained:
        held = lexeme_before(compiled, before_b)
        rest = RestOfFile.build(before, after, mode, parts.scanner, held, heal, 0)
        return Request(req, opts, before, after, compiled, prompt, heal, cache_key, None, None, held, 0, rest, sampler,
                       max_tokens, cancel, times=times)
    try:
        matcher = grammar_matcher(compiled, before_b, prompt, parser)
    except (ParseError, LexError) as e:
        log.info("no completion: the text before the cursor does not parse (%s)", e)
        return StopReason.NO_CONTINUATION
    st = matcher.prefix_state
    recovery = st.recovered
    parsed_before = recovery.rewrite(before_b) if recovery else before_b
    held = before_b[st.lexeme_start : len(before_b) - len(heal)]
    depth = st.configs[0].depth if st.configs else 0
    try:
        rest = RestOfFile.build(before, after, mode, parts.scanner, held, heal, depth, parser, parsed_before)
    except (ParseError, LexError) as e:
        log.info("no completion: the text before the cursor does not parse with its typed part (%s)", e)
        return StopReason.NO_CONTINUATION
    guide = names_guide(parts, req, before.count("\n"), opts, compiled, before_b[: len(before_b) - len(heal)])
    return Request(req, opts, before, after, compiled, prompt, heal, cache_key, matcher, recovery, held, depth, rest,
                   sampler, max_tokens, cancel, guide, times)


def steer(parts: EngineParts, r: Request) -> tuple[FirstLine, object]:
    """What the rest of the file lets the first line be (where its first code goes, or nothing
    fits), and the steering of its first tokens (None: free; `HeaderStarts.steering`)."""
    if r.matcher is None:
        return FREE, None
    return parts.header_starts.steering(r.rest, r.before, r.heal, parts.tokenizer.encode)


def setup_done(r: Request, t0: float, checks: float) -> float:
    """The request's set-up took from `t0` till now: its whole-file checks so far (`checks` ms:
    their set-up, the first line's steering) counted as checks, the rest as set-up; `checks`."""
    r.spent("checks", checks)
    r.spent("setup", (time.perf_counter() - t0) * 1000 - checks)
    return checks


def prefill(parts: EngineParts, r: Request):
    """The request's prompt through the model (what the KV cache does not hold): (logits,
    past, tokens reused), in short chunks a keystroke stops between for work ahead
    (`CompletionRequest.ahead`); raises PrefillCancelled."""
    t, cpu = time.perf_counter(), time.thread_time()
    try:
        return parts.prompt_cache.prefill(r.cache_key, r.prompt.ids, r.cancel, r.opts.cache_memory_mb,
                                          ahead=r.req.ahead)
    finally:
        r.spent("prefill", (time.perf_counter() - t) * 1000)
        r.times.model_ran((time.thread_time() - cpu) * 1000)


def worth_searching(r: Request, first: Pass) -> bool:
    """Search again when the first pass offered nothing and the model did not mean nothing: it
    was not cancelled, did not end where the file is valid without an answer, and did not echo
    the existing text (at a line start an echo is the existing line written again, not an
    answer: searched past)."""
    stop = first.outcome.stop.reason
    echoed_in_place = stop is StopReason.ECHO and not r.rest.inserts_lines
    offered_nothing = first.offer.path == "empty" and r.matcher is not None
    return (offered_nothing and stop is not StopReason.CANCELLED and not echoed_in_place
            and not ended_where_valid(first, len(r.heal), r.rest))


def search_again(parts: EngineParts, r: Request, first: Pass, steering, shape: FirstLine) -> Pass:
    """Search, don't give up (`model_pass.Tries`): passes from the step where validity was lost,
    steered as the first pass was; the first that offers something, else `first`. No new pass
    once the request's budget has run out (a pass started is finished)."""
    vocab = parts.tokenizer.vocab
    repeat = repeated_name_step(r, first)
    if repeat is not None:  # the pass looped on a name CPython refuses to see twice: from there
        tries = Tries.at(first.outcome.tokens, repeat, r.compiled.tokens, vocab.by_bytes, r.max_tokens)
    else:
        tries = Tries.after(first, r.compiled.tokens, vocab.by_bytes, len(r.heal), parts.stop_tokens, r.max_tokens,
                            steered=steering is not None)
    found = search_from(parts, r, tries, steering, shape, follow_repeats=True)
    return first if found is None else found


def search_from(parts: EngineParts, r: Request, tries: Tries | None, steering, shape: FirstLine,
                accepts=lambda p: True, follow_repeats: bool = False) -> Pass | None:
    """The search's passes (`Tries`) while they and the request's budget last: the first that
    offers something `accepts` takes, as a redecode; None. `follow_repeats`: a pass that wrote a
    name a second time past the step moves the search there (`repeated_name_step`)."""
    vocab = parts.tokenizer.vocab
    while tries is not None and tries.open and not stopped(r):
        p = redecode_pass(parts, r, tries, steering, shape)
        if p.offer.cut > 0 and accepts(p):
            return replace(p, offer=replace(p.offer, path="redecode"))
        tries = tries.then(p, r.compiled.tokens, vocab.by_bytes, repeated_name_step(r, p) if follow_repeats else None)
    return None


def past_refusal(parts: EngineParts, r: Request, chosen: Pass, steering, shape: FirstLine
                 ) -> tuple[Pass, CompilerRefusal | None]:
    """The pass whose answer is offered, and CPython's refusal of it where it was written (then
    nothing is offered: `compiler_gate`). Where the compiler points at a token the answer wrote
    (`f(key=1, key=2)`'s second `key`, `yield from` in an `async def`), that token is where
    validity was lost: passes from its step with it banned, as `search_again` searches (`Tries`),
    and the first whose answer the compiler accepts is offered instead."""
    refusal = compiler_gate(r, chosen)
    if refusal is None or refusal.at is None or refusal.at >= chosen.offer.cut:
        return chosen, refusal
    vocab = parts.tokenizer.vocab
    step = restart_step(chosen.outcome.tokens, r.compiled.tokens, len(r.heal) + refusal.at)
    tries = Tries.at(chosen.outcome.tokens, step, r.compiled.tokens, vocab.by_bytes, r.max_tokens)
    found = search_from(parts, r, tries, steering, shape, accepts=lambda p: compiler_gate(r, p) is None)
    if found is None:
        return chosen, refusal
    log.info("the compiler's refusal searched past at step %d", step)
    return found, None


def repeated_name_step(r: Request, p: Pass) -> int | None:
    """The step of pass p that wrote a name CPython refuses to see twice (a parameter of the same
    `def`, a keyword of the same call: `repeated_names`), read from the cursor's line; None where
    it wrote none."""
    at = repeated_name_at(r.line_head + r.held, p.outcome.generated, len(r.heal))  # as the stop policy reads it
    return None if at is None else restart_step(p.outcome.tokens, r.compiled.tokens, at)


def stopped(r: Request) -> bool:
    """The request was cancelled, or its latency budget has run out."""
    return r.cancel() or r.req.budget.expired()


def redecode_pass(parts: EngineParts, r: Request, tries: Tries, steering, shape: FirstLine) -> Pass:
    """A re-decoding pass: the prompt again, a fresh matcher counting into the request's
    counts, the same rest of the file (its set-up and verdicts are the request's)."""
    try:
        logits, past, _ = prefill(parts, r)
    except PrefillCancelled:
        return Pass(DecodeOutcome([], b"", Stop(0, StopReason.CANCELLED)), EMPTY)
    t = time.perf_counter()
    matcher = grammar_matcher(r.compiled, r.before.encode(), r.prompt,
                              parts.documents.parser(r.req.document, r.compiled), r.matcher.counts)
    r.spent("setup", (time.perf_counter() - t) * 1000)
    return parts.passes.run(r, matcher, logits, past, tries.replay, tries.avoid, tries.limit, steering,
                            start=shape.start)


def budget_cut(r: Request, chosen: Pass, searched: bool) -> bool:
    """The budget cut the answer, or stopped the search behind an empty one."""
    return chosen.outcome.stop.reason is StopReason.BUDGET or (
        searched and chosen.offer.path == "empty" and r.req.budget.expired())


def answer_of(r: Request, p: Pass) -> tuple[str, bool, int]:
    """Pass p's answer: its text (empty for an item that changes nothing: never offered), whether
    it changes nothing, and where its replace range ends."""
    body, no_op = r.rest.answer(p.outcome.generated[len(r.heal) :], p.offer.cut)
    covered = r.rest.ctx.covered
    return body, no_op, r.req.cursor + len(covered) if body or not covered else r.req.cursor


def assemble(r: Request, chosen: Pass, refusal: CompilerRefusal | None, reused: int, prompt_ms: float,
             decode_ms: float, check_ms: float, cut: bool) -> CompletionResult:
    """The answer of the chosen pass: the text offered (unless CPython's compiler refuses it:
    `refusal`, `compiler_gate`), its replace range and stop, and the request's figures
    (`check_ms`: the whole-file checks' time, `RestOfFile.check_ms`)."""
    req = r.req
    outcome, offer = chosen.outcome, chosen.offer
    body, no_op, end = answer_of(r, chosen)
    log.debug("offered %d bytes (%s; policy stop %s at %d, %d checks in %.1f ms)", len(body.encode()),
              offer.path, outcome.stop.reason, outcome.stop.cut, offer.checks, offer.ms)
    stop = StopReason.ECHO if no_op else outcome.stop.reason
    if refusal is not None:
        log.info("not offered: the compiler refuses %r: %s", body[:60], refusal.text)
        body, end, stop = "", req.cursor, StopReason.COMPILER
    guide = r.guide
    figures = Figures(
        tokens_generated=outcome.sampled,
        tokens_forced=outcome.forced,
        tokens_healed=len(r.prompt.healed_ids),
        prompt_tokens=len(r.prompt.ids),
        prompt_reused=reused,
        prompt_ms=round(prompt_ms, 2),
        decode_ms=round(decode_ms, 2),
        mask_ms=[round(m, 4) for m in outcome.mask_ms],
        speculation=chosen.speculator.to_json() if chosen.speculator else None,
        canonical=r.matcher is not None and r.matcher.canonical.active,
        canonical_fallbacks=r.matcher.counts.canonical_fallbacks if r.matcher else 0,
        check_ms=check_ms,
        names_ready=guide is not None,
        names_shaped=guide.stats["shaped"] if guide else 0,
        names_masked=guide.stats["masked"] if guide else 0,
        names_ms=round(guide.stats["ms"], 2) if guide else 0.0,
        gate_ms=round(r.times.ms["gate"], 2),
    )
    return CompletionResult(
        text=body,
        start=req.cursor,
        end=end,
        stop_reason=stop,
        mode=r.rest.ctx.mode,
        constrained=r.opts.constrained,
        offer_path=offer.path,
        python_version=format_version(r.compiled.recognizer.python_version),
        recovery=str(r.recovery.restart_line) if r.recovery else None,
        budget_cut=cut,
        short_window=r.cache_key != req.document,
        without_block=r.cache_key == plain_window_key(req.document),
        token_ids=list(outcome.tokens),
        figures=figures,
    )


def compiler_gate(r: Request, p: Pass) -> CompilerRefusal | None:
    """CPython's refusal of the file with pass p's answer where the answer wrote it (constrained
    mode: `refusal_where_written`); its time is the request's `gate` part."""
    if not r.opts.constrained:
        return None
    body, _, end = answer_of(r, p)
    if not body:
        return None
    t = time.perf_counter()
    refusal = refusal_where_written(r.before, body, r.after[end - r.req.cursor :])
    r.spent("gate", (time.perf_counter() - t) * 1000)
    return refusal


# ---------------------------------------------------------------------------- what prepare uses


def names_guide(parts: EngineParts, req: CompletionRequest, line: int, opts: EngineOptions, compiled,
                before: bytes) -> IdentifierGuide | None:
    """The names guide of this request (its cursor on `line`) when its analysis is ready (else
    None, and the analysis is started for the requests to come: the request never waits for it)."""
    mode = IdentifierMode(opts.identifiers)
    if mode is IdentifierMode.OFF or not parts.guides_names:
        return None
    scope = parts.names.ready_or_started(req.document, req.text, line)
    if scope is None:
        return None
    return IdentifierGuide(mode, scope, parts.identifier_tokens, compiled, before)


def grammar_matcher(compiled, before: bytes, prompt: Prompt, parser, counts: MaskCounts | None = None) -> GrammarMatcher:
    """The grammar matcher after the text before the cursor, the prompt's healed bytes still to
    re-create (raises ParseError/LexError when that text does not parse), in canonical
    tokenization's state after the prompt's tokens kept (OFF where the prompt was not built for it:
    `Prompt.canonical`)."""
    heal = prompt.healed
    pairs = compiled.canonical
    canonical = (pairs.state_after(prompt.prefix, canonical_tokenization.START)
                 if prompt.canonical and pairs is not None else canonical_tokenization.OFF)
    return GrammarMatcher.from_prefix(compiled, before[: len(before) - len(heal)], heal=heal, parser=parser,
                                      canonical=canonical, counts=counts)


def lexeme_before(compiled, before: bytes) -> bytes:
    """Unconstrained mode: the open lexeme at the cursor for the line scanner (no parse)."""
    start = max(before.rfind(b"\n"), 0)
    try:
        _, _, s = compiled.lexer.lex(before, START, start)
        return before[s:]
    except LexError:
        return b""


# ---------------------------------------------------------------------------- the compiler gate


@dataclass(frozen=True)
class CompilerRefusal:
    """CPython's refusal of a file with an answer, where the answer wrote it: its message and
    line, and the answer's byte it points at (None: outside the answer: a keyword argument the
    answer repeats from the line below is reported there)."""

    text: str
    at: int | None


def refusal_where_written(before: str, answer: str, after: str) -> CompilerRefusal | None:
    """CPython's refusal of `before + answer + after` on the lines the answer wrote or the line
    after them, or anywhere when `before + after` compiles; None when the file compiles or the
    refusal is the file's own (module docstring)."""
    refused = refused_lines(before + answer + after, "<completion>", after_parse=True)
    if refused is None:
        return None
    first = before.count("\n") + 1
    last = first + answer.count("\n") + 1
    where_written = refused.line <= last and refused.end_line >= first  # the answer's lines or the line after them
    if not where_written and refused_lines(before + after, "<document>") is not None:
        return None
    return CompilerRefusal(f"{refused.message} (line {refused.line})", _answer_byte(before, answer, refused))


def _answer_byte(before: str, answer: str, refused: Refused) -> int | None:
    """The byte of `answer` (written after `before`) the refusal points at; None outside it."""
    if refused.line < 1 or refused.column < 0:
        return None
    lines = (before + answer).encode().split(b"\n")
    if refused.line > len(lines):
        return None
    at = sum(len(line) + 1 for line in lines[: refused.line - 1]) + refused.column - len(before.encode())
    return at if 0 <= at < len(answer.encode()) else None
