"""pygls' LSP protocol, made to answer every message as JSON-RPC 2.0 and LSP say, whatever the
client sends.

    protocol.receive(event)      # a framing.Frame or framing.Skipped, from the transport
    code, reason = await protocol.session_end()   # set by `exit`, the end of input, a lost output

What it changes in pygls (2.x) and why:
- A frame is parsed as JSON at its top level only (pygls parses with an object_hook that turns
  any nested object with a `jsonrpc` member, in settings or command arguments, into a message),
  then checked as an envelope (`envelope`): invalid JSON or UTF-8, non-objects, batches, a wrong
  `jsonrpc`, bad ids are answered with -32700 / -32600 instead of being dropped.
- The lifecycle (`Lifecycle`): requests before `initialize` get -32002, notifications then are
  dropped (except `exit`); a second `initialize` gets -32600; after `shutdown` requests get
  -32600 (pygls drops them unanswered) and notifications other than `exit` are dropped.
- `exit` ends the session with code 0 after `shutdown`, else 1 (pygls raised SystemExit inside
  the handler, which its loop swallowed: the process ended 0 either way).
- A request whose params don't match the LSP types gets -32602 naming what is wrong (pygls
  leaves it unanswered); a method that is a notification sent with an id gets -32600.
- Handler futures are forgotten when they finish: pygls keeps the future of every notification
  handled by a generator or coroutine in `_request_futures` for good (with its params: ~2 KiB
  per didChange).
"""

from __future__ import annotations

import asyncio
import enum
import logging

import attrs
from cattrs import transform_error
from cattrs.errors import ClassValidationError
from lsprotocol import types
from pygls.exceptions import JsonRpcInternalError, JsonRpcInvalidParams, JsonRpcServerNotInitialized
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.json_rpc import JsonRPCNotification, JsonRPCRequestMessage, JsonRPCResponseMessage
from pygls.protocol.language_server import lsp_method

from .envelope import INVALID_REQUEST, Envelope, Kind, Rejection, read_envelopes
from .framing import Frame, Skipped

log = logging.getLogger(__name__)

EXIT_AFTER_SHUTDOWN = 0
EXIT_WITHOUT_SHUTDOWN = 1


class Lifecycle(enum.Enum):
    NEW = "new"  # before `initialize`
    RUNNING = "running"
    SHUT_DOWN = "shut down"  # after a `shutdown` request; only `exit` is handled


def describe_structure_error(e: BaseException) -> str:
    """cattrs' nested validation errors as one line: what is wrong, and where."""
    if isinstance(e, ClassValidationError):
        lines = transform_error(e, path="$")
        return "; ".join(lines[:4]) + (f" (and {len(lines) - 4} more)" if len(lines) > 4 else "")
    return str(e) or type(e).__name__


