"""Work done before the user asks: the prompt at the cursor prefilled while the user pauses, and
the next suggestion after an accepted one computed before the user presses Enter.

    ahead = WorkAhead(documents, host, enabled=lambda: True)
    ahead.cursor(uri, version, line, character)   # the client's syntaxlock/cursor notification
    ahead.changed(uri, version, (line, character)) # didChange: the end of the last change
    ahead.accepted(uri, text_after, (line, character))   # a suggestion was accepted
    await ahead.join(uri, text, cursor)   # a request (cursor: an offset in text): wait for its prefetch

Why: the first suggestion in a file costs its prompt, ~1,000 tokens at ~2.3 ms each on a 2-core
CPU (the arithmetic limit for SmolLM2-135M there), so it must be computed before it is asked
for. The rules that keep this from costing the user anything:
- only the document the user is in (the last one with a cursor report, a change or a request)
  gets work; a new focus drops the work planned for the previous one and stops what runs;
- a prefill starts after a pause (`PAUSE_S` without a cursor move or a change), a prefetch as
  soon as no request runs; the first prefill of a document (its cursor just learnt: reported
  with the opening, or the first change of a client that never reports it) starts at once, as
  the user has not moved yet (docs/latency.md: it gives the prefill a quarter of a second more
  before a request that comes soon after opening); both run on the engine's worker thread only while no request is
  queued or running, and a request stops a prefill within one chunk of 64 tokens (a chunk once
  started is finished: `PromptCache.prefill`) and reuses all it computed;
- a request answered from a short first window (`CompletionResult.short_window`: the KV cache
  lacked most of the full window) is followed at once by the prefill of the full window at its
  text and cursor, so that the next request finds it (`WorkAhead.served_short`);
- a prefill is `CompletionEngine.prefill` (KV cache and parse of the text before the cursor;
  nothing when the cache holds the prompt already); a prefetch is a whole completion kept for
  the document (`CompletionEngine.prefetch`), served by the typing-through path to a request
  for the very same text and cursor (a request that comes while its prefetch runs waits for it
  instead of stopping it);
- after an accepted suggestion, the prefetch is made for the document as pressing Enter will
  leave it: a new line with the accepted line's indentation, one level deeper after a `:`
  (what VS Code and Neovim do by default);
- an answer the latency budget cut (`decoding/budget.py`) is continued at once: a prefetch of
  the same request that decodes on from the answer's tokens (`Plan.resume`), valid while the
  user types the answer on; a request at the end of the whole answer (it was accepted) waits
  for it, and its rest is then served by typing through (`engine.typed_through`);
- when the work is done nothing more runs: the server is idle a prompt's prefill after the last
  keystroke at most.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import re
import time
from collections import Counter
from dataclasses import dataclass
from collections.abc import Callable

from ..decoding.results import CompletionRequest
from ..decoding.stopping.policy import StopReason
from ..positions import PositionError, offset_at, to_lf, utf16_len
from .documents import DocumentStore
from .engine_host import EngineHost

log = logging.getLogger(__name__)

PAUSE_S = 0.25  # no cursor move or change for this long: the user paused
INDENT_UNIT = "    "
OPENS_BLOCK = re.compile(r":\s*(#.*)?$")


class Work(enum.Enum):
    PREFILL = "prefill"  # the KV cache of the prompt at a cursor
    PREFETCH = "prefetch"  # a whole completion at a cursor, kept for the request


@dataclass(frozen=True)
class Plan:
    """One piece of work for a document: at offset `cursor` of `text` (the document as it is, or
    as the plan expects it to be, "\n" line ends as the engine reads it), valid while the
    document's text is one of `valid_for`. The client's position is converted when planned."""

    work: Work
    uri: str
    text: str
    cursor: int
    valid_for: tuple[str, ...]
    resume: tuple[int, ...] = ()  # a continuation: the tokens of the answer the budget cut
    partial: str = ""  # and its text: valid too while the document is `text` with a start of it typed
    urgent: bool = False  # run as soon as no request runs (no pause first)

    def split(self) -> tuple[str, str]:
        """The plan's text before and after its cursor."""
        return self.text[: self.cursor], self.text[self.cursor :]

    def valid(self, text: str) -> bool:
        """Whether the plan still serves a document whose text is `text`."""
        if text in self.valid_for:
            return True
        if not self.partial:
            return False
        before, after = self.split()
        typed = len(text) - len(self.text)
        return (0 < typed <= len(self.partial) and text.startswith(before) and text.endswith(after)
                and text[len(before) : len(before) + typed] == self.partial[:typed])


