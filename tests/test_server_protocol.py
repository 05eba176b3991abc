"""The wire, in raw bytes over stdio (issue 22, findings 1-3 and 9): a bad frame header never
leaves the server deaf, invalid messages get their JSON-RPC error, nested objects are never
taken for messages, requests before `initialize` and after `shutdown` are answered as LSP says,
`exit` gives 0 only after `shutdown`, and a closed output ends the server. The server runs with
`enabled: false` (no model): none of this depends on one."""

from __future__ import annotations

import json
import os
import random
import subprocess
import time

import pytest

from lsp_server.server.framing import MAX_BODY_BYTES, Frame, FrameParser, Skipped
from raw_lsp import ROOT, RawServer, frame, server_command

LATER = 20  # requests sent after each bad frame; every one must be answered
STATS = {"command": "syntaxlock.stats"}


def stats_request(msg_id) -> dict:
    return {"jsonrpc": "2.0", "id": msg_id, "method": "workspace/executeCommand", "params": STATS}


@pytest.fixture(scope="module")
def server():
    with RawServer() as s:
        s.initialize({"enabled": False}, wait="disabled")
        yield s
        assert s.proc.poll() is None, "the server died"


def _later_requests_answered(s: RawServer) -> None:
    ids = [s.request("workspace/executeCommand", STATS) for _ in range(LATER)]
    answers = s.responses_for(ids)
    assert all("result" in a for a in answers.values()), answers


# --- finding 1: framing ------------------------------------------------------------------------

BAD_FRAMES = {
    # name: (bytes, what answers the bad frame's own request: ("result"|"error", code, id) or None, logged words)
    "short": (frame(stats_request("short"), length=10), ("error", -32700, None), "Parse error"),
    "long": (frame(stats_request("long"), length=400), ("error", -32600, "long"), "Content-Length 400"),
    "zero": (frame(stats_request("zero"), length=0), ("error", -32600, "zero"), "Content-Length 0"),
    "missing": (b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n" + json.dumps(stats_request("missing")).encode(),
                ("error", -32600, "missing"), "without Content-Length"),
    "non-numeric": (frame(stats_request("nan"), length="twelve"), ("error", -32600, "nan"), "is not a length"),
    "negative": (frame(stats_request("neg"), length=-40), ("error", -32600, "neg"), "is not a length"),
    "no header": (json.dumps(stats_request("bare")).encode(), ("error", -32600, "bare"), "without a Content-Length header"),
    "garbage": (b"hello\r\n\xff\xfe junk \r\n", None, "not a header line"),
    "lf-only": (frame(stats_request("lf"), eol=b"\n"), ("result", None, "lf"), None),
    "lower-case": (frame(stats_request("lower"), header="content-length"), ("result", None, "lower"), None),
    "absurd length": (frame(stats_request("absurd"), length=1_000_000_000_000), None, "over the limit"),
}


@pytest.mark.parametrize("name", list(BAD_FRAMES))
def test_a_bad_frame_never_leaves_the_server_deaf(server: RawServer, name):
    data, answer, logged = BAD_FRAMES[name]
    assert server.send_bytes(data)
    _later_requests_answered(server)
    if answer is not None:
        kind, code, msg_id = answer
        own = server.wait_for(lambda m: "method" not in m and m.get("id") == msg_id and (kind in m))
        if kind == "error":
            assert own["error"]["code"] == code, own
    if logged:
        assert logged in server.log_text()
    assert server.proc.poll() is None


def test_an_absurd_length_is_refused_without_allocating_it(server: RawServer):
    """Content-Length 10^12 (and one over the limit): the length is refused before any body is
    read, the bytes that follow are searched for the next header, the peak memory stays put."""
    before = _peak_rss_kib(server.proc.pid)
    for n in (1_000_000_000_000, MAX_BODY_BYTES + 1, 10**40):
        assert server.send_bytes(frame(stats_request("big"), length=n))
        _later_requests_answered(server)
    assert server.log_text().count("over the limit") >= 3
    assert _peak_rss_kib(server.proc.pid) - before < 64 * 1024  # well under one limit's worth


def _peak_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM in /proc")


def _events(stream: bytes, chunk_sizes) -> list:
    parser, out, i = FrameParser(), [], 0
    for n in chunk_sizes:
        out += parser.feed(stream[i : i + n])
        i += n
    out += parser.feed(stream[i:])
    return out + parser.close()


