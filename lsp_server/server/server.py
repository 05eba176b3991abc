"""The syntaxlock language server: a typed pygls LanguageServer and thin feature handlers.

    server = create_server()
    server.start_io()                    # or server.start_tcp(host, port)

Features: inline completion (LSP 3.18) and one-item completion with the same suggestion,
incremental document sync (UTF-16 positions), settings from initializationOptions and
workspace/didChangeConfiguration, commands for acceptance telemetry and status, and a
`syntaxlock/status` notification (loading | ready | error | disabled) with `$/progress` reports
while the engine loads. The model loads in the background: `initialize` is answered at once and
requests made before the engine is ready get an empty result. No request can bring the server
down: bad input is answered with an LSP error or an empty result and logged.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
import sys
import time
from typing import Any

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.protocol.language_server import lsp_method

from ..decoding.repo_context import RepoContexts, block_share
from . import transport
from .documents import DocumentError, DocumentStore
from .engine_host import EngineHost, Status
from .load_progress import LoadProgress
from .protocol import RobustProtocol
from .suggester import Received, Suggester, completion_items, inline_items
from .settings import SECTION, ServerOptions
from .telemetry import Telemetry
from .work_ahead import WorkAhead, end_of_insert, parse_cursor
from ..decoding.workspace_context import _path_of

log = logging.getLogger(__name__)
# the lines the client also gets as window/logMessage: an editor that shows the server's stderr and
# its log messages in one place (VS Code's output channel) leaves this logger's lines out of the first
sent_log = logging.getLogger("lsp_server.logMessage")

NAME = "syntaxlock"
VERSION = "0.1.0"
STATUS_NOTIFICATION = "syntaxlock/status"
CURSOR_NOTIFICATION = "syntaxlock/cursor"  # client -> server: where the cursor is (debounced)
COMMANDS = ("syntaxlock.accepted", "syntaxlock.dismissed", "syntaxlock.stats", "syntaxlock.status")
FLUSH_INTERVAL_S = 60.0  # telemetry reaches its file at most this often (and at exit)
COMPLETION_METHODS = (types.TEXT_DOCUMENT_INLINE_COMPLETION, types.TEXT_DOCUMENT_COMPLETION)

RECEIVED: contextvars.ContextVar[Received | None] = contextvars.ContextVar("syntaxlock_received", default=None)


def _to_the_user(method: str):
    """A protocol handler of `method` that passes it to the server's own feature (pygls' would
    feed its workspace, which this server does not use)."""

    @lsp_method(method)
    def handler(self, params):
        yield from self._user(method, params)

    return handler


class SyntaxlockProtocol(RobustProtocol):
    """The robust protocol (framing, envelopes, lifecycle: `protocol`) with three changes:
    positions are always UTF-16; documents live in the server's own store (pygls' workspace is
    not fed); and completion requests note the document version they were made on before any
    later message is read."""

    _server: SyntaxlockServer

    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams):
        general = params.capabilities.general
        if general is not None and general.position_encodings:
            general.position_encodings = [types.PositionEncodingKind.Utf16]
        return (yield from super().lsp_initialize(params))

    def _user(self, method: str, params):
        if (handler := self.fm.features.get(method)) is not None:
            yield handler, (params,), None

    lsp_text_document__did_open = _to_the_user(types.TEXT_DOCUMENT_DID_OPEN)
    lsp_text_document__did_change = _to_the_user(types.TEXT_DOCUMENT_DID_CHANGE)
    lsp_text_document__did_close = _to_the_user(types.TEXT_DOCUMENT_DID_CLOSE)
    lsp_text_document__did_save = _to_the_user(types.TEXT_DOCUMENT_DID_SAVE)

    def _handle_request(self, msg_id, method_name: str, params: Any):
        if method_name in COMPLETION_METHODS:
            uri = getattr(getattr(params, "text_document", None), "uri", None)
            version = self._server.documents.version(uri) if isinstance(uri, str) else None
            RECEIVED.set(Received(uri, version, time.perf_counter()))
        return super()._handle_request(msg_id, method_name, params)


class SyntaxlockServer(LanguageServer):
    """The server's state: settings, documents, the engine host, telemetry, status reporting."""

    def __init__(self) -> None:
        super().__init__(NAME, VERSION, protocol_cls=SyntaxlockProtocol,
                         text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
        self.options = ServerOptions()
        self.documents = DocumentStore()
        self.telemetry = Telemetry()
        self.host = EngineHost(self._status_from_any_thread)
        self.work_ahead = WorkAhead(self.documents, self.host, lambda: self.options.enabled and self.options.work_ahead)
        # context blocks made ahead (on open, cursor report, save), read by the requests through
        # `documents.workspace`; a new one plans a prefill with it (docs/context.md)
        # jedi waits while the model runs, work ahead included: the block is not needed at once
        # (the window without it serves meanwhile, parts.py), the prefill and the request are
        self.contexts = RepoContexts(busy=lambda: self.host.working, on_ready=self._context_ready_from_any_thread,
                                     share=block_share(self.options.context_share, None))
        self.documents.blocks = self.contexts.block
        self._context_lines: dict[str, int] = {}  # the cursor's line last reported per document
        self.suggester = Suggester(self.documents, self.host, self.telemetry, self.report,
                                   lambda: self.options.enabled, self.work_ahead,
                                   budget_ms=lambda: self.options.latency_budget_ms)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._pending_problems: list[str] = []
        self._last_status: Status | None = None
        self.load_progress = LoadProgress(self, last_status=lambda: self._last_status)

    # --- the session ---------------------------------------------------------------------------
    def start_io(self, stdin=None, stdout=None) -> int:
        """Serve the client on stdin/stdout until it exits; the process's exit status."""
        try:
            return transport.serve_stdio(self.protocol, stdin or sys.stdin.buffer, stdout or sys.stdout.buffer)
        finally:
            self.close()

    def start_tcp(self, host: str, port: int) -> int:
        """Serve one client connecting to host:port until it exits; the process's exit status."""
        try:
            return transport.serve_tcp(self.protocol, host, port)
        finally:
            self.close()

    def close(self) -> None:
        """The end of the session, however it ended: telemetry saved, the engine stopped."""
        self.telemetry.flush()
        self.contexts.shutdown()
        self.suggester.close()
        self.host.shutdown()

    # --- context blocks (decoding/repo_context) ----------------------------------------------
    def context_ahead(self, uri: str, line: int | None = None) -> None:
        """Make the document's context block for the cursor at `line` (the last one reported
        when None) on the contexts' thread, unless it is made."""
        doc = self.documents.usable(uri)
        if doc is None or not self.options.enabled:
            return
        if line is None:
            line = self._context_lines.get(uri, 0)
        self._context_lines[uri] = line
        self.contexts.request(uri, doc.lf_text, line, self.documents.texts())

    def _context_ready_from_any_thread(self, uri: str) -> None:
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self._context_ready, uri)

    def _context_ready(self, uri: str) -> None:
        """A new block for `uri`: the prompt's start changed, so the work ahead prefills it again
        (only for the document the user is in)."""
        if self.work_ahead.focus == uri:
            self.work_ahead.changed(uri, None)

    # --- messages to the client --------------------------------------------------------------
    def report(self, message: str, kind: types.MessageType = types.MessageType.Info) -> None:
        """Log locally and in the client's log (window/logMessage). Event-loop thread only."""
        levels = {types.MessageType.Error: logging.ERROR, types.MessageType.Warning: logging.WARNING}
        level = levels.get(kind, logging.INFO)
        sent_log.log(level, "%s", message)
        try:
            self.window_log_message(types.LogMessageParams(type=kind, message=message))
        except Exception:
            log.exception("cannot send window/logMessage")

    def show(self, message: str, kind: types.MessageType = types.MessageType.Warning) -> None:
        log.warning("%s", message)
        try:
            self.window_show_message(types.ShowMessageParams(type=kind, message=message))
        except Exception:
            log.exception("cannot send window/showMessage")

    def report_server_error(self, error: Exception, source) -> None:
        """pygls' hook for errors outside a request's answer: logged, never a pop-up."""
        message = f"syntaxlock: {getattr(source, '__name__', source)}: {error}"
        sent_log.error("%s", message)
        try:
            self.window_log_message(types.LogMessageParams(type=types.MessageType.Error, message=message))
        except Exception:
            pass

    # --- options -----------------------------------------------------------------------------
    def apply_settings(self, raw: Any, *, start: bool = True) -> None:
        new, problems = self.options.merged(raw)
        if problems:
            self._pending_problems.extend(problems)
        self.options = new
        self._configure_contexts()
        if start:
            self.flush_problems()
            self.host.configure(new.engine, new.enabled)

    def _configure_contexts(self) -> None:
        """The context blocks' share as the settings and the model loaded decide (`block_share`:
        the model's when the setting is unset, so again each time a model is loaded)."""
        self.contexts.configure(block_share(self.options.context_share, self.host.fim),
                                self.options.engine.context_tokens)

    def flush_problems(self) -> None:
        if self._pending_problems:
            self.show("syntaxlock settings: " + "; ".join(self._pending_problems), types.MessageType.Warning)
            self._pending_problems = []

    # --- status ------------------------------------------------------------------------------
    def _status_from_any_thread(self, status: Status) -> None:
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(self._emit_status, status)
        except RuntimeError:  # the loop closed meanwhile
            pass

    def _emit_status(self, status: Status) -> None:
        last, self._last_status = self._last_status, status
        if status.state == "ready":
            self._configure_contexts()  # another model may read the block otherwise
        if status.reverted is not None and self.host.desired == status.reverted:
            # the new model failed to load and no newer settings came since: the settings say so too
            self.options = dataclasses.replace(self.options, engine=status.reverted)
        # messages first: a client that sees the status has its explanation already
        if last is None or (last.state, last.message) != (status.state, status.message):
            kind = types.MessageType.Error if status.state == "error" else types.MessageType.Info
            pct = f" ({status.percentage}%)" if status.percentage is not None and status.state == "loading" else ""
            self.report(f"syntaxlock {status.state}: {status.message}{pct}", kind)
        new_error = status.state == "error" and (last is None or last.message != status.message)
        if new_error or status.reverted is not None:
            self.show(f"syntaxlock: {status.message}", types.MessageType.Error)
        # the work-done progress before the status too: a client that sees "ready" has seen the
        # progress end (unless it had not yet answered the progress token's creation)
        self.load_progress.update(status)
        try:
            self.protocol.notify(STATUS_NOTIFICATION, status.to_json())
        except Exception:
            log.exception("cannot send %s", STATUS_NOTIFICATION)

    def supports_markdown_documentation(self) -> bool:
        item = getattr(getattr(getattr(self.client_capabilities, "text_document", None), "completion", None),
                       "completion_item", None)
        return types.MarkupKind.Markdown in (getattr(item, "documentation_format", None) or ())


