"""Every millisecond of a request in the engine in a named part (decoding/results.py: `RequestTimes`): the
parts are measured where they are spent, none inside another, so they add up to the request's
wall time with a remainder that is never negative; the wait for the engine is its own part."""

from __future__ import annotations

import logging
import sys
import threading
import time

import pytest
from lsprotocol import types

from lsp_server.decoding.engine import CompletionRequest
from lsp_server.decoding.results import PARTS, off_cpu_in, parts_in
from lsp_server.options import EngineOptions
from lsp_server.server.documents import DocumentStore
from lsp_server.server.engine_host import EngineHost
from lsp_server.server.suggester import Suggester
from lsp_server.server.telemetry import Telemetry

from completion_support import scripted_engine
from wait_support import until

DOC = "def total(xs):\n    s = 0\n    for x in xs:\n        s += x\n    return |\n\n\nprint(total([1, 2]))\n"
ROUNDING = 0.01 * (len(PARTS) + 1)  # each part is rounded to 0.01 ms


def request_and_engine(compiled, intended_after: str = "s\n"):
    off = DOC.index("|")
    text = DOC[:off] + DOC[off + 1 :]
    engine = scripted_engine(compiled, text[:off] + intended_after + text[off:].lstrip(" "))
    return engine, CompletionRequest(text, cursor=off, document="file:///t.py")


def assert_adds_up(result) -> dict:
    parts = result.figures.times_ms
    assert set(parts) == set(PARTS) | {"unaccounted"}
    assert all(ms >= 0 for ms in parts.values()), parts  # nothing counted twice
    # the wall time in `complete`: the wait for the lock, then the engine's own time
    assert sum(parts.values()) == pytest.approx(parts["lock"] + result.figures.engine_ms, abs=ROUNDING)
    return parts


def test_a_decoded_request_is_split_into_its_parts(compiled):
    engine, req = request_and_engine(compiled)
    result = engine.complete(req)
    assert result.text == "s" and result.figures.tokens_generated > 0
    parts = assert_adds_up(result)
    # what this request did was measured where it was done
    for part in ("setup", "prefill", "model", "mask", "checks", "gate"):
        assert parts[part] > 0, (part, parts)
    assert parts["names"] == 0  # the names analysis is never ready in these tests (conftest)
    off = result.figures.off_cpu_ms  # the serving thread's time not running, inside those parts
    assert set(off) == {"python", "model"} and all(ms >= 0 for ms in off.values()), off
    assert off["model"] <= parts["prefill"] + parts["model"] + 0.01
    assert off["python"] <= result.figures.engine_ms - parts["prefill"] - parts["model"] + 0.02


def test_the_time_a_request_waits_for_the_interpreter_lock_is_counted_off_the_cpu(compiled, monkeypatch):
    """Another Python thread beside the request (as the event loop reading keystrokes is) takes
    the interpreter lock while the request's model pass has let it go, and holds it through one
    long call into C: the request waits for it, and `off_cpu_ms` (the Python parts' and the model
    passes' wall time less the serving thread's CPU time in each) holds that wait in the model's
    part, each part's within its wall time. The hand-over is made certain: the pass lets the lock
    go until the other thread has it (an event), and the switch interval (1 s) is longer than
    the other thread holds it, so nothing takes it back early."""
    engine, req = request_and_engine(compiled)
    engine.complete(req)  # caches warm
    go, taken = threading.Event(), threading.Event()
    held_ms: list[float] = []

    def hold_the_lock() -> None:
        go.wait()
        taken.set()
        t = time.perf_counter()
        sum(range(3_000_000))  # one call into C: the interpreter lock is held throughout
        held_ms.append((time.perf_counter() - t) * 1000)

    forward = engine.runtime.forward

    def forward_that_lets_the_lock_go(*args, **kwargs):
        if not go.is_set():
            go.set()
            taken.wait()  # the lock let go until the other thread has it; then waited for
        return forward(*args, **kwargs)

    monkeypatch.setattr(engine.runtime, "forward", forward_that_lets_the_lock_go)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1.0)
    other = threading.Thread(target=hold_the_lock)
    other.start()
    try:
        result = engine.complete(CompletionRequest(req.text, cursor=req.cursor, document="file:///other.py"))
    finally:
        go.set()
        other.join()
        sys.setswitchinterval(interval)
    parts = assert_adds_up(result)
    off = result.figures.off_cpu_ms
    model_ms = parts["prefill"] + parts["model"]
    assert off["model"] <= model_ms + 0.01 and off["python"] <= result.figures.engine_ms - model_ms + 0.02
    (held,) = held_ms
    assert off["model"] >= 0.9 * held, (off, held, parts)


