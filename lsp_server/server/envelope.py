"""A frame's body as a JSON-RPC 2.0 message: which kind it is, or the error that answers it.

    for item in read_envelopes(body):
        Envelope(kind=Kind.REQUEST, data={...}, id=7)     # to structure and handle
        Rejection(code=-32700, message="...", id=None)     # to answer (answer=True) or log

Only the top level of a body is a message: a nested object with a `jsonrpc` member (in settings,
in a command's arguments) is data. The rules (JSON-RPC 2.0, LSP's base protocol):
- a body that is not UTF-8 or not JSON: -32700 (Parse error), id null;
- not an object, an empty array, `jsonrpc` other than "2.0", an id that is not a string or an
  integer, a method that is not a string, neither method nor result/error: -32600 (Invalid
  Request), with the id when it is usable, else null;
- a non-empty array is a batch, which LSP does not have: each request in it gets -32600 with its
  id (one -32600 with id null when none has a usable id);
- a response (result or error, no method) is never answered, only logged when it is invalid.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any

from pygls.exceptions import JsonRpcInvalidRequest, JsonRpcParseError

PARSE_ERROR = JsonRpcParseError.CODE  # -32700
INVALID_REQUEST = JsonRpcInvalidRequest.CODE  # -32600
JSONRPC_VERSION = "2.0"

MsgId = int | str


class Kind(enum.Enum):
    REQUEST = "request"
    NOTIFICATION = "notification"
    RESPONSE = "response"


@dataclass(frozen=True)
class Envelope:
    kind: Kind
    data: dict[str, Any]
    id: MsgId | None  # None for a notification

    @property
    def method(self) -> str | None:
        return self.data.get("method")


@dataclass(frozen=True)
class Rejection:
    code: int
    message: str
    id: MsgId | None
    answer: bool = True  # False: log only (a response, which is never answered)


def usable_id(value: Any) -> bool:
    """LSP ids are integers or strings (JSON-RPC's fractional numbers and null are not used)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _answerable_request(m: Any) -> bool:
    """A batch's item that a rejection can answer: a request with a usable id."""
    return isinstance(m, dict) and "method" in m and usable_id(m.get("id"))


def read_envelopes(body: bytes) -> list[Envelope | Rejection]:
    """The message in `body` (one item), or the errors that answer it."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        return [Rejection(PARSE_ERROR, f"Parse error: the message is not UTF-8 ({e.reason} at byte {e.start})", None)]
    try:
        value = json.loads(text)
    except ValueError as e:
        return [Rejection(PARSE_ERROR, f"Parse error: {e}", None)]
    if isinstance(value, list):
        if not value:
            return [Rejection(INVALID_REQUEST, "Invalid Request: an empty array", None)]
        ids = [m["id"] for m in value if _answerable_request(m)]
        why = "Invalid Request: batches are not part of LSP"
        return [Rejection(INVALID_REQUEST, why, i) for i in ids] or [Rejection(INVALID_REQUEST, why, None)]
    if not isinstance(value, dict):
        why = f"Invalid Request: a message must be an object, not {type(value).__name__}"
        return [Rejection(INVALID_REQUEST, why, None)]
    return [envelope_of(value)]


def envelope_of(data: dict[str, Any]) -> Envelope | Rejection:
    """The kind of one message object, or why it is invalid."""
    has_id = "id" in data
    msg_id = data.get("id")
    good_id = usable_id(msg_id)
    is_response = "method" not in data and ("result" in data or "error" in data)

    def reject(why: str) -> Rejection:
        return Rejection(INVALID_REQUEST, f"Invalid Request: {why}", msg_id if good_id else None,
                         answer=not is_response)

    if data.get("jsonrpc") != JSONRPC_VERSION:
        have = repr(data["jsonrpc"])[:40] if "jsonrpc" in data else "missing"
        return reject(f"jsonrpc must be {JSONRPC_VERSION!r}, not {have}")
    null_response_id = is_response and msg_id is None  # JSON-RPC's answer to a message it could not read
    if has_id and not good_id and not null_response_id:
        return reject(f"an id must be an integer or a string, not {json.dumps(msg_id)[:40]}")
    if is_response:
        if not has_id:
            return reject("a response without an id")
        return Envelope(Kind.RESPONSE, data, msg_id)
    if "method" not in data:
        return reject("no method")
    if not isinstance(data["method"], str):
        return reject(f"the method must be a string, not {json.dumps(data['method'])[:40]}")
    params = data.get("params")
    if params is not None and not isinstance(params, (dict, list)):
        return reject("params must be an object or an array")
    return Envelope(Kind.REQUEST if has_id else Kind.NOTIFICATION, data, msg_id if has_id else None)
