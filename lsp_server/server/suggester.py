"""From an LSP completion request to a suggestion, and from a suggestion to LSP items.

One suggestion serves both `textDocument/inlineCompletion` and `textDocument/completion`:
requests for the same document, version, position and selected item share one engine run (an
editor that asks for both while typing gets one computation), and a request that differs
supersedes the run still going for that document. A suggestion is only returned for the
document version the request was made on. Each request has the latency budget of the settings
(`latencyBudgetMs`, from when it arrived): an answer the budget cut is continued in the
background (`WorkAhead.continued`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from collections.abc import Callable

from lsprotocol import types

from ..decoding.budget import Budget
from ..decoding.engine import CompletionRequest, CompletionResult
from ..decoding.request_times import log_text
from ..decoding.stopping.decision import StopReason
from ..positions import PositionError, line_end_of, offset_at, position_of, to_lf
from .documents import DocumentStore
from .engine_host import EngineHost, Ticket
from .telemetry import Telemetry
from .work_ahead import WorkAhead, end_of_insert

Report = Callable[[str, types.MessageType], None]

log = logging.getLogger(__name__)

ACCEPT_COMMAND = "syntaxlock.accepted"
LABEL_CHARS = 60
SHOWN_KEPT = 64  # suggestions remembered for their acceptance (the document they were made for)


@dataclass(frozen=True)
class Received:
    """What the server knew when a request arrived (set before any later message is handled)."""

    uri: str | None
    version: int | None
    t0: float


@dataclass
class Suggestion:
    id: str
    text: str  # insertText
    range: types.Range
    result: CompletionResult
    latency_ms: float


@dataclass
class Job:
    """One engine run, shared by the requests that ask for exactly the same thing."""

    key: tuple
    ticket: Ticket
    engine_text: str  # the document as the engine reads it ("\n" line ends): the result's offsets are in it
    task: asyncio.Task | None = None
    stopped: asyncio.Event = field(default_factory=asyncio.Event)  # set when superseded or forgotten
    waiters: int = 0
    counted: bool = False  # its superseding was counted
    suggestion: Suggestion | None = None

    def running(self) -> bool:
        """Its run has started and neither finished nor been stopped."""
        return not self.ticket.stopped() and self.task is not None and not self.task.done()

    def answers(self, key: tuple) -> bool:
        """Whether a request for `key` joins this run instead of starting one: the same request,
        not stopped, still running or done with a result to give again (not a failed run, and not
        one the budget cut: the engine has its continuation, or is making it)."""
        if self.key != key or self.ticket.stopped():
            return False
        if not self.task.done():
            return True
        return not self.task.cancelled() and self.task.result() is not None and not self.task.result().budget_cut


def _pos(p: tuple[int, int]) -> types.Position:
    return types.Position(line=p[0], character=p[1])


class Suggester:
    """Turns completion requests into suggestions: one engine run per document at a time,
    shared by identical requests, superseded by a different one."""

    def __init__(self, documents: DocumentStore, host: EngineHost, telemetry: Telemetry, report: Report,
                 enabled: Callable[[], bool], work_ahead: WorkAhead | None = None,
                 budget_ms: Callable[[], int] = lambda: 0) -> None:
        self.documents = documents
        self.host = host
        self.telemetry = telemetry
        self.report = report  # (message, type): to the editor and the log
        self.enabled = enabled  # the user's setting, read at each request
        self.work_ahead = work_ahead
        self.budget_ms = budget_ms  # the user's latency budget, read at each request (0: none)
        self._jobs: dict[str, Job] = {}
        self._shown: OrderedDict[str, tuple[str, str, Suggestion]] = OrderedDict()  # id -> (uri, text, s)

    def accepted(self, sid) -> tuple[str, str, tuple[int, int], bool] | None:
        """The document as accepting suggestion `sid` left it ("\n" line ends, as the engine
        reads it), the cursor after the suggestion, and whether the budget cut it (its rest is
        being decoded): (uri, text, cursor, partial); None for a suggestion not remembered."""
        entry = self._shown.pop(sid, None) if isinstance(sid, str) else None
        if entry is None:
            return None
        uri, text, s = entry
        try:
            a = offset_at(text, s.range.start.line, s.range.start.character)
            b = offset_at(text, s.range.end.line, s.range.end.character)
        except PositionError:
            return None
        return (uri, to_lf(text[:a] + s.text + text[b:]),
                end_of_insert((s.range.start.line, s.range.start.character), s.text), s.result.budget_cut)

    def forget(self, uri: str) -> None:
        job = self._jobs.pop(uri, None)
        if job is not None:
            job.ticket.stop()
            job.stopped.set()

    def changed(self, uri: str) -> None:
        """The document changed: a run for the older version is superseded (its result could
        only be stale)."""
        job = self._jobs.get(uri)
        if job is not None and job.running():
            job.ticket.stop(superseded=True)
            job.stopped.set()

    async def suggest(
        self,
        uri: str,
        position: types.Position,
        selected: types.SelectedCompletionInfo | None,
        received: Received | None,
    ) -> Suggestion | None:
        self.telemetry.count("requests")
        t0 = received.t0 if received else time.perf_counter()
        if not self.enabled() or not self.host.ready:
            return None
        if self.work_ahead is not None:
            self.work_ahead.requested(uri)
        doc = self.documents.get(uri)
        if doc is None:
            self.report(f"completion asked for a document that is not open: {uri}", types.MessageType.Warning)
            return None
        if doc.refused:
            log.debug("no completion in %s: %s", uri, doc.refused)
            return None
        version = doc.version
        stale = received is not None and received.uri == uri and received.version != version  # made on an older text
        if stale:
            log.debug("request for %s version %s, now %s: stale", uri, received.version, version)
            return None
        text = doc.text
        try:
            cursor = offset_at(text, position.line, position.character, doc.starts)
        except PositionError as e:
            self.report(f"completion in {uri}: {e}", types.MessageType.Warning)
            return None
        shift = 0
        sel_range = None
        if selected is not None:
            try:
                a = offset_at(text, selected.range.start.line, selected.range.start.character, doc.starts)
                b = offset_at(text, selected.range.end.line, selected.range.end.character, doc.starts)
            except PositionError as e:
                self.report(f"completion in {uri}: selected item range: {e}", types.MessageType.Warning)
                return None
            if b < a or not a <= cursor <= b:
                self.report(
                    f"completion in {uri}: the selected item's range does not hold the cursor",
                    types.MessageType.Warning,
                )
                return None
            text = text[:a] + selected.text + text[b:]
            cursor = a + len(selected.text)
            shift = len(selected.text) - (b - a)
            sel_range = (a, b)
        key = (version, cursor, selected.text if selected else None, sel_range)

        job = self._jobs.get(uri)
        if job is None or not job.answers(key):
            old = job
            # the engine reads "\n" line ends and offsets in that text: the one conversion of the cursor
            lf = doc.lf_text if selected is None else to_lf(text)
            job = Job(key, self.host.ticket(uri, version), lf)  # stops the previous ticket of uri
            self._jobs[uri] = job
            if old is not None:
                old.stopped.set()
            no_cr = lf is text  # to_lf gives the text itself back where it holds no "\r": same offsets
            request = CompletionRequest(lf, cursor=cursor if no_cr else len(to_lf(text[:cursor])), document=uri,
                                        workspace=self.documents.workspace(uri),
                                        budget=Budget.of(self.budget_ms(), start=t0))
            job.task = asyncio.ensure_future(self._run(request, job, t0))
        job.waiters += 1
        stop = asyncio.ensure_future(job.stopped.wait())
        try:
            # the run's result, or None at once when a newer request supersedes this one
            await asyncio.wait((job.task, stop), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            job.waiters -= 1
            if job.waiters == 0 and not job.task.done():
                job.ticket.stop()
            self.telemetry.count("cancelled")
            raise
        finally:
            stop.cancel()
        job.waiters -= 1
        result = job.task.result() if job.task.done() and not job.stopped.is_set() else None
        if result is None:
            if job.ticket.superseded and not job.counted:
                job.counted = True
                self.telemetry.count("superseded")
            return None
        if self.documents.version(uri) != version or self.documents.get(uri) is not doc:
            log.debug("document %s changed while completing: dropping the stale suggestion", uri)
            return None
        if not result.text:
            return None
        try:
            return self._suggestion(job, result, doc.text, text, job.engine_text, shift, sel_range, selected, t0)
        except PositionError as e:
            self.report(f"completion in {uri}: the engine's range is outside the text: {e}", types.MessageType.Error)
            return None

    async def _run(self, request: CompletionRequest, job: Job, arrived: float) -> CompletionResult | None:
        """The engine's run for `request` (which arrived at `arrived`, perf_counter); None when
        it was stopped or failed (reported)."""
        joining = time.perf_counter()
        try:
            if self.work_ahead is not None:
                await self.work_ahead.join(request.document, request.text, request.cursor)
            queued = time.perf_counter()
            result = await self.host.complete(request, job.ticket)
        except asyncio.CancelledError:
            return None
        except Exception:
            log.exception("completion failed in %s at offset %d", request.document, request.cursor)
            self.report(
                f"completion failed in {request.document} at line {request.line + 1} (see the server log)",
                types.MessageType.Error,
            )
            return None
        finally:
            self.host.release(job.ticket)
        # before the engine: a prefetch joined (`WorkAhead.join`), the worker thread busy (a background job's layer)
        before_the_engine = {"join": (queued - joining) * 1000, "queue": ((job.ticket.started_at or queued) - queued) * 1000}
        stopped = result is None or result.stop_reason == StopReason.CANCELLED or job.ticket.stopped()
        if stopped:
            ticket = job.ticket
            why = "superseded" if ticket.superseded else "cancelled"
            steps = "before it started" if result is None else f"after {result.figures.tokens_generated} decoding steps"
            lag = (time.perf_counter() - ticket.stopped_at) * 1000 if ticket.stopped_at else 0.0
            self.report(
                f"completion in {request.document} stopped ({why}) {steps}, {lag:.0f} ms after the stop",
                types.MessageType.Log,
            )
            return None
        # an offer searched for this request: not the rest of one typed through, not a prefetched answer as it was
        searched_now = not result.typed_through and not (result.prefetched and not result.figures.tokens_generated)
        if searched_now:
            self.telemetry.count(f"offer:{result.offer_path}")
        if result.prefetched and self.work_ahead is not None:
            self.work_ahead.stats["prefetch_served"] += 1
        if result.budget_cut and self.work_ahead is not None:
            self.telemetry.count("budget_cut")
            self.work_ahead.continued(request.document, request.text, request.cursor, result.text,
                                      tuple(result.token_ids) if result.text else ())
        if result.short_window and self.work_ahead is not None:
            self.work_ahead.served_short(request.document, request.text, request.cursor)
        log.info(
            "completed %s at offset %d: %s, offered by %s (checked in %.1f ms), prompt %d tokens%s (%d reused) %.0f ms, "
            "decode %.0f ms, %d sampled + %d forced; engine %.0f ms (compiler gate %.1f ms), done %.0f ms after arrival; %s",
            request.document, request.cursor, result.stop_reason, result.offer_path,
            result.figures.check_ms, result.figures.prompt_tokens, " (first window)" if result.short_window else "",
            result.figures.prompt_reused, result.figures.prompt_ms, result.figures.decode_ms,
            result.figures.tokens_generated, result.figures.tokens_forced, result.figures.engine_ms, result.figures.gate_ms,
            (time.perf_counter() - arrived) * 1000, log_text(before_the_engine | result.figures.times_ms),
        )
        return result

    def _suggestion(self, job: Job, result: CompletionResult, original: str, text: str, engine_text: str,
                    shift: int, sel_range, selected, t0: float) -> Suggestion:
        if job.suggestion is not None and self.telemetry.pending(job.suggestion.id):
            return job.suggestion  # the same run, asked for by another request, not yet settled
        eol = line_end_of(original)
        body = result.text if eol == "\n" else result.text.replace("\n", eol)  # the engine writes "\n"
        # the result's offsets are in the engine's "\n" text: the same lines and characters as the client's
        start, end = position_of(engine_text, result.start), position_of(engine_text, result.end)
        if selected is None:
            insert = body
            rng = types.Range(_pos(start), _pos(end))
        else:
            a, b = sel_range
            end = offset_at(text, *end) - shift  # back in the original document
            end = max(end, b)
            insert = selected.text + body
            rng = types.Range(selected.range.start, _pos(position_of(original, end)))
        latency_ms = (time.perf_counter() - t0) * 1000
        sid = self.telemetry.shown(latency_ms)
        job.suggestion = Suggestion(sid, insert, rng, result, latency_ms)
        self._shown[sid] = (job.ticket.uri, original, job.suggestion)
        while len(self._shown) > SHOWN_KEPT:
            self._shown.popitem(last=False)
        log.info(
            "suggestion %s in %.0f ms (%s, %d tokens): %r",
            sid, latency_ms, result.stop_reason, result.figures.tokens_generated + result.figures.tokens_forced, insert[:80],
        )
        return job.suggestion


def inline_items(s: Suggestion | None) -> types.InlineCompletionList:
    if s is None:
        return types.InlineCompletionList(items=[])
    return types.InlineCompletionList(
        items=[
            types.InlineCompletionItem(
                insert_text=s.text,
                range=s.range,
                command=types.Command(title="syntaxlock accepted", command=ACCEPT_COMMAND, arguments=[s.id]),
            )
        ]
    )


def completion_items(s: Suggestion | None, markdown: bool = False) -> types.CompletionList:
    if s is None:
        return types.CompletionList(is_incomplete=True, items=[])
    first = s.text.strip().splitlines()[0] if s.text.strip() else s.text
    label = first if len(first) <= LABEL_CHARS else first[: LABEL_CHARS - 1] + "…"
    return types.CompletionList(
        is_incomplete=True,  # the suggestion depends on every character typed
        items=[
            types.CompletionItem(
                label=label,
                kind=types.CompletionItemKind.Text,
                detail="syntaxlock",
                documentation=(
                    types.MarkupContent(kind=types.MarkupKind.Markdown, value=f"```python\n{s.text}\n```")
                    if markdown else types.MarkupContent(kind=types.MarkupKind.PlainText, value=s.text)
                ),
                sort_text="0",
                filter_text=s.text,
                preselect=True,
                text_edit=types.TextEdit(range=s.range, new_text=s.text),
                command=types.Command(title="syntaxlock accepted", command=ACCEPT_COMMAND, arguments=[s.id]),
            )
        ],
    )
