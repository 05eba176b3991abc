"""The real server over stdio, spoken to in raw bytes (for the tests and bench/server_fuzz.py):
frames that no LSP client library would send, and every message the server writes back.

    with RawServer() as s:                    # `syntaxlock serve --stdio`, logging to a file
        s.initialize({"model": str(tiny)})    # and waits for the status "ready" unless wait=None
        s.send_bytes(b"Content-Length: 5\\r\\n\\r\\n{}")
        r = s.response(s.request("syntaxlock/x", {}))    # {"jsonrpc": "2.0", "id": ..., "error": ...}
        s.log_text()                          # the server's stderr so far
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lsp_server.server.framing import Frame, FrameParser  # noqa: E402

WAIT_S = 120.0  # a guard against hangs, not a timing check


def frame(obj, length: int | str | None = None, header: str = "Content-Length", eol: bytes = b"\r\n") -> bytes:
    """One frame of `obj` (JSON, or bytes as they are), with its header as given."""
    body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    n = len(body) if length is None else length
    return f"{header}: {n}".encode() + eol + eol + body


def lsp_lines(text: str) -> list[tuple[int, int]]:
    """(start, end of content) of each line as an LSP client counts them, written out plainly
    (the oracle the server's positions are checked against): "\n", "\r\n" and a lone "\r"
    each end a line, nothing else does."""
    out, start, i = [], 0, 0
    while i < len(text):
        if text[i] == "\r" and text[i + 1 : i + 2] == "\n":
            out.append((start, i))
            i += 2
            start = i
        elif text[i] in "\r\n":
            out.append((start, i))
            i += 1
            start = i
        else:
            i += 1
    out.append((start, len(text)))
    return out


def lsp_offset(text: str, line: int, character: int) -> int:
    """The string index of an LSP position (UTF-16 character, clamped to its line's end)."""
    start, end = lsp_lines(text)[line]
    i, units = start, 0
    while i < end and units < character:
        units += 2 if ord(text[i]) > 0xFFFF else 1
        i += 1
    return i


def text_digest(text: str) -> str:
    """The digest syntaxlock.status gives of a document's text."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def server_command(*extra: str) -> list[str]:
    return [sys.executable, "-m", "lsp_server.cli", "serve", "--stdio", "--log-level", "INFO", *extra]


class RawServer:
    def __init__(self, *extra: str, env: dict | None = None) -> None:
        full_env = dict(os.environ if env is None else env)
        full_env["PYTHONPATH"] = str(ROOT) + os.pathsep + full_env.get("PYTHONPATH", "")
        self._log = tempfile.NamedTemporaryFile(prefix="syntaxlock-server-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(server_command(*extra), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._log, cwd=ROOT, env=full_env, bufsize=0)
        self.received: list[dict] = []  # every message the server sent, in order
        self.sent_at: dict = {}  # request id -> time.perf_counter() when it was written
        self.answered_at: dict = {}  # request id -> when its response arrived
        self._inbox: queue.Queue = queue.Queue()
        self._ids = itertools.count(1)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    # ------------------------------------------------------------------ the wire

    def _read(self) -> None:
        parser = FrameParser()
        while True:
            data = os.read(self.proc.stdout.fileno(), 65536)
            if not data:
                break
            for event in parser.feed(data):
                if isinstance(event, Frame):
                    assert event.problem is None, f"the server wrote a bad frame: {event.problem}"
                    self._inbox.put((time.perf_counter(), json.loads(event.body)))
                else:
                    raise AssertionError(f"the server wrote garbage: {event.reason}")
        self._inbox.put((time.perf_counter(), None))

    def send_bytes(self, data: bytes) -> bool:
        """Write raw bytes; False when the server no longer reads."""
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError, ValueError):
            return False

    def send(self, message: dict) -> None:
        self.send_bytes(frame(message))

    def request(self, method: str, params=None, msg_id=None) -> int | str:
        msg_id = next(self._ids) if msg_id is None else msg_id
        self.sent_at[msg_id] = time.perf_counter()
        self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, **({} if params is None else {"params": params})})
        return msg_id

    def notify(self, method: str, params=None) -> None:
        self.send({"jsonrpc": "2.0", "method": method, **({} if params is None else {"params": params})})

    # ------------------------------------------------------------------ reading

    def next_message(self, timeout: float = WAIT_S) -> dict | None:
        """The next message from the server (None at the end of its output)."""
        at, msg = self._inbox.get(timeout=timeout)
        if msg is not None:
            self.received.append(msg)
            if "method" not in msg and isinstance(msg.get("id"), (int, str)):
                self.answered_at.setdefault(msg["id"], at)  # when the reader thread read it
        return msg

    def wait_for(self, predicate, timeout: float = WAIT_S) -> dict:
        """The first message, among those received and those to come, that `predicate` accepts."""
        for msg in self.received:
            if predicate(msg):
                return msg
        deadline = time.monotonic() + timeout
        while True:
            msg = self.next_message(max(0.01, deadline - time.monotonic()))
            if msg is None:
                raise AssertionError("the server closed its output")
            if predicate(msg):
                return msg

    def response(self, msg_id, timeout: float = WAIT_S) -> dict:
        return self.wait_for(lambda m: "method" not in m and m.get("id") == msg_id, timeout)

    def call(self, method: str, params=None, timeout: float = WAIT_S) -> dict:
        return self.response(self.request(method, params), timeout)

    def responses_for(self, ids, timeout: float = WAIT_S) -> dict:
        """{id: response} for every id (raises when one is missing after `timeout`)."""
        return {i: self.response(i, timeout) for i in ids}

    def drain(self, quiet_s: float = 0.5) -> list[dict]:
        """The messages that arrive until none came for `quiet_s`."""
        out = []
        while True:
            try:
                msg = self.next_message(quiet_s)
            except queue.Empty:
                return out
            if msg is None:
                return out
            out.append(msg)

    def status(self, state: str, timeout: float = 300.0) -> dict:
        return self.wait_for(
            lambda m: m.get("method") == "syntaxlock/status" and m["params"]["state"] == state, timeout
        )

    def log_text(self) -> str:
        return Path(self._log.name).read_text(errors="replace")

    # ------------------------------------------------------------------ lifecycle

    def initialize(self, options: dict | None = None, wait: str | None = "ready") -> dict:
        r = self.call("initialize", {"processId": None, "rootUri": None, "capabilities": {},
                                     "initializationOptions": options})
        assert "result" in r, r
        self.notify("initialized", {})
        if wait:
            self.status(wait)
        return r

    def open(self, uri: str, text: str, version: int = 1) -> None:
        self.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": version,
                                                              "text": text}})

    def inline(self, uri: str, line: int, character: int, msg_id=None) -> int | str:
        return self.request("textDocument/inlineCompletion", {
            "textDocument": {"uri": uri}, "position": {"line": line, "character": character},
            "context": {"triggerKind": 2}}, msg_id)

    def alive(self) -> bool:
        """Whether the server answers a request now."""
        r = self.call("workspace/executeCommand", {"command": "syntaxlock.stats"}, timeout=60)
        return "result" in r

    def wait_exit(self, timeout: float = 60) -> int:
        return self.proc.wait(timeout=timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for f in (self.proc.stdout,):
            try:
                f.close()
            except OSError:
                pass
        self._log.close()
        Path(self._log.name).unlink(missing_ok=True)

    def __enter__(self) -> RawServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