class RobustProtocol(LanguageServerProtocol):
    """LanguageServerProtocol fed by `receive` (see the module's docstring)."""

    def __init__(self, server, converter) -> None:
        self.lifecycle = Lifecycle.NEW
        self._end: asyncio.Future | None = None
        super().__init__(server, converter)  # reads every attribute (builtin features): set them first

    # ------------------------------------------------------------------ session

    def begin_session(self) -> asyncio.Future:
        """The future that `exit`, the end of input or a lost output completes with (code, reason).
        Call it on the event loop that will serve the session."""
        self._end = asyncio.get_running_loop().create_future()
        return self._end

    def end_session(self, code: int, reason: str) -> None:
        if self._end is not None and not self._end.done():
            log.info("session ends (exit code %d): %s", code, reason)
            self._end.set_result((code, reason))

    @property
    def ended(self) -> bool:
        return self._end is not None and self._end.done()

    def exit_code(self) -> int:
        """The exit status for a session that ends now: 0 after a `shutdown` request, else 1."""
        return EXIT_AFTER_SHUTDOWN if self.lifecycle is Lifecycle.SHUT_DOWN else EXIT_WITHOUT_SHUTDOWN

    def connection_lost(self, reason: str) -> None:
        self.end_session(EXIT_WITHOUT_SHUTDOWN, reason)

    # ------------------------------------------------------------------ input

    def receive(self, event: Frame | Skipped) -> None:
        """One event of the frame reader. Never raises."""
        if self.ended:
            return
        try:
            if isinstance(event, Skipped):
                log.warning("dropped %d bytes from the client: %s", event.size, event.reason)
            elif event.problem is not None:
                self._refuse_frame(event)
            else:
                for item in read_envelopes(event.body):
                    if isinstance(item, Rejection):
                        self._reject(item)
                    else:
                        self._dispatch(item)
        except Exception:
            log.exception("cannot handle a message from the client")

    def _refuse_frame(self, frame: Frame) -> None:
        """A body found without a usable header is answered, never run: its bytes may not be
        what the client meant to send."""
        for item in read_envelopes(frame.body):
            if isinstance(item, Rejection):
                self._reject(item, f" (in a frame with {frame.problem})")
            elif item.kind is Kind.REQUEST:
                self._reject(Rejection(INVALID_REQUEST, f"Invalid Request: the frame's header is unusable "
                                                        f"({frame.problem}); the request was not run", item.id))
            else:
                log.warning("dropped a %s %s: its frame's header is unusable (%s)", item.kind.value,
                            item.method or item.id, frame.problem)

    def _reject(self, r: Rejection, where: str = "") -> None:
        log.warning("%s%s (id %r)", r.message, where, r.id)
        if r.answer:
            self.send_error(r.id, r.code, r.message + where)

    def _takes_notification(self, method: str) -> bool:
        """Notifications are handled while the server runs; exit at any time."""
        return method == types.EXIT or self.lifecycle is Lifecycle.RUNNING

    def send_error(self, msg_id, code: int, message: str) -> None:
        if msg_id is None:  # lsprotocol's converter would leave out a null id, which JSON-RPC requires
            self._send_data({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}})
        else:
            self._send_response(msg_id, error=types.ResponseError(code=code, message=message))

    def _dispatch(self, env: Envelope) -> None:
        method = env.method
        if env.kind is Kind.REQUEST:
            if self.lifecycle is Lifecycle.NEW and method != types.INITIALIZE:
                self.send_error(env.id, JsonRpcServerNotInitialized.CODE,
                                f"the server is not initialized: {method} before initialize")
                return
            if self.lifecycle is not Lifecycle.NEW and method == types.INITIALIZE:
                self.send_error(env.id, INVALID_REQUEST, "Invalid Request: initialize was received already")
                return
            if self.lifecycle is Lifecycle.SHUT_DOWN:
                self.send_error(env.id, INVALID_REQUEST,
                                f"Invalid Request: {method} after shutdown (only exit is handled now)")
                return
        elif env.kind is Kind.NOTIFICATION and not self._takes_notification(method):
            log.info("dropped the notification %s: the server is %s", method, self.lifecycle.value)
            return
        message = self._structure(env)
        if message is None:
            return
        if env.kind is Kind.REQUEST and method == types.INITIALIZE:
            self.lifecycle = Lifecycle.RUNNING
        elif env.kind is Kind.REQUEST and method == types.SHUTDOWN:
            self.lifecycle = Lifecycle.SHUT_DOWN
        self.handle_message(message)

    def _structure(self, env: Envelope):
        """The lsprotocol object of a message (None when it was answered or logged instead)."""
        data = env.data
        try:
            if env.kind is Kind.RESPONSE:
                if "error" in data:
                    return self._converter.structure(data, types.ResponseErrorMessage)
                return self._converter.structure(data, self._result_types.pop(env.id, None) or JsonRPCResponseMessage)
            typ = self.get_message_type(env.method)
            if typ is None:  # a method LSP does not define: pygls' plain types, whose params are not optional
                data = {**data, "params": data.get("params")}
            if env.kind is Kind.REQUEST:
                if typ is not None and "id" not in attrs.fields_dict(typ):
                    why = f"Invalid Request: {env.method} is a notification, not a request"
                    self.send_error(env.id, INVALID_REQUEST, why)
                    return None
                return self._converter.structure(data, typ or JsonRPCRequestMessage)
            if typ is not None and "id" in attrs.fields_dict(typ):
                log.warning("dropped %s without an id: it is a request", env.method)
                return None
            return self._converter.structure(data, typ or JsonRPCNotification)
        except Exception as e:
            why = describe_structure_error(e)
            if env.kind is Kind.REQUEST:
                msg = f"invalid params for {env.method}: {why}"
                log.warning("request %s: %s", env.id, msg)
                self.send_error(env.id, JsonRpcInvalidParams.CODE, msg)
            elif env.kind is Kind.RESPONSE:
                log.warning("an invalid response from the client to %r: %s", env.id, why)
                future = self._request_futures.pop(env.id, None)
                if future is not None and not future.done():
                    future.set_exception(JsonRpcInternalError(f"invalid response: {why}"))
            else:
                log.warning("dropped the notification %s: invalid params: %s", env.method, why)
            return None

    # ------------------------------------------------------------------ pygls hooks

    def _execute_handler(self, msg_id, handler, callback, args=None, kwargs=None):
        def done(future, msg_id=msg_id):
            if self._request_futures.get(msg_id) is future:
                del self._request_futures[msg_id]
            callback(future)

        return super()._execute_handler(msg_id, handler, done, args, kwargs)

    @lsp_method(types.EXIT)
    def lsp_exit(self, *args):
        if (user_handler := self.fm.features.get(types.EXIT)) is not None:
            yield user_handler, args, None
        self.end_session(self.exit_code(), "exit")
