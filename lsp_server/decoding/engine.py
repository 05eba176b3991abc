"""The completion engine: a loaded model and mask store, serving completions one at a time.

    engine = CompletionEngine.load(EngineOptions(model="default"))
    result = engine.complete(CompletionRequest(text, cursor=120, document="file:///a.py"))
    result.text, result.start, result.end   # insert `text` in place of text[start:end]

The engine reads offsets into the request's text (code points, "\n" line ends); LSP's (line,
UTF-16 character) positions are converted at the server's edge (`server/suggester.py`), or by
`CompletionRequest.at` for callers that hold one.

The engine keeps the loading, its lock and what it keeps between requests: each document's KV
cache (`PromptCache`), parser and prompt anchors (`DocumentStates`), last suggestion
(`ShownAnswers`). A request itself is `request.complete`, read top to bottom.

`complete` is synchronous and thread-safe (one completion at a time per engine); `cancel` is
polled between decoding steps and between the decoder layers of every decoding pass, and between
the prompt's chunks (a chunk started is finished and kept for the request that superseded this
one: see `PromptCache.prefill`); `prefill` (work ahead of a request) stops between its chunks of
64 tokens, losing nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from grammar_tools.lexing.lexer_automaton import LexError
from grammar_tools.parsing.incremental import ParseError
from mask_store.loading import load_compiled
from mask_store.store import MaskStoreError

from ..model.kv_cache import SPARE_CHUNK, PrefillCancelled, PromptCache
from ..model.runtime import ModelLoadError, load_model
from ..options import EngineOptions
from . import request as one_request
from .parts import (DocumentStates, EngineParts, GrammarVersions, first_window_key, may_be_short, plain_window,
                    plain_window_key, prompt_in_window)
from .header_steering import HeaderStarts
from .identifiers.analyses import NameAnalyses
from .identifiers.token_index import IdentifierTokens
from .model_pass import ModelPasses
from .results import RequestTimes, STOP_REASONS, Cancel, CompletionRequest, CompletionResult, nothing
from .shown import ShownAnswers
from .stopping.policy import StopReason
from .stopping.rest_of_file import LineScanner

__all__ = ["STOP_REASONS", "CompletionEngine", "CompletionRequest", "CompletionResult", "Prefilled",
           "first_window_key"]

Progress = Callable[[str, "float | None"], None]


@dataclass(frozen=True)
class Prefilled:
    """What `CompletionEngine.prefill` did for a prompt of `prompt_tokens` tokens."""

    prompt_tokens: int
    reused: int  # found in the document's KV cache already
    computed: int  # run through the model now
    complete: bool  # False: stopped by a cancellation (what was computed is kept)


def stop_tokens(vocab) -> frozenset[int]:
    """The tokens that end a completion: the end tokens and the special ones."""
    return frozenset(int(i) for i in vocab.eos) | frozenset(vocab.special)


def _worth_showing(result: CompletionResult) -> bool:
    """A suggestion the user may type through: some text, not cut short by a cancellation."""
    return bool(result.text) and result.stop_reason != StopReason.CANCELLED


class CompletionEngine:
    """A loaded model and mask store, serving completions one at a time. `prompt_cache` and
    `passes`: where the prompts and the decoding passes run when not here (a team server's
    engine, team/remote_engine.py); the names guide then stays off (it shapes local steps)."""

    def __init__(self, options: EngineOptions, runtime, compiled, draft_runtime=None, prompt_cache=None,
                 passes=None) -> None:
        self.options = options
        self.runtime = runtime
        self.compiled = compiled  # the loaded store with the newest Python's recognizer
        self.tokenizer = runtime.tokenizer
        self.prompt_cache = prompt_cache if prompt_cache is not None else PromptCache(runtime)
        self.shown = ShownAnswers()  # each document's last suggestion (typed-through answers)
        self._lock = threading.Lock()
        # made ahead of the requests (`names_ahead`), never waited for, never beside one
        self.names = NameAnalyses(busy=self._lock.locked)
        vocab = self.tokenizer.vocab
        scanner = LineScanner(compiled.lexer)
        stops = stop_tokens(vocab)
        self.passes = passes or ModelPasses(runtime, self.prompt_cache, scanner, stops, draft_runtime)
        self.parts = EngineParts(
            self.tokenizer, runtime.fim, self.prompt_cache, self.passes, GrammarVersions(compiled), DocumentStates(),
            scanner, HeaderStarts(compiled.tokens), stops, self.names,
            IdentifierTokens(compiled.tokens[: compiled.V], vocab.by_bytes, frozenset(vocab.special)),
            guides_names=passes is None)

    @property
    def spec_stats(self):
        """Speculation's estimates (α and forward costs), learnt across requests (local passes)."""
        return self.passes.spec_stats

    # ------------------------------------------------------------------ loading

    @classmethod
    def load(cls, options: EngineOptions | None = None, progress: Progress | None = None) -> CompletionEngine:
        """Load the model and its mask store (built and cached the first time). Raises
        `ModelLoadError` or `MaskStoreError` with the fix in the message."""
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

    @property
    def working(self) -> bool:
        """A request, a prefill or a prefetch holds the engine (the model runs)."""
        return self._lock.locked()

    def forget(self, document: str) -> None:
        with self._lock:
            self.prompt_cache.forget(document)
            self.prompt_cache.forget(first_window_key(document))
            self.prompt_cache.forget(plain_window_key(document))
            self.parts.documents.forget(document)
            self.shown.forget(document)
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

    # ------------------------------------------------------------------ completing

    def complete(self, request: CompletionRequest, cancel: Cancel | None = None,
                 options: EngineOptions | None = None) -> CompletionResult:
        """The completion at the request's cursor (`request.complete`). Raises PositionError for
        a cursor outside the document; never returns text that would break the file
        (constrained mode)."""
        cancel = cancel or (lambda: False)
        opts = options or self.options
        arrived = time.perf_counter()
        while not self._lock.acquire(timeout=0.05):
            if cancel():
                return nothing(request, StopReason.CANCELLED, opts)
        times = RequestTimes(arrived, time.perf_counter())
        try:
            result = self.shown.answer(request, opts)
            made = None  # the request made now (not typed through an earlier suggestion)
            if result is None:
                result, made = one_request.complete(self.parts, request, opts, cancel, times)
            result = times.stamped(result)
            if made is not None and _worth_showing(result):
                self.shown.keep_made(request, made, result, opts)
            return result
        finally:
            self._lock.release()

    def typed_through_answer(self, request: CompletionRequest,
                             options: EngineOptions | None = None) -> CompletionResult | None:
        """The rest of the document's last suggestion when the request typed its beginning
        (`shown.typed_through`), or None. No model and no engine lock: the server answers it
        at once, even while background work (a prefill's chunk) holds the engine."""
        return self.shown.answer(request, options or self.options)

    # ------------------------------------------------------------------ working ahead

    def prefill(self, request: CompletionRequest, cancel: Cancel | None = None,
                options: EngineOptions | None = None) -> Prefilled:
        """Prepare a request before it is made: its prompt's KV cache (and the parse of the text
        before the cursor), so that the request itself only decodes. `cancel()` stops it between
        its chunks; what was computed is kept for the request."""
        cancel = cancel or (lambda: False)
        while not self._lock.acquire(timeout=0.05):
            if cancel():
                return Prefilled(0, 0, 0, False)
        try:
            opts = options or self.options
            self.names_ahead(request, opts)
            prompt = self.prompt(request, opts)
            windows = [(request.document, prompt)]
            missing = self.prompt_cache.missing(request.document, prompt.ids)
            if prompt.context_sections and missing > opts.first_window_tokens:
                # the window without the block first: it serves the requests while the one with
                # the block is computed (parts.py's docstring)
                plain, key, missing = plain_window(self.parts, request, opts)
                windows.insert(0, (key, plain))
            if missing > opts.first_window_tokens and may_be_short(request, opts):
                # a request now would be answered from the short first window (`request_window`):
                # that window before all, so a keystroke during the full one's prefill finds it
                # computed rather than computing it (parts.py's docstring)
                short = prompt_in_window(self.parts, request, request.before, request.after, opts, window="first")
                windows.insert(0, (first_window_key(request.document), short))
            computed = 0
            try:
                for key, p in windows:
                    # the window with a block in short chunks, stopped inside one by a request: the
                    # one without it serves meanwhile
                    spare = bool(p.context_sections)
                    _, _, reused = self.prompt_cache.prefill(key, p.ids, cancel, opts.cache_memory_mb, ahead=True,
                                                             chunk=SPARE_CHUNK if spare else None, spare=spare)
                    computed += len(p.ids) - reused
            except PrefillCancelled as e:
                return Prefilled(len(prompt.ids), e.reused, computed + e.computed - e.reused, False)
            if opts.constrained and not cancel():
                self._parse_ahead(request, opts, len(prompt.healed))
            return Prefilled(len(prompt.ids), reused, computed, True)
        finally:
            self._lock.release()

    def prompt(self, request: CompletionRequest, options: EngineOptions | None = None):
        """The request's prompt in its full window (`parts.prompt_in_window`), kept as the
        document's anchor; call under the engine's lock."""
        return prompt_in_window(self.parts, request, request.before, request.after, options or self.options)

    def _parse_ahead(self, request: CompletionRequest, opts: EngineOptions, healed: int) -> None:
        """The text before the cursor (less the healed bytes) through the document's parser."""
        compiled = self.parts.grammars.for_document(request.document, opts)
        before = request.before.encode()
        try:
            self.parts.documents.parser(request.document, compiled).parse(before[: len(before) - healed])
        except (ParseError, LexError):
            pass  # the request will say so

    def prefetch(self, request: CompletionRequest, cancel: Cancel | None = None,
                 options: EngineOptions | None = None) -> CompletionResult:
        """Complete a request before it is made (the next suggestion after an accepted one): the
        result is kept for the document, and a request for the very same text and cursor gets
        it without a model call (as does one that typed its first characters)."""
        opts = options or self.options
        result = self.complete(replace(request, short_first=False, ahead=True), cancel, opts)
        if result.stop_reason != StopReason.CANCELLED:
            self.shown.keep_prefetched(request, result, opts)
        return result
