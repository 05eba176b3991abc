"""The completion engine: a document and a cursor in, the completion that keeps the file valid out.

    engine = CompletionEngine.load(EngineOptions(model="default"))
    result = engine.complete(CompletionRequest(text, cursor=120, document="file:///a.py"))
    result.text, result.start, result.end   # insert `text` in place of text[start:end]

The engine reads offsets into the request's text (code points, "\n" line ends); LSP's (line,
UTF-16 character) positions are converted at the server's edge (`server/suggester.py`), or by
`CompletionRequest.at` for callers that hold one.

`complete` is synchronous and thread-safe (one completion at a time per engine); `cancel` is
polled between decoding steps and between the decoder layers of every decoding pass, and between
the prompt's chunks (a chunk started is finished and kept for the request that superseded this
one: see `PromptCache.prefill`); `prefill` (work ahead of a request) stops between its chunks of
64 tokens, losing nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import KW_ONLY, asdict, dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING
from collections.abc import Callable

from grammar_tools.parsing.incremental import ParseError, PrefixParser
from grammar_tools.lexing.lexer_automaton import START, LexError
from grammar_tools.parsing.versions import format_version
from mask_store import canonical as canonical_tokenization
from mask_store.matcher import GrammarMatcher
from mask_store.store import MaskStoreError

from ..options import EngineOptions
from ..positions import PositionError, offset_at
from ..target_version import target_version
from .budget import NO_BUDGET, Budget
from .compiler_gate import refused_where_written
from .offer import EMPTY, Offer, choose_offer
from .redecode import Pass
from .request_times import RequestTimes
from .stopping.context import Start, cursor_context
from .stopping.decision import Stop, StopReason
from .stopping.policy import StopPolicy
from .stopping.rest_of_file import RestOfFile, offered_text
from .workspace_context import NO_CONTEXT, WorkspaceContext

if TYPE_CHECKING:  # sampling.py imports torch, which loads after threads.py set its environment
    from .sampling import Sampler

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CompletionRequest:
    text: str  # the whole document ("\n" line ends)
    _: KW_ONLY
    cursor: int  # offset of the cursor in `text` (code points)
    document: str = "untitled"  # key of the per-document caches (KV cache, prefix parser)
    max_tokens: int | None = None  # overrides the engine's option for this request
    mode: str | None = None  # overrides the engine's option (auto | single | multi)
    workspace: WorkspaceContext = NO_CONTEXT  # other open documents (for models that read them)
    budget: Budget = NO_BUDGET  # the request's latency budget (decoding/budget.py)
    resume: tuple[int, ...] = ()  # the tokens of an answer the budget cut, decoded on from (background)
    # may be answered from a short first window (`CompletionEngine._window`); False: work ahead,
    # which has the time to compute the full window (and is there to compute it)
    short_first: bool = True

    def __post_init__(self) -> None:
        if not 0 <= self.cursor <= len(self.text):
            raise PositionError(f"cursor offset {self.cursor} is outside the document ({len(self.text)} characters)")

    @classmethod
    def at(cls, text: str, line: int, character: int, **fields) -> CompletionRequest:
        """The request at an LSP position (0-based line, UTF-16 code units; PositionError when
        it is outside the text)."""
        return cls(text, cursor=offset_at(text, line, character), **fields)

    @property
    def line(self) -> int:
        """The cursor's 0-based line (logs, and the names analysis, which works per line)."""
        return self.text.count("\n", 0, self.cursor)


@dataclass
class CompletionResult:
    text: str  # what to insert
    start: int  # replace range, offsets in the request's text; start is the cursor
    end: int  # past the auto-closed brackets/quotes the text supplies again
    stop_reason: StopReason  # see STOP_REASONS
    mode: str  # single | multi
    constrained: bool
    tokens_generated: int = 0  # sampled from the model
    tokens_forced: int = 0  # appended by fast-forward without sampling
    tokens_healed: int = 0  # prompt tokens backed off and re-created
    prompt_tokens: int = 0
    prompt_reused: int = 0  # prompt tokens served from the KV cache
    prompt_ms: float = 0.0
    decode_ms: float = 0.0
    mask_ms: list[float] = field(default_factory=list)  # per decoding step
    recovery: str | None = None  # how a syntax error before the cursor was skipped
    speculation: dict | None = None  # draft statistics when speculative decoding ran
    typed_through: int = 0  # > 0: the rest of the previous suggestion, of which this many characters were typed
    canonical: bool = False  # canonical tokenization applied (mask_store.canonical)
    canonical_fallbacks: int = 0  # steps where it left nothing and the grammar's mask was used alone
    token_ids: list[int] = field(default_factory=list)  # the tokens generated (the healed ones included)
    prefetched: bool = False  # made ahead of the request (after an accepted suggestion), no model call now
    offer_path: str = "empty"  # which search step gave the text (decoding.offer.PATHS)
    check_ms: float = 0.0  # spent checking edits against the whole file: set-up, the stop policy's checks, the search
    python_version: str = ""  # the Python the document targets, whose syntax the masks allowed ("3.12")
    names_ready: bool = False  # the names analysis was ready and guided the decoding (decoding/identifiers)
    names_shaped: int = 0  # steps whose logits or mask it reshaped
    names_masked: int = 0  # of those, steps where it masked (a closed receiver, `identifiers: constrain`)
    names_ms: float = 0.0  # spent reshaping the steps (the analysis itself is made ahead)
    budget_cut: bool = False  # the latency budget ended it early: the rest is worth decoding in the background
    short_window: bool = False  # answered from the short first window: the full one is worth computing in the background
    gate_ms: float = 0.0  # spent in the compiler gate after decoding (`compiler_checked`)
    engine_ms: float = 0.0  # wall time in `complete` once it held the engine (the request's wait before it: the caller's)
    times_ms: dict[str, float] = field(default_factory=dict)  # the wall time in `complete` (the lock's wait included) in parts: request_times.py

    def to_json(self) -> dict:
        return asdict(self) | {"stop_reason": str(self.stop_reason)}


