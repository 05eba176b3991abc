"""Answers without the model: the rest of the suggestion the user is typing through, and the
suggestion made ahead of a request (after an accepted one).

The engine keeps each document's last suggestion (`ShownAnswers`, the last 8 documents'). A
request whose document differs from the one that suggestion was made for only by text typed at
the cursor that the suggestion starts with is answered with the rest of it (`typed_through`):
splicing the rest at the new cursor gives the very file the whole suggestion gave, so it is as
valid. No model and no engine lock: the server answers it at once, even while background work
holds the engine (`ShownAnswers.answer`).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from grammar_tools.parsing.versions import format_version

from ..options import EngineOptions
from .parts import target_version
from .results import NO_FIGURES, CompletionRequest, CompletionResult, RequestTimes
from .stopping.policy import StopReason
from .stopping.rest_of_file import RestOfFile, cursor_context

if TYPE_CHECKING:
    from .request import Request

KEPT = 8  # documents whose last suggestion is kept


@dataclass(frozen=True)
class Shown:
    """The last completion of a document, for typing through it."""

    before: str  # the document before the cursor
    after: str  # and after it
    result: CompletionResult
    options: EngineOptions
    mode: str | None
    max_tokens: int | None
    rest: RestOfFile | None  # the rest of the file the result was made for (None: the request ended before reading it)
    prefetched: bool = False  # made ahead of a request (`CompletionEngine.prefetch`): served whole to the first one

    def serves(self, request: CompletionRequest, opts: EngineOptions) -> bool:
        """Made with the options and limits of `request` and for the Python its document targets
        now (the project's may change)."""
        version = format_version(target_version(opts.python_version, request.document))
        return (self.options, self.mode, self.max_tokens, self.result.python_version) == (
            opts, request.mode, request.max_tokens, version)


def typed_through(shown: Shown, before: str, after: str) -> str | None:
    """The rest of the shown completion when the document differs from the one it was made for
    only by text typed at the cursor that the completion starts with (None otherwise). A
    prefetched completion is also served whole for the very document it was made for.

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
    typed_a_proper_start = typed and len(typed) < len(text) and text.startswith(typed)
    return text[len(typed) :] if typed_a_proper_start else None


def _line_ended(shown: Shown, before: str, after: str) -> bool:
    """The shown one-line completion ended its line where the model chose to, at the end of the
    cursor's line, and a request at its end would be single-line."""
    result = shown.result
    one_line_at_its_end = "\n" not in result.text and result.end == result.start and after[:1] in ("", "\n")
    return (result.stop_reason == StopReason.LINE_END and one_line_at_its_end
            and cursor_context(before, after, shown.mode or shown.options.mode).mode == "single")


def rest_of(shown: Shown, rest: str, request: CompletionRequest) -> CompletionResult:
    """The shown result, cut to what is left after the typed characters (its replace range
    moved to the new cursor; same auto-closed brackets covered); nothing (an echo) where what
    is left is what that range already holds (`RestOfFile.changes_nothing`)."""
    result = shown.result
    start = request.cursor
    end = request.cursor + result.end - result.start  # the same closers after the cursor
    given = rest
    if shown.rest is not None and shown.rest.changes_nothing(rest.encode()):
        rest, end = "", start
    # nothing left of a line the model ended (typed_through): its own stop, not an echo
    ended = not given and bool(result.text)
    return replace(result, text=rest, start=start, end=end, prefetched=shown.prefetched,
                   stop_reason=StopReason.ECHO if not rest and not ended else result.stop_reason,
                   typed_through=len(result.text) - len(rest), token_ids=[], figures=NO_FIGURES)


class ShownAnswers:
    """Each document's last suggestion (the last `KEPT` documents'), read without the engine's
    lock (its own lock guards the map)."""

    def __init__(self) -> None:
        self._shown: OrderedDict[str, Shown] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, document: str) -> Shown | None:
        with self._lock:
            return self._shown.get(document)

    def keep(self, document: str, shown: Shown) -> None:
        with self._lock:
            self._shown[document] = shown
            self._shown.move_to_end(document)
            while len(self._shown) > KEPT:
                self._shown.popitem(last=False)

    def keep_made(self, request: CompletionRequest, made: Request, result: CompletionResult,
                  opts: EngineOptions) -> None:
        """Keep `result`, made now for `request` (`made`: its document split at the cursor and
        the rest of the file), for typing through it."""
        self.keep(request.document, Shown(made.before, made.after, result, opts, request.mode, request.max_tokens,
                                          made.rest))

    def forget(self, document: str) -> None:
        with self._lock:
            self._shown.pop(document, None)

    def answer(self, request: CompletionRequest, opts: EngineOptions) -> CompletionResult | None:
        """The rest of the document's last suggestion when the request typed its beginning
        (`typed_through`), timed as a request of its own; None: a new request."""
        t0 = time.perf_counter()
        shown = self.get(request.document)
        if shown is None or not shown.serves(request, opts):
            return None
        rest = typed_through(shown, request.before, request.after)
        if rest is None:
            return None
        ms = (time.perf_counter() - t0) * 1000
        result = rest_of(shown, rest, request)
        return replace(result, figures=replace(NO_FIGURES, engine_ms=round(ms, 2), times_ms=RequestTimes().split(ms)))

    def keep_prefetched(self, request: CompletionRequest, result: CompletionResult, opts: EngineOptions) -> None:
        """Keep `result`, made ahead of `request`, to be served whole to a request for the very
        same text and cursor (or one that typed its first characters)."""
        made = self.get(request.document)  # `complete` kept a non-empty result with its rest of the file
        self.keep(request.document, Shown(request.before, request.after, result, opts, request.mode,
                                          request.max_tokens, made.rest if made is not None and made.result is result
                                          else None, prefetched=True))