def after_enter(text: str, line: int, character: int) -> tuple[str, int, int]:
    """The document after pressing Enter at a cursor, as editors indent the new line by default:
    the cursor line's indentation, one INDENT_UNIT deeper after a line ending with `:` (a tab
    where the line is indented with tabs); and the new cursor."""
    off = offset_at(text, line, character)
    start = text.rfind("\n", 0, off) + 1
    head = text[start:off]
    indent = head[: len(head) - len(head.lstrip(" \t"))]
    if OPENS_BLOCK.search(head):
        indent += "\t" if indent.startswith("\t") else INDENT_UNIT
    return text[:off] + "\n" + indent + text[off:], line + 1, utf16_len(indent)


def end_of_insert(start: tuple[int, int], inserted: str) -> tuple[int, int]:
    """The cursor after inserting `inserted` at `start` (LSP positions, UTF-16; \n, \r\n and a
    lone \r each end a line)."""
    parts = to_lf(inserted).split("\n")
    if len(parts) == 1:
        return start[0], start[1] + utf16_len(inserted)
    return start[0] + len(parts) - 1, utf16_len(parts[-1])


class WorkAhead:
    """Plans and runs the background work of one server (see the module's docstring)."""

    def __init__(self, documents: DocumentStore, host: EngineHost, enabled: Callable[[], bool],
                 pause_s: float = PAUSE_S) -> None:
        self.documents = documents
        self.host = host
        self.enabled = enabled  # the user's settings allow it (read at each step)
        self.pause_s = pause_s
        self.focus: str | None = None
        self._cursors: dict[str, tuple[int, int]] = {}  # the last cursor reported per document
        self._plans: list[Plan] = []  # for the focused document, in order
        self._timer: asyncio.TimerHandle | None = None
        self._running: tuple[Plan, asyncio.Task] | None = None
        self.stats: Counter = Counter()
        host.on_idle(self._schedule)

    # --- events --------------------------------------------------------------------------------
    def cursor(self, uri: str, version: int | None, line: int, character: int) -> None:
        """The client reported the cursor (it moved, or the editor came to the front)."""
        first = uri not in self._cursors
        self._cursors[uri] = (line, character)
        self._focus_on(uri)
        doc = self.documents.get(uri)
        change_on_its_way = doc is not None and version is not None and doc.version != version
        if doc is None or change_on_its_way:
            return  # not open yet (planned at didOpen), or a change is on its way
        self._plan_prefill(uri, at_once=first)

    def opened(self, uri: str) -> None:
        if uri in self._cursors:  # the cursor came before the document
            self._focus_on(uri)
            self._plan_prefill(uri, at_once=True)

    def changed(self, uri: str, cursor: tuple[int, int] | None) -> None:
        """The document changed; `cursor`: where the last change ended (the likely cursor)."""
        first = cursor is not None and uri not in self._cursors
        if cursor is not None:
            self._cursors[uri] = cursor
        self._focus_on(uri)
        self._plan_prefill(uri, at_once=first)

    def closed(self, uri: str) -> None:
        self._cursors.pop(uri, None)
        if self.focus == uri:
            self.focus = None
            self._drop_plans()

    def requested(self, uri: str) -> None:
        """A completion request: the user is in this document."""
        self._focus_on(uri)

    def accepted(self, uri: str, text: str, cursor: tuple[int, int], partial: bool = False) -> None:
        """A suggestion was accepted: `text` is the document with it ("\n" line ends, as the
        engine reads it), `cursor` after it. The next suggestion is prefetched for the document
        after Enter; not after an answer the budget cut (`partial`): its continuation, planned
        when it was offered, is what comes next there."""
        if partial:
            self._focus_on(uri)
            return
        try:
            entered, line, character = after_enter(text, *cursor)
            at = offset_at(entered, line, character)
        except PositionError:
            return
        self._focus_on(uri)
        self._plans = [p for p in self._plans if p.work is Work.PREFETCH] + [
            Plan(Work.PREFETCH, uri, entered, at, (text, entered))]
        self._schedule()

    def continued(self, uri: str, text: str, cursor: int, partial: str, resume: tuple[int, ...]) -> None:
        """The budget cut the answer `partial` to the request at offset `cursor` of `text`
        ("\n" line ends): decode on from its tokens `resume` in the background, first thing."""
        if self.focus != uri:
            return
        plan = Plan(Work.PREFETCH, uri, text, cursor, (text,), tuple(resume), partial)
        self._plans = [plan] + [p for p in self._plans if p.work is Work.PREFETCH]
        self.stats["continuations_planned"] += 1
        self._schedule()

    def served_short(self, uri: str, text: str, cursor: int, urgent: bool = True) -> None:
        """A request at offset `cursor` of `text` ("\n" line ends) was answered from the short
        first window: the full window's prefill there comes next, as soon as no request runs
        (`urgent`), else after the user's pause (answered from the full window without its
        context block: the answers are as good as with the block off, and the window with the
        block is not worth a keystroke's wait for the chunk it would be computing)."""
        if self.focus != uri:
            return
        keep = [p for p in self._plans if p.work is Work.PREFETCH and p.valid(text)]
        self._plans = keep + [Plan(Work.PREFILL, uri, text, cursor, (text,), urgent=urgent)]
        self.stats["full_windows_planned"] += 1
        self._schedule()

    async def join(self, uri: str, text: str, cursor: int) -> None:
        """Before a request runs: wait for the prefetch running for exactly this text and cursor
        (its result then serves the request without a model call), or for the continuation of
        an answer the budget cut when the request is at the end of that whole answer (accepted)."""
        running = self._running
        if running is None:
            return
        plan, task = running
        if plan.work is not Work.PREFETCH or plan.uri != uri:
            return
        same = (plan.text, plan.cursor) == (text, cursor)
        if not same and plan.partial:
            before, after = plan.split()
            same = text[:cursor] == before + plan.partial and text[cursor:] == after
        if same:
            self.stats["requests_joined_a_prefetch"] += 1
            await asyncio.shield(task)

    # --- planning ------------------------------------------------------------------------------
    def _focus_on(self, uri: str) -> None:
        if self.focus != uri:
            self.focus = uri
            self._drop_plans()

    def _drop_plans(self) -> None:
        self._plans = []
        if self._running is not None:
            self.host.stop_background()

    def _plan_prefill(self, uri: str, at_once: bool = False) -> None:
        doc = self.documents.usable(uri)
        cursor = self._cursors.get(uri)
        if doc is None or cursor is None:
            return
        # a prefetch still valid for this text stays first (its prefill comes with it)
        text = doc.lf_text  # as the engine reads it (a request's text too)
        try:
            at = offset_at(text, *cursor)
        except PositionError:
            return  # a cursor past the text: the change that moves it is on its way
        keep = [p for p in self._plans if p.work is Work.PREFETCH and p.valid(text)]
        self._plans = keep + [Plan(Work.PREFILL, uri, text, at, (text,))]
        self._schedule(at_once)

    def _schedule(self, at_once: bool = False) -> None:
        """(Re)start the pause: the first plan runs when nothing happened for `pause_s` (a
        prefetch as soon as no request runs: the accept said what comes next; `at_once`: a
        document's first prefill)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._plans:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        first = self._plans[0]
        no_pause = at_once or first.urgent or first.work is Work.PREFETCH
        delay = 0.0 if no_pause else self.pause_s
        self._timer = loop.call_later(delay, self._start)

    def _start(self) -> None:
        self._timer = None
        busy = self._running is not None or self.host.busy
        if busy or not self._plans:
            return
        if not self.enabled() or not self.host.ready:
            self._plans = []
            return
        plan = self._plans[0]
        if not self._still_wanted(plan):
            self._plans.pop(0)
            self.stats[f"{plan.work.value}_dropped"] += 1
            self._schedule()
            return
        task = asyncio.ensure_future(self._run(plan))
        self._running = (plan, task)

    def _still_wanted(self, plan: Plan) -> bool:
        """The plan is for the focused document, which is usable and has the text it was made for."""
        doc = self.documents.usable(plan.uri)
        return plan.uri == self.focus and doc is not None and plan.valid(doc.lf_text)

    async def _run(self, plan: Plan) -> None:
        request = CompletionRequest(plan.text, cursor=plan.cursor, document=plan.uri,
                                    workspace=self.documents.workspace(plan.uri), resume=plan.resume)
        t0 = time.perf_counter()
        done = False
        try:
            if plan.work is Work.PREFILL:
                out = await self.host.background(lambda e, o, c: e.prefill(request, c, o), plan.uri)
                done = out is not None and out.complete
                if out is not None:
                    self.stats["prefill_tokens_computed"] += out.computed
                    log.info("prefilled %s at offset %d: %d tokens (%d reused, %d computed) in %.0f ms%s",
                             plan.uri, plan.cursor, out.prompt_tokens, out.reused, out.computed,
                             (time.perf_counter() - t0) * 1000, "" if done else ", stopped")
            else:
                out = await self.host.background(lambda e, o, c: e.prefetch(request, c, o), plan.uri)
                done = out is not None and out.stop_reason != StopReason.CANCELLED
                if out is not None:
                    log.info("prefetched %s at offset %d: %s, %r in %.0f ms", plan.uri, plan.cursor,
                             out.stop_reason, out.text[:60], (time.perf_counter() - t0) * 1000)
        except Exception:
            log.exception("%s of %s failed", plan.work.value, plan.uri)
            done = True  # not again
        finally:
            self._running = None
        if done:
            self.stats[f"{plan.work.value}_done"] += 1
            if self._plans and self._plans[0] is plan:
                self._plans.pop(0)
        else:
            self.stats[f"{plan.work.value}_stopped"] += 1
        if not self.host.busy:
            self._schedule()

    def report(self) -> dict:
        return {"focus": self.focus, "planned": len(self._plans), "running": self._running is not None,
                **dict(self.stats)}


def _field(obj, name: str):
    """A member of a notification's params: a dict, or the namedtuple pygls makes of it."""
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_cursor(params) -> tuple[str, int | None, int, int]:
    """(uri, version, line, character) of a `syntaxlock/cursor` notification:
    `{"textDocument": {"uri", "version"?}, "position": {"line", "character"}}` (UTF-16).
    Raises ValueError saying what is wrong."""
    doc, pos = _field(params, "textDocument"), _field(params, "position")
    uri = _field(doc, "uri") if doc is not None else None
    if not isinstance(uri, str) or pos is None:
        raise ValueError("expected {textDocument: {uri, version}, position: {line, character}}")
    version = _field(doc, "version")
    line, character = _field(pos, "line"), _field(pos, "character")
    for name, v in (("line", line), ("character", character)):
        if not _is_int(v) or v < 0:
            raise ValueError(f"position.{name} must be an integer >= 0, not {v!r}")
    if version is not None and not _is_int(version):
        raise ValueError(f"textDocument.version must be an integer, not {version!r}")
    return uri, version, line, character
