"""The LSP base protocol's frames (header lines, a blank line, a Content-Length body), read from a
byte stream that may be damaged, and found again after a bad one.

    frames = FrameParser()
    for event in frames.feed(chunk):       # the stream cut into chunks anywhere
        ...                                # Frame(body, problem) or Skipped(size, reason)
    frames.close()                         # at the end of the stream: what was left, as events

A `Frame` with `problem=None` is a well-framed body. A frame with a problem is a body found
without a usable header (no Content-Length, 0, negative, not a number, a length that runs into
the next frame's header or past the end of its message): the server answers it with an error
and does not run it. `Skipped` bytes are dropped with their reason (garbage between frames, a
body over `MAX_BODY_BYTES`, whose length is refused before anything is allocated).

Tolerated as clients send them: header names in any case, LF-only line ends, blanks around the
value, other headers (Content-Type), blank lines between frames.

Finding the next frame again rests on one fact: `Content-Length:` followed by a line end can't
occur inside a JSON text (a JSON string holds no raw line end, and outside strings the name is
no JSON token), so `ANCHOR` marks the start of a header wherever it appears.

Written by hand: pygls' reader (pygls.io_.run_async) trusts the first Content-Length it sees and
reads lines until one matches `Content-Length: \\d+\\r\\n` exactly, so one short, long, zero or
lower-case header leaves it out of step for good, and it allocates whatever length it is told;
neither lsprotocol nor pygls offer a reader that resynchronises, and this is all it takes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

MAX_BODY_BYTES = 64 * 1024 * 1024  # a 10 MB document (the largest the server keeps), JSON-escaped
MAX_HEADER_BYTES = 8 * 1024  # a header block longer than this is garbage
ANCHOR = re.compile(rb'content-length[ \t]*:[^\r\n"]*\r?\n', re.IGNORECASE)
_ANCHOR_MAX = 256  # bytes kept from a scanned region, so that an anchor cut by a chunk boundary is found
_HEADER_NAME = re.compile(rb"content-length", re.IGNORECASE)
_HEADER_LINE = re.compile(rb"[ \t]*([!-9;-~]+)[ \t]*:[ \t]*(.*?)[ \t]*")
_DIGITS = re.compile(rb"[0-9]+")
_LEADING_BLANKS = re.compile(rb"[ \t\r\n]*")
_BLANKS = b" \t\r\n"
_SMALL_BODY = 64 * 1024  # a body this small is cheap to parse on a guess
_LINE_END_SLACK = 2  # a body this close to its length may still get its last "\r\n": wait for it


@dataclass(frozen=True)
class Frame:
    """A message body. `problem`: why its header was unusable (None: a well-framed body)."""

    body: bytes
    problem: str | None = None


@dataclass(frozen=True)
class Skipped:
    """Bytes dropped from the stream, and why."""

    size: int
    reason: str


Event = Frame | Skipped


def find_anchor(data: bytearray, start: int = 0, stop: int | None = None) -> re.Match | None:
    """The first `ANCHOR` in data[start:stop]. It ends at a raw line end, which JSON bodies
    rarely hold: look at those only (memchr speed: a 10 MB body in ~1 ms, against ~200 ms for
    the case-insensitive pattern over all of it)."""
    stop = len(data) if stop is None else stop
    i = data.find(b"\n", start, stop)
    while i >= 0:
        m = ANCHOR.search(data, max(start, i - _ANCHOR_MAX), i + 1)
        if m is not None:
            return m
        i = data.find(b"\n", i + 1, stop)
    return None


def _ends_like_json(data: bytearray) -> bool:
    """Whether the last byte of `data` other than a blank closes an object or an array."""
    i = len(data) - 1
    while i >= 0 and data[i] in _BLANKS:
        i -= 1
    return i >= 0 and data[i] in b"}]"


def _complete_json(data: bytearray) -> bool:
    """Whether `data` is a whole JSON object or array (parsed only when it ends like one)."""
    if not _ends_like_json(data):
        return False
    try:
        json.loads(data)
    except ValueError:
        return False
    return True


class FrameParser:
    """The frames of one stream, fed in chunks. Not thread-safe (one reader)."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._headers: list[tuple[bytes, bytes]] = []
        self._header_bytes = 0
        self._expected: int | None = None  # body length when known
        self._problem: str | None = None  # why the body being read has no usable header
        self._in_body = False
        self._scanned = 0  # body bytes already searched for an anchor
        self._checked_at = 0  # body size at the last check for a whole message
        self._counted = 0  # body bytes whose brackets are counted in _depth
        self._depth = 0
        self._discarding: str | None = None  # reason, while dropping bytes up to the next anchor
        self._discarded = 0

    # ------------------------------------------------------------------ API

    def feed(self, data: bytes) -> list[Event]:
        self._buf += data
        out: list[Event] = []
        while self._step(out):
            pass
        # the whole message is here but its Content-Length asks for more (or was unusable):
        # take it now rather than wait for bytes that may never come
        whole_message_here = self._in_body and self._worth_parsing() and _complete_json(self._buf)
        if whole_message_here:
            body = bytes(self._buf)
            self._buf.clear()
            out.append(Frame(body, self._problem or (
                f"Content-Length {self._expected} is longer than its message ({len(body)} bytes)")))
            self._end_body()
        return out

    def _worth_parsing(self) -> bool:
        """Whether to parse the body so far to see if it is a whole message: when it ends like
        one, unless it may still get its last line end; a large body only when its brackets
        balance (counted at memchr speed, strings included: a cheap filter, not a parse) and at
        twice the size of the last try (a body cut in many chunks that end in "}" costs a few
        parses, not one each)."""
        buf, c = self._buf, self._counted
        self._depth += buf.count(b"{", c) + buf.count(b"[", c) - buf.count(b"}", c) - buf.count(b"]", c)
        self._counted = n = len(buf)
        may_get_its_line_end = self._expected is not None and self._expected - n <= _LINE_END_SLACK
        if not _ends_like_json(buf) or may_get_its_line_end:
            return False
        unbalanced_or_soon = self._depth != 0 or n < 2 * self._checked_at
        if n > _SMALL_BODY and unbalanced_or_soon:
            return False
        self._checked_at = n
        return True

    def close(self) -> list[Event]:
        """The end of the stream: what is left over."""
        out: list[Event] = []
        rest = bytes(self._buf)
        self._buf.clear()
        if self._discarding is not None:
            out.append(Skipped(self._discarded + len(rest), self._discarding))
        elif self._in_body:
            if self._expected is None and rest.strip(_BLANKS):
                out.append(Frame(rest, self._problem))
            elif _complete_json(bytearray(rest)):
                why = f"Content-Length {self._expected} is longer than its message ({len(rest)} bytes)"
                out.append(Frame(rest, why))
            else:
                out.append(Skipped(len(rest), f"the stream ended {len(rest)} bytes into a body of {self._expected}"))
        elif rest.strip(_BLANKS) or self._headers:
            out.append(Skipped(len(rest) + self._header_bytes, "the stream ended inside a header"))
        return out

    # ------------------------------------------------------------------ states

    def _step(self, out: list[Event]) -> bool:
        """Advance once; False when more bytes are needed."""
        if self._discarding is not None:
            return self._discard(out)
        if self._in_body:
            return self._body(out)
        return self._header(out)

    def _discard(self, out: list[Event]) -> bool:
        m = find_anchor(self._buf)
        if m is None:
            keep = min(len(self._buf), _ANCHOR_MAX)
            self._discarded += len(self._buf) - keep
            del self._buf[: len(self._buf) - keep]
            return False
        out.append(Skipped(self._discarded + m.start(), self._discarding))
        del self._buf[: m.start()]
        self._discarding = None
        self._discarded = 0
        return True

    def _body(self, out: list[Event]) -> bool:
        buf = self._buf
        # a header in the body: the body ends there, whatever its length said
        start = max(0, self._scanned - _ANCHOR_MAX)
        stop = len(buf) if self._expected is None else min(len(buf), self._expected + _ANCHOR_MAX)
        m = find_anchor(buf, start, stop)
        header_in_body = m is not None and (self._expected is None or m.start() < self._expected)
        if header_in_body:
            body = bytes(buf[: m.start()])
            del buf[: m.start()]
            problem = self._problem or f"Content-Length {self._expected} runs into the next frame's header"
            if body.strip(_BLANKS):
                out.append(Frame(body, problem))
            else:
                out.append(Skipped(len(body), problem))
            self._end_body()
            return True
        self._scanned = stop
        if self._expected is not None and len(buf) >= self._expected:
            n = self._expected
            # the next header may have begun inside the body and not yet reached its line end
            cut = _HEADER_NAME.search(buf, max(0, n - _ANCHOR_MAX), n)
            if cut is not None and _complete_json(buf[: cut.start()]):
                n = cut.start()
                out.append(Frame(bytes(buf[:n]), self._problem or (
                    f"Content-Length {self._expected} runs into the next frame's header")))
            else:
                out.append(Frame(bytes(buf[:n]), self._problem))
            del buf[:n]
            self._end_body()
            return True
        if self._expected is None and len(buf) > MAX_BODY_BYTES:
            self._discard_from_here(f"a message without a usable header, over {MAX_BODY_BYTES} bytes")
            return True
        return False

    def _header(self, out: list[Event]) -> bool:
        buf = self._buf
        if not self._headers:
            lead = _LEADING_BLANKS.match(buf).end()
            if lead:
                del buf[:lead]  # blank lines between frames
            if buf[:1] and buf[:1] in (b"{", b"["):
                # a body with no header at all: read it to the next anchor (or while it is whole JSON)
                self._start_body(None, "a message without a Content-Length header")
                return True
        nl = buf.find(b"\n")
        if nl < 0:
            if len(buf) + self._header_bytes > MAX_HEADER_BYTES:
                self._drop_header(out, len(buf) - _ANCHOR_MAX, "a header line over the size limit")
            return False
        line = bytes(buf[:nl]).rstrip(b"\r")
        if not line.strip(b" \t"):
            del buf[: nl + 1]
            if self._headers:
                self._end_header(out)
            return True
        names = [m.start() for m in _HEADER_NAME.finditer(buf, 0, nl)]
        if names and buf[: names[-1]].strip(b" \t"):
            # garbage (the rest of a short body, a stray line, a header cut short) and then a
            # header on the same line: the last one is where the next frame starts
            self._drop_header(out, names[-1], "bytes before a header")
            return True
        h = _HEADER_LINE.fullmatch(line)
        if h is None:
            self._drop_header(out, nl + 1, "not a header line")
            return True
        name = h.group(1).lower()
        if name == b"content-length" and any(k == name for k, _ in self._headers):
            # a second length in one header: the first frame was cut short, a new one begins here
            self._drop_header(out, 0, "a header cut short")
        self._headers.append((name, h.group(2)))
        self._header_bytes += nl + 1
        del buf[: nl + 1]
        if self._header_bytes > MAX_HEADER_BYTES:
            self._drop_header(out, 0, "a header over the size limit")
        return True

    # ------------------------------------------------------------------ transitions

    def _drop_header(self, out: list[Event], n: int, reason: str) -> None:
        n = max(0, n)
        out.append(Skipped(self._header_bytes + n, reason))
        del self._buf[:n]
        self._headers = []
        self._header_bytes = 0

    def _end_header(self, out: list[Event]) -> None:
        lengths = [v for k, v in self._headers if k == b"content-length"]
        self._headers = []
        self._header_bytes = 0
        if not lengths:
            self._start_body(None, "a header without Content-Length")
            return
        value = lengths[0]
        if not _DIGITS.fullmatch(value):
            self._start_body(None, f"Content-Length {value[:32].decode('latin-1')!r} is not a length")
            return
        n = int(value) if len(value) <= 20 else MAX_BODY_BYTES + 1
        if n > MAX_BODY_BYTES:
            shown = value[:32].decode("latin-1")
            self._discard_from_here(f"Content-Length {shown} is over the limit of {MAX_BODY_BYTES} bytes")
            return
        if n == 0:
            self._start_body(None, "Content-Length 0")
            return
        self._start_body(n, None)

    def _start_body(self, expected: int | None, problem: str | None) -> None:
        self._in_body = True
        self._expected = expected
        self._problem = problem
        self._scanned = 0
        self._checked_at = 0
        self._counted = 0
        self._depth = 0

    def _end_body(self) -> None:
        self._in_body = False
        self._expected = None
        self._problem = None
        self._scanned = 0

    def _discard_from_here(self, reason: str) -> None:
        self._end_body()
        self._discarding = reason
        self._discarded = 0
