"""One run per document (`lsp_server/server/runs.py`): a new run of a document supersedes the
older one, the runs of other documents are untouched, stopping a finished run does nothing, the
first stop is the one a run keeps; and the suggester's requests go through it."""

from __future__ import annotations

import asyncio
import threading

import pytest
from lsprotocol import types

from lsp_server.decoding.results import CompletionResult, Figures
from lsp_server.options import EngineOptions
from lsp_server.server.documents import DocumentStore
from lsp_server.server.engine_host import EngineHost
from lsp_server.server.runs import CANCELLED, SUPERSEDED, Runs
from lsp_server.server.suggester import Suggester
from lsp_server.server.telemetry import Telemetry

from wait_support import until


def recording_runs() -> tuple[Runs, list]:
    told: list = []
    return Runs(superseded=told.append), told


async def held(stop):
    """Work that goes on until its run is stopped; what it saw: "stopped"."""
    await stop.wait()
    return "stopped"


async def test_a_new_run_of_a_document_supersedes_the_older_one():
    runs, told = recording_runs()
    older = runs.start("a", 1, held)
    newer = runs.start("a", 2, held)
    assert older.stopped() and older.signal.superseded and older.signal.stopped.why == SUPERSEDED
    assert not newer.stopped() and newer.running()
    assert told == [older]  # the owner is told of the run it superseded, once
    assert runs.latest("a") is newer and newer.ticket > older.ticket
    assert await older.task == "stopped"  # the work itself saw its stop signal
    runs.stop_all()


async def test_runs_of_other_documents_are_untouched():
    runs, told = recording_runs()
    a = runs.start("a", 1, held)
    b = runs.start("b", 1, held)
    a2 = runs.start("a", 2, held)
    assert a.stopped() and not b.stopped() and not a2.stopped()
    runs.supersede("a")  # the document changed
    assert a2.signal.superseded and not b.stopped() and runs.latest("b") is b
    assert told == [a, a2]
    runs.stop_all()
    assert b.signal.stopped.why == CANCELLED and runs.latest("b") is None


async def test_stopping_a_finished_run_does_nothing():
    runs, told = recording_runs()

    async def done(stop):
        return "answer"

    finished = runs.start("a", 1, done)
    assert await finished.task == "answer"
    assert not finished.stop() and not finished.stopped()
    assert runs.supersede("a") is None and not finished.stopped() and told == []
    later = runs.start("a", 2, held)  # superseding a finished run: nothing to stop
    assert not finished.stopped() and told == [] and finished.task.result() == "answer"
    runs.forget("a")
    assert later.signal.stopped.why == CANCELLED and runs.latest("a") is None


async def test_the_first_stop_is_the_one_a_run_keeps():
    runs, told = recording_runs()
    run = runs.start("a", 1, held)
    assert run.stop(CANCELLED)  # the client cancelled it
    assert runs.supersede("a") is None and told == []  # not superseded after that
    assert run.signal.stopped.why == CANCELLED and not run.signal.superseded
    assert await run.task == "stopped"


class HeldEngine:
    """Decodes until its cancel callback turns true (each run waits for `go` first), and then
    answers what it was asked for; records the runs stopped."""

    def __init__(self, options) -> None:
        self.go = threading.Event()
        self.cancelled: list[str] = []

    def complete(self, request, cancel, options=None):
        pos = request.cursor
        while not cancel():
            if self.go.wait(0.01):
                return CompletionResult("1", pos, pos, "line-end", "single", True, figures=Figures(tokens_generated=1))
        self.cancelled.append(request.document)
        return CompletionResult("", pos, pos, "cancelled", "single", True)

    def forget(self, uri) -> None:
        pass

    def describe(self) -> dict:
        return {"model": "held", "device": "cpu", "store": "memory"}


@pytest.fixture
async def suggester():
    engines: list[HeldEngine] = []
    host = EngineHost(lambda status: None,
                      loader=lambda options, progress: engines.append(HeldEngine(options)) or engines[-1])
    host.configure(EngineOptions(model="held"))
    await until(lambda: host.ready)
    docs = DocumentStore()
    telemetry = Telemetry()
    for uri in ("file:///a.py", "file:///b.py"):
        docs.open(uri, "python", 1, "x = \ny = \n")
    s = Suggester(docs, host, telemetry, lambda message, kind: None, lambda: True)
    yield s, engines[0], telemetry
    s.close()
    engines[0].go.set()
    host.shutdown()


async def test_a_newer_request_supersedes_the_older_one_in_the_suggester(suggester):
    s, engine, telemetry = suggester
    older = asyncio.ensure_future(s.suggest("file:///a.py", types.Position(0, 4), None, None))
    await until(lambda: s.runs.latest("file:///a.py") is not None, what="the first run")
    first = s.runs.latest("file:///a.py")
    again = asyncio.ensure_future(s.suggest("file:///a.py", types.Position(0, 4), None, None))
    await asyncio.sleep(0)
    assert s.runs.latest("file:///a.py") is first  # the same request: it joins the run
    newer = asyncio.ensure_future(s.suggest("file:///a.py", types.Position(1, 4), None, None))
    await until(lambda: older.done() and again.done(), what="the superseded requests to be answered")
    assert older.result() is None and again.result() is None
    assert first.signal.superseded and telemetry.stats()["superseded"] == 1
    await until(lambda: engine.cancelled == ["file:///a.py"], what="the engine to stop the older run")
    engine.go.set()
    got = await newer
    assert got is not None and got.range.start == types.Position(1, 4)


async def test_a_change_supersedes_only_its_documents_run(suggester):
    s, engine, telemetry = suggester
    in_a = asyncio.ensure_future(s.suggest("file:///a.py", types.Position(0, 4), None, None))
    in_b = asyncio.ensure_future(s.suggest("file:///b.py", types.Position(0, 4), None, None))
    await until(lambda: s.runs.latest("file:///b.py") is not None, what="both runs")
    s.changed("file:///a.py")
    await until(in_a.done, what="the superseded request to be answered")
    assert in_a.result() is None
    assert s.runs.latest("file:///a.py").signal.superseded and not s.runs.latest("file:///b.py").stopped()
    engine.go.set()
    got = await in_b
    assert got is not None and got.text == "1" and telemetry.stats()["superseded"] == 1