STOP_REASONS = {str(r): r.description for r in StopReason}


@dataclass(frozen=True)
class _Shown:
    """The last completion of a document, for typing through it."""

    before: str  # the document before the cursor
    after: str  # and after it
    result: CompletionResult
    options: EngineOptions
    mode: str | None
    max_tokens: int | None
    rest: RestOfFile | None  # the rest of the file the result was made for (None: the request ended before reading it)
    prefetched: bool = False  # made ahead of a request (`prefetch`): served whole to the first one


def typed_through(shown: _Shown, before: str, after: str) -> str | None:
    """The rest of the shown completion when the document differs from the one it was made for
    only by text typed at the cursor that the completion starts with (None otherwise). Splicing
    the rest at the new cursor gives the very file the whole completion gave, so it is as valid.
    A prefetched completion is also served whole for the very document it was made for.

    All of it typed (or accepted, editors then ask at its end): "" (nothing more) where it was
    one line that the model itself ended (`StopReason.LINE_END`) at the end of the cursor's
    line, and a request there is single-line too (`cursor_context`: not after a block opener in
    `auto` mode): decoding again from there would end the same line at once (a model run of
    ~90 ms for an empty answer). None otherwise: a new request."""
    text = shown.result.text
    if after != shown.after or not before.startswith(shown.before):
        return None
    typed = before[len(shown.before) :]
    if not typed and shown.prefetched:
        return text
    if typed == text and _line_ended(shown, before, after):
        return ""
    if not typed or len(typed) >= len(text) or not text.startswith(typed):
        return None
    return text[len(typed) :]


def _line_ended(shown: _Shown, before: str, after: str) -> bool:
    """The shown one-line completion ended its line where the model chose to, at the end of the
    cursor's line, and a request at its end would be single-line."""
    result = shown.result
    return (result.stop_reason == StopReason.LINE_END and "\n" not in result.text and result.end == result.start
            and after[:1] in ("", "\n")
            and cursor_context(before, after, shown.mode or shown.options.mode).mode == "single")


def compiler_checked(result: CompletionResult, before: str, after: str) -> CompletionResult:
    """`result`, or no completion (stop reason `compiler`) when CPython's compiler refuses the
    file with it where it was written (decoding/compiler_gate.py)."""
    if not result.text:
        return result
    refusal = refused_where_written(before, result.text, after[result.end - result.start :])
    if refusal is None:
        return result
    log.info("not offered: the compiler refuses %r: %s", result.text[:60], refusal)
    return replace(result, text="", end=result.start, stop_reason=StopReason.COMPILER)


Cancel = Callable[[], bool]


def first_window_key(document: str) -> str:
    """The prompt cache's key for a document's short first window (`CompletionEngine._window`)."""
    return document + "\x00first-window"


@dataclass(frozen=True)
class _Setup:
    """What every step of one request reads (built once by `CompletionEngine._constrain`)."""

    req: CompletionRequest
    opts: EngineOptions
    compiled: object  # the compiled grammar of the document's target version
    before: str  # the document split at the cursor
    after: str
    prompt: object  # prompt.Prompt: its ids, the healed bytes backed off
    matcher: GrammarMatcher | None  # None: unconstrained
    recovery: object | None  # how a syntax error before the cursor was skipped
    held: bytes  # the open lexeme before the cursor (healed bytes left out)
    depth: int  # bracket depth where `held` starts
    rest: RestOfFile  # the text after the cursor, as every step asks about it
    sampler: Sampler
    max_tokens: int
    cancel: Cancel
    guide: object | None = None  # identifiers.IdentifierGuide: names that exist (None: off or not ready)
    times: RequestTimes = field(default_factory=RequestTimes)  # where the request's time goes
    cache_key: str = ""  # the key of the prompt's KV cache (`CompletionEngine._window`)

    @property
    def heal(self) -> bytes:
        return self.prompt.healed


@dataclass(frozen=True)
class Prefilled:
    """What `CompletionEngine.prefill` did for a prompt of `prompt_tokens` tokens."""

    prompt_tokens: int
    reused: int  # found in the document's KV cache already
    computed: int  # run through the model now
    complete: bool  # False: stopped by a cancellation (what was computed is kept)
Progress = Callable[[str, "float | None"], None]


