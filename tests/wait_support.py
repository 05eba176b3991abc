"""Waiting for a condition, not for a fixed time: the tests' one way to let another thread, task or
process get somewhere before asserting. The timeouts are guards against hangs, never timing
checks: a condition that does not come fails the test with what was awaited."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable

POLL_S = 0.01  # how often a condition is asked again


def wait_for(condition: Callable[[], object], timeout: float = 10.0, what: str = "") -> None:
    """Block until `condition()` holds (from a thread or a synchronous test)."""
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, f"timed out waiting for {what or condition}"
        time.sleep(POLL_S)


async def until(condition: Callable[[], object | Awaitable[object]], timeout: float = 120.0, what: str = ""):
    """Wait on the event loop until `condition()` (a plain or an async function) holds; returns its
    value."""
    async def poll():
        while True:
            value = condition()
            if inspect.isawaitable(value):
                value = await value
            if value:
                return value
            await asyncio.sleep(POLL_S)

    try:
        return await asyncio.wait_for(poll(), timeout)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what or condition}") from None
