"""From an LSP completion request to a suggestion, and from a suggestion to LSP items.

One suggestion serves both `textDocument/inlineCompletion` and `textDocument/completion`:
requests for the same document, version, position and selected item share one engine run (an
editor that asks for both while typing gets one computation), and a request that differs
supersedes the run still going for that document (`runs.Runs`: one run per document). A
suggestion is only returned for the document version the request was made on. Each request has the latency budget of the settings
(`latencyBudgetMs`, from when it arrived): an answer the budget cut is continued in the
background (`WorkAhead.continued`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass
from collections.abc import Callable, Hashable

from lsprotocol import types

from ..decoding.results import CompletionRequest, CompletionResult, log_text
from ..decoding.budget import Budget
from ..decoding.stopping.policy import StopReason
from ..positions import PositionError, line_end_of, offset_at, position_of, to_lf
from .documents import DocumentStore
from .engine_host import EngineHost
from .runs import CANCELLED, Run, Runs, StopSignal
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


def joins(run: Run | None, asks: Hashable) -> bool:
    """Whether a request that asks `asks` joins `run` instead of starting one: the same request,
    not stopped, still running or done with a result to give again."""
    if run is None or run.asks != asks or run.stopped():
        return False
    return not run.task.done() or gave_a_whole_answer(run.task)


def gave_a_whole_answer(task: asyncio.Future) -> bool:
    """A finished run's task has an answer to give again: not a failed or stopped run (None), not
    one the budget cut (the engine has its continuation, or is making it)."""
    if task.cancelled():
        return False
    result = task.result()
    return result is not None and not result.budget_cut


def no_answer(result: CompletionResult | None, stop: StopSignal) -> bool:
    """The run gives no answer: stopped before the engine started it (or none was ready), while
    it decoded, or just after."""
    return result is None or result.stop_reason == StopReason.CANCELLED or stop.is_set()


def lf_offset(text: str, offset: int) -> int:
    """`offset` in `text` as an offset in the text with "\n" line ends (as the engine reads it)."""
    return offset if text.find("\r", 0, offset) < 0 else len(to_lf(text[:offset]))


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
        self.runs = Runs(superseded=self._superseded)  # the engine run of each document
        self._waiting: Counter[int] = Counter()  # requests waiting per run (its ticket)
        self._made: dict[str, tuple[int, Suggestion]] = {}  # per document: the latest suggestion, its run's ticket
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
        self.runs.forget(uri)
        self._made.pop(uri, None)

    def changed(self, uri: str) -> None:
        """The document changed: a run for the older version is superseded (its result could
        only be stale)."""
        self.runs.supersede(uri)

    def close(self) -> None:
        """The server stops: every run stops."""
        self.runs.stop_all()

    def _superseded(self, run: Run) -> None:
        if self._waiting[run.ticket]:  # the requests waiting for it get no suggestion
            self.telemetry.count("superseded")

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
        asks = (version, cursor, selected.text if selected else None, sel_range)
        # the engine reads "\n" line ends and offsets in that text: the one conversion of the document
        lf = doc.lf_text if selected is None else to_lf(text)

        run = self.runs.latest(uri)
        if not joins(run, asks):
            request = CompletionRequest(lf, cursor=lf_offset(text, cursor), document=uri,
                                        workspace=self.documents.workspace(uri),
                                        budget=Budget.of(self.budget_ms(), start=t0))
            run = self.runs.start(uri, asks, lambda stop: self._run(request, stop, t0))
        result = await self._outcome(run)
        if result is None:
            return None
        if self.documents.version(uri) != version or self.documents.get(uri) is not doc:
            log.debug("document %s changed while completing: dropping the stale suggestion", uri)
            return None
        if not result.text:
            return None
        try:
            return self._suggestion(run, result, doc.text, text, lf, shift, sel_range, selected, t0)
        except PositionError as e:
            self.report(f"completion in {uri}: the engine's range is outside the text: {e}", types.MessageType.Error)
            return None

    async def _outcome(self, run: Run) -> CompletionResult | None:
        """Wait for the run's result: None at once when the run is stopped (superseded: a newer
        request or a change), and when it failed. A request cancelled by the client stops the
        run when no other request waits for it."""
        self._waiting[run.ticket] += 1
        stopped = asyncio.ensure_future(run.signal.wait())
        try:
            await asyncio.wait((run.task, stopped), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            if self._leave(run) == 0:
                run.stop(CANCELLED)
            self.telemetry.count("cancelled")
            raise
        finally:
            stopped.cancel()
        self._leave(run)
        return run.task.result() if run.task.done() and not run.stopped() else None

    def _leave(self, run: Run) -> int:
        """A request stops waiting for `run`: how many still wait."""
        self._waiting[run.ticket] -= 1
        left = self._waiting[run.ticket]
        if left <= 0:
            del self._waiting[run.ticket]
        return left

    async def _run(self, request: CompletionRequest, stop: StopSignal, arrived: float) -> CompletionResult | None:
        """The engine's run for `request` (which arrived at `arrived`, perf_counter) until `stop`;
        None when it was stopped or failed (reported)."""
        joining = time.perf_counter()
        taken: list[float] = []  # when the worker thread took the request up
        try:
            if self.work_ahead is not None:
                await self.work_ahead.join(request.document, request.text, request.cursor)
            queued = time.perf_counter()
            result = await self.host.complete(request, stop, on_start=lambda: taken.append(time.perf_counter()))
        except asyncio.CancelledError:
            return None
        except Exception:
            log.exception("completion failed in %s at offset %d", request.document, request.cursor)
            self.report(
                f"completion failed in {request.document} at line {request.line + 1} (see the server log)",
                types.MessageType.Error,
            )
            return None
        # before the engine: a prefetch joined (`WorkAhead.join`), the worker thread busy (a background job's layer)
        before_the_engine = {"join": (queued - joining) * 1000, "queue": ((taken[0] if taken else queued) - queued) * 1000}
        if no_answer(result, stop):
            stopped = stop.stopped
            why = stopped.why if stopped else CANCELLED
            steps = "before it started" if result is None else f"after {result.figures.tokens_generated} decoding steps"
            lag = (time.perf_counter() - stopped.at) * 1000 if stopped else 0.0
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
            self.work_ahead.served_short(request.document, request.text, request.cursor, urgent=not result.without_block)
        log.info(
            "completed %s at offset %d: %s, offered by %s (checked in %.1f ms), prompt %d tokens%s (%d reused) %.0f ms, "
            "decode %.0f ms, %d sampled + %d forced; engine %.0f ms (compiler gate %.1f ms), done %.0f ms after arrival; %s",
            request.document, request.cursor, result.stop_reason, result.offer_path,
            result.figures.check_ms, result.figures.prompt_tokens,
            " (without the context block)" if result.without_block else " (first window)" if result.short_window else "",
            result.figures.prompt_reused, result.figures.prompt_ms, result.figures.decode_ms,
            result.figures.tokens_generated, result.figures.tokens_forced, result.figures.engine_ms, result.figures.gate_ms,
            (time.perf_counter() - arrived) * 1000, log_text(before_the_engine | result.figures.times_ms, result.figures.off_cpu_ms),
        )
        return result

    def _suggestion(self, run: Run, result: CompletionResult, original: str, text: str, engine_text: str,
                    shift: int, sel_range, selected, t0: float) -> Suggestion:
        ticket, made = self._made.get(run.document, (None, None))
        if ticket == run.ticket and self.telemetry.pending(made.id):
            return made  # the same run, asked for by another request, not yet settled
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
        made = Suggestion(sid, insert, rng, result, latency_ms)
        self._made[run.document] = (run.ticket, made)
        self._shown[sid] = (run.document, original, made)
        while len(self._shown) > SHOWN_KEPT:
            self._shown.popitem(last=False)
        log.info(
            "suggestion %s in %.0f ms (%s, %d tokens): %r",
            sid, latency_ms, result.stop_reason, result.figures.tokens_generated + result.figures.tokens_forced, insert[:80],
        )
        return made


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