class CompletionEngine:
    """A loaded model and mask store, serving completions one at a time."""

    def __init__(self, options: EngineOptions, runtime, compiled, draft_runtime=None) -> None:
        from ..model.prompt_cache import PromptCache
        from .header_steering import HeaderStarts
        from .prompt import WindowAnchors
        from .stopping.line_scanner import LineScanner

        self.options = options
        self.runtime = runtime
        self.compiled = compiled  # the loaded store with the newest Python's recognizer
        self._versions = {compiled.recognizer.python_version: compiled}  # the same store, per target version
        self.tokenizer = runtime.tokenizer
        self.prompt_cache = PromptCache(runtime)
        self.anchors = WindowAnchors()  # where each document's prompt window started last
        self.first_anchors = WindowAnchors()  # and its short first window (`_window`)
        self.scanner = LineScanner(compiled.lexer)
        self._header_starts = HeaderStarts(compiled.tokens)  # re-decoding's steering masks, built as needed
        self._parsers: OrderedDict[str, PrefixParser] = OrderedDict()
        self._shown: OrderedDict[str, _Shown] = OrderedDict()  # last completion per document
        self._shown_lock = threading.Lock()  # `_shown` is read without the engine's lock (`typed_through_answer`)
        self._lock = threading.Lock()
        vocab = self.tokenizer.vocab
        self._stop_tokens = set(int(i) for i in vocab.eos) | set(vocab.special)
        from .speculation.draft_model import DraftModel
        from .speculation.stats import SpeculationStats

        self.spec_stats = SpeculationStats()  # α and forward costs, learnt across requests
        self.draft_model = DraftModel(draft_runtime) if draft_runtime is not None else None
        from .identifiers.analyses import NameAnalyses
        from .identifiers.token_index import IdentifierTokens

        # made ahead of the requests (`names_ahead`), never waited for, never beside one
        self.names = NameAnalyses(busy=self._lock.locked)
        self._identifier_tokens = IdentifierTokens(compiled.tokens[: compiled.V], vocab.by_bytes,
                                                   frozenset(vocab.special))

    # ------------------------------------------------------------------ loading

    @classmethod
    def load(cls, options: EngineOptions | None = None, progress: Progress | None = None) -> CompletionEngine:
        """Load the model and its mask store (built and cached the first time). Raises
        `ModelLoadError` or `MaskStoreError` with the fix in the message."""
        from mask_store.loading import load_compiled

        from ..model.runtime import ModelLoadError, load_model

        options = (options or EngineOptions()).validated()
        report = progress or (lambda message, fraction: None)
        report("loading the model", 0.0)
        runtime = load_model(options.model, options.device)
        draft = None
        if options.draft_model:
            report("loading the draft model", 0.4)
            draft = load_model(options.draft_model, options.device)
            if draft.tokenizer.vocab.hash != runtime.tokenizer.vocab.hash:
                raise ModelLoadError(f"the draft model {options.draft_model} has another tokenizer than the model")
        report("loading the mask store", 0.5)
        compiled, tok = load_compiled(options.model, options.store, progress=False)
        if tok.vocab.hash != runtime.tokenizer.vocab.hash:
            raise MaskStoreError("the mask store was built for another tokenizer; run `mask-store build --model ...`")
        report("ready", 1.0)
        return cls(options, runtime, compiled, draft)

    def describe(self) -> dict:
        return {
            "model": self.runtime.name,
            "device": str(self.runtime.device),
            "store": self.compiled.store.header.get("path") or self.options.store or "cache",
            "fim": self.runtime.fim.style if self.runtime.fim else None,
            "load_seconds": round(self.runtime.load_seconds, 2),
        }

    def forget(self, document: str) -> None:
        with self._lock:
            self.prompt_cache.forget(document)
            self.prompt_cache.forget(first_window_key(document))
            self.anchors.forget(document)
            self.first_anchors.forget(document)
            self._parsers.pop(document, None)
            with self._shown_lock:
                self._shown.pop(document, None)
        self.names.forget(document)

    def names_ahead(self, request: CompletionRequest, options: EngineOptions | None = None,
                    wait: float = 0.0) -> None:
        """Start the names analysis for a request's document and cursor line unless it is made
        (work ahead: `prefill`); `wait` > 0: made now, waiting up to that long (one-shot callers)."""
        if (options or self.options).identifiers == "off":
            return
        if wait > 0:
            self.names.wait(request.document, request.text, request.line, wait)
        else:
            self.names.request(request.document, request.text, request.line)

    def _compiled_for(self, document: str, opts: EngineOptions):
        """The compiled grammar of the Python version `document` targets (`target_version`):
        the loaded store with that version's recognizer, made on first use."""
        version = target_version(opts.python_version, document)
        compiled = self._versions.get(version)
        if compiled is None:
            compiled = self._versions[version] = self.compiled.for_version(version)
        return compiled

    def _parser(self, document: str, compiled) -> PrefixParser:
        p = self._parsers.pop(document, None)
        if p is None or p.recognizer is not compiled.recognizer:  # new, or the target version changed
            p = PrefixParser(compiled.recognizer, compiled.lexer)
        self._parsers[document] = p
        while len(self._parsers) > 8:
            self._parsers.popitem(last=False)
        return p

    # ------------------------------------------------------------------ completing

    def complete(self, request: CompletionRequest, cancel: Cancel | None = None,
                 options: EngineOptions | None = None) -> CompletionResult:
        """The completion at the request's cursor. Raises PositionError for a cursor outside
        the document; never returns text that would break the file (constrained mode)."""
        cancel = cancel or (lambda: False)
        arrived = time.perf_counter()
        while not self._lock.acquire(timeout=0.05):
            if cancel():
                return self._empty(request, StopReason.CANCELLED, options or self.options)
        started = time.perf_counter()
        times = RequestTimes()
        times.add("lock", (started - arrived) * 1000)

        def finished(result: CompletionResult) -> CompletionResult:
            done = time.perf_counter()
            return replace(result, engine_ms=round((done - started) * 1000, 2),
                           times_ms=times.split((done - arrived) * 1000))

        try:
            opts = options or self.options
            text = request.text
            off = request.cursor
            before, after = text[:off], text[off:]
            rest = self._typed_through(request, opts)
            if rest is not None:
                return finished(rest)
            result, rest_of_file = self._complete(request, cancel, opts, before, after, times)
            gated = time.perf_counter()
            if opts.constrained:
                result = compiler_checked(result, before, after)
            gate_ms = (time.perf_counter() - gated) * 1000
            times.add("gate", gate_ms)
            result = finished(replace(result, gate_ms=round(gate_ms, 2)))
            if result.text and result.stop_reason != StopReason.CANCELLED:
                self._show(request.document, _Shown(before, after, result, opts, request.mode, request.max_tokens,
                                                    rest_of_file))
            return result
        finally:
            self._lock.release()

    def typed_through_answer(self, request: CompletionRequest,
                             options: EngineOptions | None = None) -> CompletionResult | None:
        """The rest of the document's last suggestion when the request typed its beginning (see
        `typed_through`), or None. No model and no engine lock: the server answers it at once,
        even while background work (a prefill's chunk) holds the engine."""
        t0 = time.perf_counter()
        result = self._typed_through(request, options or self.options)
        if result is None:
            return None
        ms = (time.perf_counter() - t0) * 1000
        return replace(result, engine_ms=round(ms, 2), times_ms=RequestTimes().split(ms))

    def _typed_through(self, request: CompletionRequest, opts: EngineOptions) -> CompletionResult | None:
        with self._shown_lock:
            shown = self._shown.get(request.document)
        if shown is None or (shown.options, shown.mode, shown.max_tokens, shown.result.python_version) != (
                opts, request.mode, request.max_tokens,
                format_version(target_version(opts.python_version, request.document))):  # the project's may change
            return None
        off = request.cursor
        rest = typed_through(shown, request.text[:off], request.text[off:])
        return None if rest is None else self._rest_of(shown, rest, request)

    def _show(self, document: str, shown: _Shown) -> None:
        """Keep `shown` as the document's last suggestion (the last 8 documents')."""
        with self._shown_lock:
            self._shown[document] = shown
            self._shown.move_to_end(document)
            while len(self._shown) > 8:
                self._shown.popitem(last=False)

    # ------------------------------------------------------------------ working ahead

    def _prompt(self, request: CompletionRequest, before: str, after: str, opts: EngineOptions,
                first_window: bool = False):
        """The prompt of a request in a window of `context_tokens` (`first_window`: a short
        first window of `first_window_tokens`), the window kept as the document's next anchor."""
        from .prompt import FIRST_WINDOW_STEP, WINDOW_STEP, build_prompt

        anchors = self.first_anchors if first_window else self.anchors
        budget, step = (opts.first_window_tokens, FIRST_WINDOW_STEP) if first_window else (opts.context_tokens,
                                                                                            WINDOW_STEP)
        prompt = build_prompt(self.tokenizer, before, after, budget, self.runtime.fim,
                              heal=opts.constrained, anchor=anchors.get(request.document),
                              heal_pretoken=self._canonical_on(opts), workspace=request.workspace, step=step,
                              context=request.workspace.block)
        anchors.keep(request.document, prompt)
        return prompt

    def _window(self, request: CompletionRequest, before: str, after: str, opts: EngineOptions):
        """(the request's prompt, the key of its KV cache). The full window, unless the KV cache
        lacks more than `first_window_tokens` of it (the first request in a document, a jump far
        from the cached prompt, work ahead that has not got far yet) and the request may be
        answered from a short one: then the lines nearest the cursor in at most that many tokens
        (a window and KV cache of their own, kept while the user types on), and the full window
        is left to the work ahead (`CompletionResult.short_window`), so that the first answer
        costs a short window's prefill on any machine, not a whole one's. The grammar reads the
        whole document either way: only the model's prompt is short."""
        full = self._prompt(request, before, after, opts)
        limit = opts.first_window_tokens
        if not (request.short_first and limit and limit < opts.context_tokens):
            return full, request.document
        missing = self.prompt_cache.missing(request.document, full.ids)
        if missing <= limit:
            self.prompt_cache.forget(first_window_key(request.document))  # served by the full window now
            return full, request.document
        short = self._prompt(request, before, after, opts, first_window=True)
        key = first_window_key(request.document)
        if self.prompt_cache.missing(key, short.ids) >= missing:
            return full, request.document
        log.info("first window: %d prompt tokens (the full window lacks %d of %d)", len(short.ids), missing,
                 len(full.ids))
        return short, key

    def prefill(self, request: CompletionRequest, cancel: Cancel | None = None,
                options: EngineOptions | None = None) -> Prefilled:
        """Prepare a request before it is made: its prompt's KV cache (and the parse of the text
        before the cursor), so that the request itself only decodes. `cancel()` stops it between
        decoder layers; what was computed is kept for the request."""
        from ..model.prompt_cache import PrefillCancelled

        cancel = cancel or (lambda: False)
        while not self._lock.acquire(timeout=0.05):
            if cancel():
                return Prefilled(0, 0, 0, False)
        try:
            opts = options or self.options
            off = request.cursor
            before, after = request.text[:off], request.text[off:]
            self.names_ahead(request, opts)
            prompt = self._prompt(request, before, after, opts)
            try:
                _, _, reused = self.prompt_cache.prefill(request.document, prompt.ids, cancel, opts.cache_memory_mb,
                                                         ahead=True)
            except PrefillCancelled as e:
                return Prefilled(len(prompt.ids), e.reused, e.computed - e.reused, False)
            if opts.constrained and not cancel():
                before_b = before.encode()
                try:
                    self._parser(request.document, self._compiled_for(request.document, opts)).parse(before_b[: len(before_b) - len(prompt.healed)])
                except (ParseError, LexError):
                    pass  # the request will say so
            return Prefilled(len(prompt.ids), reused, len(prompt.ids) - reused, True)
        finally:
            self._lock.release()

    def prefetch(self, request: CompletionRequest, cancel: Cancel | None = None,
                 options: EngineOptions | None = None) -> CompletionResult:
        """Complete a request before it is made (the next suggestion after an accepted one): the
        result is kept for the document, and a request for the very same text and cursor gets
        it without a model call (as does one that typed its first characters)."""
        opts = options or self.options
        result = self.complete(replace(request, short_first=False), cancel, opts)
        if result.stop_reason == StopReason.CANCELLED:
            return result
        off = request.cursor
        with self._shown_lock:
            made = self._shown.get(request.document)  # `complete` kept a non-empty result with its rest of the file
        self._show(request.document, _Shown(request.text[:off], request.text[off:], result, opts, request.mode,
                                            request.max_tokens,
                                            made.rest if made is not None and made.result is result else None,
                                            prefetched=True))
        return result

    @staticmethod
    def _rest_of(shown: _Shown, rest: str, req: CompletionRequest) -> CompletionResult:
        """The shown result, cut to what is left after the typed characters (its replace range
        moved to the new cursor; same auto-closed brackets covered); nothing (an echo) where
        what is left is what that range already holds (`RestOfFile.changes_nothing`)."""
        result = shown.result
        start = req.cursor
        end = req.cursor + result.end - result.start  # the same closers after the cursor
        given = rest
        if shown.rest is not None and shown.rest.changes_nothing(rest.encode()):
            rest, end = "", start
        # nothing left of a line the model ended (typed_through): its own stop, not an echo
        ended = not given and bool(result.text)
        return replace(
            result, text=rest, start=start, end=end, prefetched=shown.prefetched,
            stop_reason=StopReason.ECHO if not rest and not ended else result.stop_reason,
            tokens_generated=0, tokens_forced=0, tokens_healed=0, prompt_tokens=0, prompt_reused=0,
            prompt_ms=0.0, decode_ms=0.0, mask_ms=[], speculation=None,
            typed_through=len(result.text) - len(rest), canonical_fallbacks=0, token_ids=[], gate_ms=0.0,
        )

    def _empty(self, req: CompletionRequest, reason: StopReason, opts: EngineOptions) -> CompletionResult:
        return CompletionResult("", req.cursor, req.cursor, reason, req.mode or opts.mode, opts.constrained)

    # A request's steps, in order (`_complete`): prompt (with healing), constrain (the grammar
    # matcher after the text before the cursor, and the rest of the file, built once), prefill,
    # decode (speculate, stop: `loop.decode` under the `StopPolicy`), offer (`offer.choose_offer`),
    # redecode when nothing was offered (`redecode.search`), result. Modules that import torch
    # are imported inside the steps: the CLI sets the thread environment (`threads.py`) before
    # torch loads.

    def _complete(self, req: CompletionRequest, cancel: Cancel, opts: EngineOptions, before: str,
                  after: str, times: RequestTimes) -> tuple[CompletionResult, RestOfFile | None]:
        """The completion between `before` and `after` (the document split at the cursor), and
        the rest of the file it was made for (None: the request ended before reading it);
        `times` gets the parts of its time (request_times.py) but the lock's and the gate's."""
        from ..model.prompt_cache import PrefillCancelled
        from . import header_steering, redecode

        t0 = time.perf_counter()
        setup = self._constrain(req, opts, before, after, cancel, times)
        if isinstance(setup, StopReason):
            times.add("setup", (time.perf_counter() - t0) * 1000)
            return self._empty(req, setup, opts), None
        shape = header_steering.first_line(setup.rest, before) if setup.matcher is not None else header_steering.FREE
        if shape.fit is header_steering.Fit.NOTHING:
            log.info("no completion: nothing fits the rest of the file at the cursor")
            self._setup_done(setup, t0)
            return self._empty(req, StopReason.NO_CONTINUATION, opts), setup.rest
        steer = self._header_starts.first_line(shape, setup.heal, self.tokenizer.encode)
        checked = self._setup_done(setup, t0)
        try:
            logits, past, reused = self._prefill(setup)
        except PrefillCancelled:
            return self._empty(req, StopReason.CANCELLED, opts), None
        prompt_ms = (time.perf_counter() - t0) * 1000
        t1 = time.perf_counter()
        chosen = self._decode_pass(setup, setup.matcher, logits, past, replay=req.resume, budget=req.budget,
                                   steer=steer, start=shape.start)
        searched = False
        if (chosen.offer.path == "empty" and setup.matcher is not None
                and chosen.outcome.stop.reason is not StopReason.CANCELLED
                and (chosen.outcome.stop.reason is not StopReason.ECHO or setup.rest.inserts_lines)
                and not redecode.ended_where_valid(chosen, len(setup.heal), setup.rest)):
            # at a line start an echo is the existing line written again, not an answer: searched past
            searched = True
            chosen = self._redecode(setup, chosen, steer, shape.start) or chosen
        decode_ms = (time.perf_counter() - t1) * 1000
        times.add("checks", setup.rest.check_ms - checked)
        times.add("names", setup.guide.stats["ms"] if setup.guide else 0.0)
        # the budget cut the answer, or stopped the search behind an empty one
        cut = chosen.outcome.stop.reason is StopReason.BUDGET or (
            searched and chosen.offer.path == "empty" and req.budget.expired())
        return replace(self._result(setup, chosen, reused, prompt_ms, decode_ms,
                                    setup.matcher.counts.canonical_fallbacks if setup.matcher else 0), budget_cut=cut), setup.rest

    @staticmethod
    def _setup_done(setup: _Setup, t0: float) -> float:
        """The request's set-up took from `t0` till now: its whole-file checks so far (their
        set-up, the first line's steering) counted as checks, the rest as set-up; the checks' ms."""
        checks = setup.rest.check_ms
        setup.times.add("checks", checks)
        setup.times.add("setup", (time.perf_counter() - t0) * 1000 - checks)
        return checks

    def _prefill(self, setup: _Setup):
        """The request's prompt through the model (what the KV cache does not hold): (logits,
        past, tokens reused); raises PrefillCancelled."""
        t = time.perf_counter()
        try:
            return self.prompt_cache.prefill(setup.cache_key, setup.prompt.ids, setup.cancel,
                                             setup.opts.cache_memory_mb)
        finally:
            setup.times.add("prefill", (time.perf_counter() - t) * 1000)

    def _constrain(self, req: CompletionRequest, opts: EngineOptions, before: str, after: str,
                   cancel: Cancel, times: RequestTimes) -> _Setup | StopReason:
        """The prompt (its last token backed off when the grammar can re-create it: healing), the
        grammar matcher after the text before the cursor (constrained), and the rest of the file
        the completion must respect; a StopReason when the text before the cursor does not parse."""
        from .sampling import Sampler

        compiled = self._compiled_for(req.document, opts)
        prompt, cache_key = self._window(req, before, after, opts)
        heal = prompt.healed
        before_b = before.encode()
        parser = self._parser(req.document, compiled)
        mode = req.mode or opts.mode
        sampler = Sampler(opts.temperature, opts.top_p, opts.seed)
        max_tokens = req.max_tokens or opts.max_tokens
        if not opts.constrained:
            held, depth = self._lexeme_before(before_b)
            rest = RestOfFile.build(before, after, mode, self.scanner, held, heal, depth)
            return _Setup(req, opts, compiled, before, after, prompt, None, None, held, depth, rest, sampler,
                          max_tokens, cancel, times=times, cache_key=cache_key)
        try:
            matcher = self._matcher(compiled, before_b, heal, parser, prompt, opts)
        except (ParseError, LexError) as e:
            log.info("no completion: the text before the cursor does not parse (%s)", e)
            return StopReason.NO_CONTINUATION
        st = matcher.prefix_state
        recovery = st.recovered
        parsed_before = recovery.rewrite(before_b) if recovery else before_b
        held = before_b[st.lexeme_start : len(before_b) - len(heal)]
        depth = st.configs[0].depth if st.configs else 0
        try:
            rest = RestOfFile.build(before, after, mode, self.scanner, held, heal, depth, parser, parsed_before)
        except (ParseError, LexError) as e:
            log.info("no completion: the text before the cursor does not parse with its typed part (%s)", e)
            return StopReason.NO_CONTINUATION
        guide = self._identifier_guide(req, opts, compiled, before_b[: len(before_b) - len(heal)])
        return _Setup(req, opts, compiled, before, after, prompt, matcher, recovery, held, depth, rest, sampler,
                      max_tokens, cancel, guide, times, cache_key)

    def _speculator(self, setup: _Setup):
        """A speculator for one decoding pass (None: speculation off)."""
        if not setup.opts.speculative:
            return None
        from .prompt import lookup_reference
        from .speculation.lookup import PromptLookup
        from .speculation.speculator import Speculator

        reference = partial(lookup_reference, self.tokenizer, setup.before, setup.after, setup.prompt)
        return Speculator(self.spec_stats, list(setup.prompt.ids), self._stop_tokens,
                          PromptLookup(reference=reference), draft_model=self.draft_model)

    def _decode_pass(self, setup: _Setup, matcher, logits, past, replay=(), avoid=frozenset(), limit=None,
                     steer=None, budget: Budget = NO_BUDGET, start: Start = Start.CURSOR_LINE) -> Pass:
        """One decoding pass from the prompt (after `replay`, `avoid` banned at the next step:
        redecode.py), stopped by a fresh `StopPolicy` over the request's rest of the file (`start`:
        where the steering puts the first code, `FirstLine.start`), and the offer search over its text."""
        from .loop import ModelStepper, decode

        stepper = ModelStepper(partial(self.runtime.forward, cancel=setup.cancel), logits, past,
                               on_forward=self.spec_stats.record_forward)
        speculator = self._speculator(setup)
        policy = StopPolicy(setup.rest, self.scanner, setup.held, setup.heal, setup.depth, start)
        try:
            outcome = decode(stepper, matcher, setup.compiled.tokens, self._stop_tokens, setup.sampler, policy,
                             limit or setup.max_tokens, setup.cancel, speculator, replay=replay, avoid=avoid,
                             steer=steer, names=setup.guide, budget=budget)
        finally:
            self.prompt_cache.release(setup.cache_key, stepper.past, len(setup.prompt.ids))
            setup.times.add("model", sum(stepper.forward_ms))
        setup.times.add("mask", sum(outcome.mask_ms))
        log.debug("generated %r (healed %r), stop %s", outcome.generated, setup.heal, outcome.stop)
        if outcome.stop.reason == StopReason.CANCELLED:
            return Pass(outcome, EMPTY, speculator)
        completion = outcome.generated[len(setup.heal) :]
        offer = choose_offer(setup.rest, self.scanner, setup.held + setup.heal, completion, setup.depth,
                             outcome.stop.cut, later=outcome.stop.reason != StopReason.ECHO)
        if setup.guide is not None:  # its checks are counted as checks
            t, checked = time.perf_counter(), setup.rest.check_ms
            offer = self._names_cut(setup, completion, offer)
            setup.times.add("names", (time.perf_counter() - t) * 1000 - (setup.rest.check_ms - checked))
        return Pass(outcome, offer, speculator)

    def _names_cut(self, setup: _Setup, completion: bytes, offer: Offer) -> Offer:
        """`offer`, or (a names guide decoded it) the longest cut before the first of its later lines that
        reads a name bound nowhere it can be read and that passes the offer's checks
        (identifiers/later_lines.py); `offer` itself where no such cut passes."""
        rest = setup.rest
        if setup.guide is None or not offer.cut or rest.compat is None:  # off, or the analysis not ready
            return offer
        from .identifiers.later_lines import first_unbound_line, line_start

        after = rest.tail.decode() + setup.after[len(rest.ctx.covered) :]
        for _ in range(3):  # a cut may leave a name read above it unbound (a function's body reads late)
            written = offered_text(completion, offer.cut, not rest.ctx.infix)
            line = first_unbound_line(setup.before, written.decode("utf-8", errors="replace"), after)
            if line is None:
                return offer
            shorter = choose_offer(rest, self.scanner, setup.held + setup.heal, completion, setup.depth,
                                   line_start(written, line), later=False)
            if not shorter.cut:
                return offer
            log.info("names: cut before line %d of %r, which reads a name bound nowhere", line, written[:60])
            offer = replace(shorter, path="earlier-stop", checks=offer.checks + shorter.checks,
                            ms=offer.ms + shorter.ms)
        return offer

    def _redecode(self, setup: _Setup, first: Pass, steer, start: Start) -> Pass | None:
        """Search, don't give up (`redecode.search`): passes from the step where validity was
        lost, steered as the first pass was (`steer` and `start`: what the rest of the file lets
        the first line be, `header_steering.first_line`)."""
        from . import redecode

        budget = setup.req.budget  # no new pass once it has run out (a pass started is finished)
        return redecode.search(first, partial(self._redecode_from, setup, steer, start), setup.compiled.tokens,
                               self.tokenizer.vocab.by_bytes, len(setup.heal), self._stop_tokens,
                               setup.max_tokens, lambda: setup.cancel() or budget.expired(),
                               steered=steer is not None)

    def _redecode_from(self, setup: _Setup, steer, start: Start, replay, avoid, limit) -> Pass:
        """A re-decoding pass (redecode.search): the prompt again, a fresh matcher, the same
        rest of the file (its set-up and verdicts are the request's)."""
        from ..model.prompt_cache import PrefillCancelled
        from .loop import DecodeOutcome

        try:
            logits, past, _ = self._prefill(setup)
        except PrefillCancelled:
            return Pass(DecodeOutcome([], b"", Stop(0, StopReason.CANCELLED)), EMPTY)
        t = time.perf_counter()
        matcher = self._matcher(setup.compiled, setup.before.encode(), setup.heal, self._parser(
            setup.req.document, setup.compiled), setup.prompt, setup.opts)
        matcher.counts = setup.matcher.counts  # the request's passes count into one record
        setup.times.add("setup", (time.perf_counter() - t) * 1000)
        p = self._decode_pass(setup, matcher, logits, past, replay, avoid, limit, steer, start=start)
        return replace(p, offer=replace(p.offer, path="redecode")) if p.offer.cut else p

    def _result(self, setup: _Setup, chosen: Pass, reused: int, prompt_ms: float, decode_ms: float,
                fallbacks: int) -> CompletionResult:
        """The completion result of the chosen pass: the text offered, its replace range and the
        request's figures."""
        req, rest = setup.req, setup.rest
        outcome, offer = chosen.outcome, chosen.offer
        completion = outcome.generated[len(setup.heal) :]
        offered = rest.offered(completion, offer.cut)
        no_op = rest.changes_nothing(offered)  # an item that changes nothing is never offered
        body = "" if no_op else offered.decode("utf-8", errors="replace")
        log.debug("offered %d bytes (%s; policy stop %s at %d, %d checks in %.1f ms)", len(body.encode()),
                  offer.path, outcome.stop.reason, outcome.stop.cut, offer.checks, offer.ms)
        covered = rest.ctx.covered
        return CompletionResult(
            text=body,
            start=req.cursor,
            end=req.cursor + len(covered) if body or not covered else req.cursor,
            stop_reason=StopReason.ECHO if no_op else outcome.stop.reason,
            offer_path=offer.path,
            check_ms=rest.check_ms,
            mode=rest.ctx.mode,
            constrained=setup.opts.constrained,
            tokens_generated=outcome.sampled,
            tokens_forced=outcome.forced,
            tokens_healed=len(setup.prompt.healed_ids),
            prompt_tokens=len(setup.prompt.ids),
            prompt_reused=reused,
            short_window=setup.cache_key != req.document,
            prompt_ms=round(prompt_ms, 2),
            decode_ms=round(decode_ms, 2),
            mask_ms=[round(m, 4) for m in outcome.mask_ms],
            recovery=str(setup.recovery.restart_line) if setup.recovery else None,
            speculation=chosen.speculator.to_json() if chosen.speculator else None,
            canonical=setup.matcher is not None and setup.matcher.canonical.active,
            canonical_fallbacks=fallbacks,
            token_ids=list(outcome.tokens),
            python_version=format_version(setup.compiled.recognizer.python_version),
            names_ready=setup.guide is not None,
            names_shaped=setup.guide.stats["shaped"] if setup.guide else 0,
            names_masked=setup.guide.stats["masked"] if setup.guide else 0,
            names_ms=round(setup.guide.stats["ms"], 2) if setup.guide else 0.0,
        )

    def _identifier_guide(self, req: CompletionRequest, opts: EngineOptions, compiled, before: bytes):
        """The names guide of this request when its analysis is ready (else None, and the
        analysis is started for the requests to come: the request never waits for it)."""
        from .identifiers.guide import IdentifierGuide
        from .identifiers.modes import IdentifierMode

        mode = IdentifierMode(opts.identifiers)
        if mode is IdentifierMode.OFF:
            return None
        scope = self.names.ready(req.document, req.text, req.line)
        if scope is None:
            self.names.request(req.document, req.text, req.line)
            return None
        return IdentifierGuide(mode, scope, self._identifier_tokens, compiled, before)

    def _matcher(self, compiled, before: bytes, heal: bytes, parser: PrefixParser, prompt, opts: EngineOptions):
        """The grammar matcher after the text before the cursor, the `heal` bytes still to
        re-create (raises ParseError/LexError when that text does not parse)."""
        return GrammarMatcher.from_prefix(compiled, before[: len(before) - len(heal)], heal=heal, parser=parser,
                                          canonical=self._canonical_state(compiled, prompt, opts))

    def _canonical_on(self, opts: EngineOptions) -> bool:
        """Canonical tokenization applies: asked for, constrained, and the tokenizer's pairs known
        (its prompts then back off the whole last pre-token: build_prompt's `heal_pretoken`;
        every target version's grammar shares the one tokenizer's pairs)."""
        return opts.canonical and opts.constrained and self.compiled.canonical is not None

    def _canonical_state(self, compiled, prompt, opts: EngineOptions):
        """Canonical tokenization (on by default): its state after the prompt's tokens kept,
        which the healed and generated tokens then follow (OFF when turned off, or when the
        tokenizer is not one whose canonical pairs are known; loading said why)."""
        pairs = compiled.canonical
        if not self._canonical_on(opts) or pairs is None:
            return canonical_tokenization.OFF
        return pairs.state_after(prompt.prefix, canonical_tokenization.START)

    def _lexeme_before(self, before: bytes) -> tuple[bytes, int]:
        """Unconstrained mode: the open lexeme at the cursor for the line scanner (no parse), and
        the bracket depth where it starts."""
        lexer = self.compiled.lexer
        start = max(before.rfind(b"\n"), 0)
        try:
            _, _, s = lexer.lex(before, START, start)
            return before[s:], 0
        except LexError:
            return b"", 0