# --- feature handlers ------------------------------------------------------------------------

def on_initialize(ls: SyntaxlockServer, params: types.InitializeParams) -> None:
    ls.loop = asyncio.get_running_loop()
    ls.apply_settings(params.initialization_options, start=False)
    folders = [f.uri for f in params.workspace_folders or []] or [params.root_uri]
    ls.contexts.set_roots(tuple(_path_of(u) for u in folders if u))  # the context blocks' workspace


def on_initialized(ls: SyntaxlockServer, params: types.InitializedParams) -> None:
    ls.flush_problems()
    ls.host.configure(ls.options.engine, ls.options.enabled)


async def on_did_change_configuration(ls: SyntaxlockServer, params: types.DidChangeConfigurationParams) -> None:
    settings = params.settings
    if not settings and getattr(getattr(ls.client_capabilities, "workspace", None), "configuration", False):
        try:
            pulled = await ls.workspace_configuration_async(
                types.ConfigurationParams(items=[types.ConfigurationItem(section=SECTION)])
            )
            settings = pulled[0] if pulled else None
        except Exception as e:
            ls.report(f"cannot read the settings (workspace/configuration): {e}", types.MessageType.Warning)
            return
    if settings is None:
        return
    ls.apply_settings(settings)


def on_did_open(ls: SyntaxlockServer, params: types.DidOpenTextDocumentParams) -> None:
    d = params.text_document
    doc = ls.documents.open(d.uri, d.language_id, d.version, d.text)
    if doc.refused:
        ls.report(f"{d.uri}: no completions here: {doc.refused}", types.MessageType.Info)
        return
    ls.work_ahead.opened(d.uri)
    ls.context_ahead(d.uri)