def test_frames_do_not_depend_on_how_the_stream_is_cut():
    """The parser's events for a stream of good and bad frames are the same whatever the chunks
    (an oracle: the whole stream fed at once), and every good frame after a bad one is found."""
    rng = random.Random(22)
    goods = [frame(stats_request(i)) for i in range(30)]
    stream = b""
    for i, g in enumerate(goods):
        stream += g
        if i % 3 == 1:
            stream += rng.choice([v[0] for k, v in BAD_FRAMES.items() if k not in ("long",)])
    whole = _events(stream, [])

    def good_id(e):
        try:
            return json.loads(e.body)["id"] if isinstance(e, Frame) and e.problem is None else None
        except ValueError:
            return None

    assert [i for i in map(good_id, whole) if isinstance(i, int)] == list(range(30))
    for _ in range(20):
        cuts = [rng.randint(1, 200) for _ in range(len(stream) // 50)]
        assert _events(stream, cuts) == whole


def test_a_frame_cut_anywhere_loses_only_itself():
    """A frame cut short at any byte (in its header or its body), then good frames: every good
    frame is read as it was sent."""
    cut = frame(stats_request("cut"))
    goods = b"".join(frame(stats_request(i)) for i in range(3))
    for k in range(1, len(cut)):
        frames = [e for e in _events(cut[:k] + goods, []) if isinstance(e, Frame) and e.problem is None]
        assert [json.loads(f.body)["id"] for f in frames[-3:]] == [0, 1, 2], k


def test_a_large_body_is_one_frame_in_any_chunks():
    text = "x = {'}'}\n" * (2 * 1024 * 1024 // 10)  # 2 MiB of code with braces at chunk boundaries
    body = json.dumps({"jsonrpc": "2.0", "method": "textDocument/didOpen",
                       "params": {"textDocument": {"uri": "file:///a.py", "languageId": "python", "version": 1,
                                                   "text": text}}}).encode()
    for chunk in (100, 4096, 65536):
        assert _events(frame(body), [chunk] * (len(body) // chunk + 1)) == [Frame(body)]


def test_an_unfinished_frame_at_the_end_is_reported():
    events = _events(b"Content-Length: 100\r\n\r\n{\"jsonrpc\"", [])
    assert len(events) == 1 and isinstance(events[0], Skipped) and "ended" in events[0].reason


# --- finding 2: invalid messages -----------------------------------------------------------------

INVALID = [
    # body, expected code, expected id
    (b"{this is not json", -32700, None),
    (b'{"jsonrpc": "2.0", "id": 9005, "method": "workspace/executeCommand"', -32700, None),  # truncated
    (b'{"jsonrpc": "2.0", "id": 9006, "method": "\xff\xfe"}', -32700, None),  # not UTF-8
    (b"[]", -32600, None),
    (b"42", -32600, None),
    (b"null", -32600, None),
    (b'"a string"', -32600, None),
    (b'[{"jsonrpc": "2.0", "id": 9009, "method": "workspace/executeCommand"}]', -32600, 9009),  # a batch
    (b'{"id": 9003, "method": "workspace/executeCommand", "params": {"command": "syntaxlock.stats"}}', -32600, 9003),
    (b'{"jsonrpc": "1.0", "id": 9004, "method": "workspace/executeCommand"}', -32600, 9004),
    (b'{"jsonrpc": 2, "id": "four", "method": "workspace/executeCommand"}', -32600, "four"),
    (b'{"jsonrpc": "2.0", "id": {}, "method": "workspace/executeCommand"}', -32600, None),
    (b'{"jsonrpc": "2.0", "id": [], "method": "workspace/executeCommand"}', -32600, None),
    (b'{"jsonrpc": "2.0", "id": 9001.5, "method": "workspace/executeCommand"}', -32600, None),
    (b'{"jsonrpc": "2.0", "id": true, "method": "workspace/executeCommand"}', -32600, None),
    (b'{"jsonrpc": "2.0", "id": 9012}', -32600, 9012),  # neither a request nor a response
    (b'{"jsonrpc": "2.0", "id": 9013, "method": 5}', -32600, 9013),
    (b'{"jsonrpc": "2.0", "id": 9014, "method": "workspace/executeCommand", "params": 7}', -32600, 9014),
    (b'{"method": "textDocument/didSave"}', -32600, None),  # a notification without jsonrpc
    (b'{"jsonrpc": "2.0", "id": 9015, "method": "textDocument/didOpen", "params": {}}', -32600, 9015),  # a notification, with an id
    (b'{"jsonrpc": "2.0", "id": 9016, "method": "syntaxlock/noSuchMethod"}', -32601, 9016),  # no params: still unknown
    (b'{"jsonrpc": "2.0", "id": 9017, "method": "workspace/executeCommand", "params": {"command": 5}}', -32602, 9017),
]


@pytest.mark.parametrize("body, code, msg_id", INVALID, ids=[b[0][:40].decode("latin-1") for b in INVALID])
def test_invalid_messages_get_their_error(server: RawServer, body, code, msg_id):
    seen = len(server.received)
    server.send_bytes(frame(body))
    marker = server.request("workspace/executeCommand", STATS)
    server.response(marker)
    errors = [m for m in server.received[seen:] if "error" in m and m.get("id") != marker]
    assert [(m["error"]["code"], m["id"]) for m in errors] == [(code, msg_id)], errors
    assert "id" in errors[0]  # present, null when unknown, as JSON-RPC asks


def test_requests_before_initialize_get_server_not_initialized():
    with RawServer() as s:
        s.open("file:///early.py", "import os\n")  # a notification before initialize: dropped
        r = s.call("workspace/executeCommand", STATS)
        assert r["error"]["code"] == -32002, r
        r = s.call("textDocument/inlineCompletion", {"textDocument": {"uri": "file:///early.py"},
                                                     "position": {"line": 0, "character": 0}})
        assert r["error"]["code"] == -32002, r
        s.initialize({"enabled": False}, wait="disabled")
        assert s.alive()
        r = s.call("initialize", {"processId": None, "rootUri": None, "capabilities": {}})
        assert r["error"]["code"] == -32600 and "already" in r["error"]["message"]
        assert "dropped the notification textDocument/didOpen" in s.log_text()


# --- finding 3: nested objects are data ----------------------------------------------------------

def test_nested_objects_with_jsonrpc_are_not_messages(server: RawServer):
    """A pending request's id inside its own arguments, a `shutdown` inside the settings: data."""
    inner = {"jsonrpc": "2.0", "id": "n77", "method": "textDocument/hover", "params": {"bad": 1}}
    seen = len(server.received)
    server.send(stats_request("n76") | {"params": {"command": "syntaxlock.accepted", "arguments": [inner]}})
    server.notify("workspace/didChangeConfiguration",
                  {"settings": {"syntaxlock": {"enabled": False,
                                               "editorThing": {"jsonrpc": "2.0", "id": "n78", "method": "shutdown"}}}})
    server.send(stats_request("n77") | {"params": {"command": "syntaxlock.dismissed", "arguments": [{"nested": inner}]}})
    server.response("n76"), server.response("n77")
    assert server.alive()  # the nested shutdown was not one
    server.drain(0.3)
    by_id: dict = {}
    for m in server.received[seen:]:
        if "method" not in m:
            by_id.setdefault(m.get("id"), []).append(m)
    assert [m.get("result") for m in by_id["n76"]] == [False]  # one answer each, the real result
    assert [m.get("result") for m in by_id["n77"]] == [False]
    assert "n78" not in by_id


# --- finding 9: shutdown and exit ----------------------------------------------------------------

def test_after_shutdown_requests_are_refused_and_exit_gives_0():
    with RawServer() as s:
        s.initialize({"enabled": False}, wait="disabled")
        r = s.call("shutdown")
        assert "result" in r and r["result"] is None, r
        for method, params in (("workspace/executeCommand", STATS), ("shutdown", None),
                               ("textDocument/inlineCompletion", {"textDocument": {"uri": "file:///x.py"},
                                                                  "position": {"line": 0, "character": 0}})):
            r = s.call(method, params)
            assert r["error"]["code"] == -32600, r
        s.open("file:///late.py", "x = 1\n")  # dropped
        s.notify("exit")
        assert s.wait_exit() == 0


def test_exit_without_shutdown_gives_1():
    with RawServer() as s:
        s.initialize({"enabled": False}, wait="disabled")
        s.notify("exit")
        assert s.wait_exit() == 1
    with RawServer() as s:  # before initialize, too
        s.notify("exit")
        assert s.wait_exit() == 1


@pytest.mark.parametrize("shutdown, code", [(True, 0), (False, 1)])
def test_the_end_of_input_ends_the_server(shutdown, code):
    with RawServer() as s:
        s.initialize({"enabled": False}, wait="disabled")
        if shutdown:
            s.call("shutdown")
        s.proc.stdin.close()
        assert s.wait_exit() == code
        assert "closed its input" in s.log_text()


def test_a_closed_output_ends_the_server():
    """The client closes its end of our stdout and keeps stdin open: the server ends (code 1)
    and says why, with or without anything to write."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for send_more in (False, True):
        proc = subprocess.Popen(server_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, cwd=ROOT, env=env, bufsize=0)
        try:
            proc.stdin.write(frame({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                    "params": {"capabilities": {}, "initializationOptions": {"enabled": False}}}))
            assert proc.stdout.read(1) == b"C"  # its answer has begun: it is running
            proc.stdout.close()
            if send_more:
                time.sleep(0.2)
                try:
                    proc.stdin.write(frame(stats_request(2)))
                except BrokenPipeError:
                    pass
            assert proc.wait(timeout=60) == 1
            assert b"the client closed our output" in proc.stderr.read() or send_more
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
