"""One run per document: a `Run` (its ticket, its task, its stop signal) and `Runs`, the owner
that keeps each document's latest run and supersedes it in one place (`Runs.supersede`).

    runs = Runs(superseded=lambda run: ...)        # told of each run it supersedes
    run = runs.start(uri, asks, lambda stop: work(stop))   # the document's previous run: superseded
    runs.supersede(uri)       # the document changed: its run could only give a stale answer
    run.stop()                # the client cancelled it
    runs.forget(uri)          # the document closed
    runs.stop_all()           # the server shuts down

A run's work reads its stop signal: the engine between decoding steps on the worker thread
(`stop.is_set` is its cancel callback), the requests that share the run on the event loop
(`await stop.wait()`: they give up at once, before the engine has stopped). The first stop of a
run is the one it keeps (why and when); stopping a run that finished does nothing. A run is a
value: nothing changes in it after it is made but its stop signal, which is set once.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass

SUPERSEDED = "superseded"  # a newer request, or a change, made its answer useless
CANCELLED = "cancelled"  # the client cancelled it, its document closed, or the server stops


@dataclass(frozen=True)
class Stopped:
    why: str  # SUPERSEDED or CANCELLED
    at: float  # time.perf_counter() of the stop


class StopSignal:
    """Set once: `stop()` on the event loop's thread (or after the loop ended), `is_set()` from
    any thread, `await wait()` on the event loop."""

    __slots__ = ("_flag", "_woken", "_lock", "_first")

    def __init__(self) -> None:
        self._flag = threading.Event()  # read by the worker thread
        self._woken = asyncio.Event()  # waited for on the event loop
        self._lock = threading.Lock()
        self._first: list[Stopped] = []  # the first stop, once stopped

    def stop(self, why: str = CANCELLED) -> bool:
        """Stop; False (and the first stop kept) when it was stopped already."""
        with self._lock:
            if self._first:
                return False
            self._first.append(Stopped(why, time.perf_counter()))
        self._flag.set()
        self._woken.set()
        return True

    def is_set(self) -> bool:
        return self._flag.is_set()

    @property
    def stopped(self) -> Stopped | None:
        """Why and when it was stopped; None while it is not."""
        return self._first[0] if self._first else None

    @property
    def superseded(self) -> bool:
        first = self.stopped
        return first is not None and first.why == SUPERSEDED

    async def wait(self) -> None:
        await self._woken.wait()


@dataclass(frozen=True)
class Run:
    """One run of work for a document: `task` computes what `asks` says, `signal` stops it."""

    document: str  # its key among the runs of one owner
    ticket: int  # its number among the runs of its owner: a later run has a larger one
    asks: Hashable  # what it computes: a request that asks the same may share it
    task: asyncio.Future
    signal: StopSignal

    def stopped(self) -> bool:
        return self.signal.is_set()

    def running(self) -> bool:
        """It has neither finished nor been stopped."""
        return not self.stopped() and not self.task.done()

    def stop(self, why: str = CANCELLED) -> bool:
        """Stop it unless it finished (then nothing happens); whether this call stopped it."""
        return not self.task.done() and self.signal.stop(why)


class Runs:
    """The latest run of each document (or other key); starting one supersedes the previous."""

    def __init__(self, superseded: Callable[[Run], None] = lambda run: None) -> None:
        self._superseded = superseded  # told of each run superseded (stopped by `supersede`)
        self._latest: dict[str, Run] = {}
        self._tickets = itertools.count(1)

    def latest(self, document: str) -> Run | None:
        """The document's latest run: running, finished (its result kept) or stopped."""
        return self._latest.get(document)

    def start(self, document: str, asks: Hashable, work: Callable[[StopSignal], Awaitable]) -> Run:
        """Start `work(stop)` (on the event loop) as the document's run; its previous run is
        superseded."""
        self.supersede(document)
        signal = StopSignal()
        run = Run(document, next(self._tickets), asks, asyncio.ensure_future(work(signal)), signal)
        self._latest[document] = run
        return run

    def supersede(self, document: str) -> Run | None:
        """The one place a run is superseded: the document's run still going is stopped, as its
        answer could only be stale or unwanted; the run stopped (None: none was going)."""
        run = self._latest.get(document)
        if run is None or not run.stop(SUPERSEDED):
            return None
        self._superseded(run)
        return run

    def stop(self, document: str) -> None:
        """Stop the document's run (cancelled); it stays its latest."""
        run = self._latest.get(document)
        if run is not None:
            run.stop(CANCELLED)

    def forget(self, document: str) -> None:
        """The document closed: its run is stopped and dropped."""
        run = self._latest.pop(document, None)
        if run is not None:
            run.stop(CANCELLED)

    def stop_all(self) -> None:
        for document in list(self._latest):
            self.forget(document)