def on_did_change(ls: SyntaxlockServer, params: types.DidChangeTextDocumentParams) -> None:
    changes = []
    for c in params.content_changes:
        if isinstance(c, types.TextDocumentContentChangePartial):
            r = c.range
            changes.append((((r.start.line, r.start.character), (r.end.line, r.end.character)), c.text))
        else:
            changes.append((None, c.text))
    uri = params.text_document.uri
    ls.suggester.changed(uri)
    try:
        doc = ls.documents.change(uri, params.text_document.version, changes)
    except DocumentError as e:
        ls.report(f"document change not applied: {e}", types.MessageType.Error)
        return
    if doc.refused:
        log.debug("%s: %s", uri, doc.refused)
        return
    last = params.content_changes[-1] if params.content_changes else None
    cursor = None
    if isinstance(last, types.TextDocumentContentChangePartial):
        cursor = end_of_insert((last.range.start.line, last.range.start.character), last.text)
        ls.contexts.edited(uri, cursor[0])  # the other documents' blocks show the region edited last
    ls.work_ahead.changed(uri, cursor)


def on_did_save(ls: SyntaxlockServer, params: types.DidSaveTextDocumentParams) -> None:
    """A saved document: its context block is made again (the other modules may have changed
    what it imports), and the blocks of the other documents at their next cursor report."""
    ls.context_ahead(params.text_document.uri)


