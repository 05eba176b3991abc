"""jedi's caches are bounded (a cycle collection that holds the interpreter) only once the
engine has been free for `QUIET_S` in a row, and not at all when another analysis is queued
(its own bounding follows it). A fake clock that moves when the thread sleeps: no timing."""

from __future__ import annotations

import threading
import time

import pytest

from lsp_server.decoding.identifiers import analyses as analyses_module
from lsp_server.decoding.identifiers.analyses import BUSY_POLL_S, QUIET_S, NameAnalyses


class FakeTime:
    """`perf_counter` and `sleep` for the analyses module, in the test's own thread: sleeping
    moves the clock. The module's `time` is shared by every thread of the process: other
    analyses' threads still running in it (engines of earlier tests in this worker, waiting for
    their quiet time) get the real clock, or their polling would move this one."""

    def __init__(self) -> None:
        self.now = 0.0
        self.owner = threading.current_thread()

    def perf_counter(self) -> float:
        if threading.current_thread() is not self.owner:
            return time.perf_counter()
        return self.now

    def sleep(self, s: float) -> None:
        if threading.current_thread() is not self.owner:
            time.sleep(s)
            return
        self.now += s

    def __getattr__(self, name: str):
        return getattr(time, name)  # the rest of the module, real


@pytest.fixture
def clock(monkeypatch):
    fake = FakeTime()
    monkeypatch.setattr(analyses_module, "time", fake)
    return fake


def test_bounded_only_after_the_engine_was_free_for_the_quiet_time(clock, monkeypatch):
    busy_until = 0.7  # the engine busy (requests, prefills) until then
    bounded_at: list[float] = []
    monkeypatch.setattr(analyses_module, "bound_jedi_caches", lambda lines: bounded_at.append(clock.now) or 0)
    names = NameAnalyses(busy=lambda: clock.now < busy_until)
    names._bound_caches()
    assert len(bounded_at) == 1
    assert bounded_at[0] >= busy_until + QUIET_S - BUSY_POLL_S  # the last busy poll, then the quiet time
    names._executor.shutdown()


def test_a_busy_moment_restarts_the_quiet_time(clock, monkeypatch):
    bursts = [(0.0, 0.2), (0.2 + QUIET_S / 2, 0.3 + QUIET_S / 2)]  # a request, then a keystroke's prefill
    bounded_at: list[float] = []
    monkeypatch.setattr(analyses_module, "bound_jedi_caches", lambda lines: bounded_at.append(clock.now) or 0)
    names = NameAnalyses(busy=lambda: any(a <= clock.now < b for a, b in bursts))
    names._bound_caches()
    assert bounded_at and bounded_at[0] >= bursts[1][1] + QUIET_S - BUSY_POLL_S
    names._executor.shutdown()


def test_left_to_the_next_analysis_when_one_is_queued(clock, monkeypatch):
    bounded: list[float] = []
    monkeypatch.setattr(analyses_module, "bound_jedi_caches", lambda lines: bounded.append(clock.now) or 0)
    names = NameAnalyses(busy=lambda: True)  # a request runs: without the queued analysis it would wait
    names._pending["file:///a.py"] = ("key", None)  # an analysis the user's typing asked for, queued
    names._bound_caches()
    assert bounded == []
    assert clock.now <= BUSY_POLL_S  # it gave the thread back at once
    names._executor.shutdown()