def test_typing_through_the_shown_answer_runs_no_model_and_still_adds_up(compiled):
    engine, req = request_and_engine(compiled, "sum(xs) + s\n")
    first = engine.complete(req)
    assert first.text.startswith("sum(")
    typed = req.text[: req.cursor] + "su" + req.text[req.cursor :]
    result = engine.complete(CompletionRequest(typed, cursor=req.cursor + 2, document=req.document))
    assert result.typed_through == 2
    parts = assert_adds_up(result)
    assert parts["model"] == parts["prefill"] == parts["mask"] == 0


def test_the_wait_for_the_engine_is_the_lock_part(compiled):
    """A request made while another holds the engine waits; its `lock` part holds at least the
    time from when it was seen waiting (its cancel callback is polled only while it waits for the
    lock, before any decoding) to the release."""
    engine, req = request_and_engine(compiled)
    waiting = threading.Event()
    seen: list[float] = []

    def cancel() -> bool:
        if not waiting.is_set():
            seen.append(time.perf_counter())
            waiting.set()
        return False

    results = []
    engine._lock.acquire()  # another request holds the engine
    worker = threading.Thread(target=lambda: results.append(engine.complete(req, cancel=cancel)))
    worker.start()
    try:
        assert waiting.wait(30)
        time.sleep(0.05)
    finally:
        released = time.perf_counter()
        engine._lock.release()
    worker.join(60)
    parts = assert_adds_up(results[0])
    assert parts["lock"] >= (released - seen[0]) * 1000 - 0.01
    assert results[0].text == "s"


async def test_the_servers_log_gives_the_parts_as_the_latency_benchmark_reads_them(compiled, caplog):
    """The server logs each run's parts (and its waits before the engine) on its `completed`
    line; bench/lsp_latency.py's `where_the_time_went` reads them from there (`parts_in`)."""
    engine, req = request_and_engine(compiled)
    host = EngineHost(lambda status: None, loader=lambda options, progress: engine)
    host.configure(EngineOptions(model="scripted"))
    await until(lambda: host.ready)
    docs = DocumentStore()
    suggester = Suggester(docs, host, Telemetry(), lambda message, kind: None, lambda: True)
    docs.open("file:///t.py", "python", 1, req.text)
    before = req.text[: req.cursor]
    with caplog.at_level(logging.INFO, logger="lsp_server.server.suggester"):
        got = await suggester.suggest("file:///t.py", types.Position(before.count("\n"), len(before.split("\n")[-1])),
                                      None, None)
    host.shutdown()
    assert got.text == "s"
    found = [parts for r in caplog.records if r.getMessage().startswith("completed ")
             and (parts := parts_in(r.getMessage())) is not None]
    assert len(found) == 1
    logged = found[0]
    assert list(logged) == ["join", "queue", *PARTS, "unaccounted"]  # the waits before the engine, then its parts
    assert logged["join"] >= 0 and logged["queue"] >= 0
    assert all(logged[part] == pytest.approx(ms, abs=0.01) for part, ms in got.result.figures.times_ms.items())
    off = [off_cpu_in(r.getMessage()) for r in caplog.records if r.getMessage().startswith("completed ")]
    assert off == [got.result.figures.off_cpu_ms] and set(off[0]) == {"python", "model"}