def on_did_close(ls: SyntaxlockServer, params: types.DidCloseTextDocumentParams) -> None:
    uri = params.text_document.uri
    doc = ls.documents.get(uri)
    if doc is not None and not doc.refused:
        ls.contexts.closed(uri, doc.lf_text)  # still searched for neighbours a while
    ls._context_lines.pop(uri, None)
    ls.documents.close(uri)
    ls.suggester.forget(uri)
    ls.work_ahead.closed(uri)
    ls.host.forget(uri)


def on_cursor(ls: SyntaxlockServer, params) -> None:
    """`syntaxlock/cursor`: the cursor moved (the client debounces it); the server prefills the
    prompt there when the user pauses."""
    try:
        uri, version, line, character = parse_cursor(params)
    except ValueError as e:
        log.warning("%s ignored: %s", CURSOR_NOTIFICATION, e)
        return
    ls.work_ahead.cursor(uri, version, line, character)
    if version is None or ls.documents.version(uri) == version:
        ls.context_ahead(uri, line)


async def on_inline_completion(ls: SyntaxlockServer, params: types.InlineCompletionParams):
    selected = params.context.selected_completion_info if params.context else None
    s = await ls.suggester.suggest(params.text_document.uri, params.position, selected, RECEIVED.get())
    return inline_items(s)


async def on_completion(ls: SyntaxlockServer, params: types.CompletionParams):
    if not ls.options.completion_items:
        return types.CompletionList(is_incomplete=False, items=[])
    s = await ls.suggester.suggest(params.text_document.uri, params.position, None, RECEIVED.get())
    return completion_items(s, markdown=ls.supports_markdown_documentation())


def on_shutdown(ls: SyntaxlockServer, params: None) -> None:
    ls.close()


def on_exit(ls: SyntaxlockServer, params: None) -> None:
    """Also reached without a shutdown request (an editor that just quits)."""
    ls.close()


def _counted(ls: SyntaxlockServer, what: str, count, args) -> bool:
    """The editor's report that the suggestion `args[0]` was `what` (accepted, dismissed),
    counted by `count`; False (and a warning) for an id the server never gave."""
    ok = bool(args) and count(args[0])
    ls.telemetry.flush_every(FLUSH_INTERVAL_S)
    if not ok:
        ls.report(f"syntaxlock.{what}: unknown suggestion id {args[:1]!r}", types.MessageType.Warning)
    return ok


def cmd_accepted(ls: SyntaxlockServer, *args) -> bool:
    if not _counted(ls, "accepted", ls.telemetry.accepted, args):
        return False
    after = ls.suggester.accepted(args[0])
    if after is not None:
        ls.work_ahead.accepted(*after)
    return True


def cmd_dismissed(ls: SyntaxlockServer, *args) -> bool:
    return _counted(ls, "dismissed", ls.telemetry.dismissed, args)


def cmd_stats(ls: SyntaxlockServer, *args) -> dict:
    return ls.telemetry.stats()


def cmd_status(ls: SyntaxlockServer, *args) -> dict:
    return ls.host.describe() | {"settings": ls.options.to_json(), "documents": ls.documents.describe(),
                                 "workAhead": ls.work_ahead.report(), "kvCache": ls.host.cache_report(),
                                 "memory": ls.host.memory_report(), "repoContext": ls.contexts.report()}


def create_server() -> SyntaxlockServer:
    ls = SyntaxlockServer()
    ls.feature(types.INITIALIZE)(on_initialize)
    ls.feature(types.INITIALIZED)(on_initialized)
    ls.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)(on_did_change_configuration)
    ls.feature(types.TEXT_DOCUMENT_DID_OPEN)(on_did_open)
    ls.feature(types.TEXT_DOCUMENT_DID_CHANGE)(on_did_change)
    ls.feature(types.TEXT_DOCUMENT_DID_CLOSE)(on_did_close)
    ls.feature(types.TEXT_DOCUMENT_DID_SAVE)(on_did_save)
    ls.feature(CURSOR_NOTIFICATION)(on_cursor)
    ls.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())(on_inline_completion)
    ls.feature(types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions())(on_completion)
    ls.feature(types.SHUTDOWN)(on_shutdown)
    ls.feature(types.EXIT)(on_exit)
    for name, fn in zip(COMMANDS, (cmd_accepted, cmd_dismissed, cmd_stats, cmd_status)):
        ls.command(name)(fn)
    return ls
