"""The names analyses of the documents, made ahead of the requests on a thread of their own and
kept per document and cursor line (`line_key`): a request takes the one ready for its
document, line and text, and decodes without one when it is not ready; it never waits.

    analyses = NameAnalyses()
    analyses.request(uri, text, line)      # work-ahead (a pause, a change) and each request
    analyses.ready(uri, text, line)        # a ScopeAnalysis, or None (not made yet, or failed)
    analyses.wait(uri, text, line, 30.0)   # the CLI and benchmarks: made now if need be

The analysis never runs beside a request: between two of jedi's queries (~10-100 ms each, warm)
it waits while `busy()` says a request or a prefill holds the engine. Only the newest request of a document is made (one waiting at most: typing replaces it), and a
document keeps its last `KEEP` analyses. jedi raises on code it can't read now and then; the
analysis is then None and the request decodes without it (logged, never raised to a request).
After each analysis, once the engine is free, jedi's caches are bounded (`jedi_memory`: parso's
trees of the modules used least recently dropped, the freed memory handed back): unbounded, they
grew the server by ~180 MiB over 40 documents.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from urllib.parse import unquote, urlparse

from .analysis import ScopeAnalysis, analyse
from .jedi_memory import PARSE_CACHE_LINES, bound_jedi_caches

log = logging.getLogger(__name__)

BUSY_POLL_S = 0.01  # how often a waiting analysis looks whether the engine is free
QUIET_S = 1.0  # the engine free this long in a row: the user paused, jedi's caches may be bounded (`_bound_caches`)
KEEP = 4  # analyses kept per document (lines the user moves between)
DOCUMENTS = 8  # documents kept (least recently used out first)


def line_key(text: str, line: int) -> str:
    """What an analysis at `line` depends on: the document without that line, and the line's number."""
    lines = text.split("\n")
    rest = "\n".join(lines[:line] + lines[line + 1 :])
    return f"{line}:" + hashlib.blake2b(rest.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def _path(uri: str) -> str | None:
    """A file path jedi can resolve relative imports from (None for unsaved documents)."""
    if uri.startswith("file://"):
        return unquote(urlparse(uri).path) or None
    return None


class NameAnalyses:
    """See the module docstring. Thread-safe."""

    def __init__(self, busy: Callable[[], bool] = lambda: False, parse_cache_lines: int = PARSE_CACHE_LINES) -> None:
        self._busy = busy
        self._parse_cache_lines = parse_cache_lines  # jedi_memory.bound_jedi_caches
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="names")
        self._lock = threading.Lock()
        self._done: OrderedDict[str, OrderedDict[str, ScopeAnalysis | None]] = OrderedDict()
        self._pending: dict[str, tuple[str, Future]] = {}  # document -> (key, future)
        self._memo: dict[str, dict] = {}  # document -> module receivers (analysis.analyse's memo)

    def ready(self, uri: str, text: str, line: int) -> ScopeAnalysis | None:
        key = line_key(text, line)
        with self._lock:
            return self._done.get(uri, {}).get(key)

    def request(self, uri: str, text: str, line: int) -> Future:
        """Make the analysis for this text and line unless it is made or being made."""
        key = line_key(text, line)
        with self._lock:
            if key in self._done.get(uri, {}):
                done: Future = Future()
                done.set_result(self._done[uri][key])
                return done
            pending = self._pending.get(uri)
            if pending is not None and pending[0] == key:
                return pending[1]
            if pending is not None:
                pending[1].cancel()  # not started yet: the user moved on
            future = self._executor.submit(self._make, uri, key, text, line)
            self._pending[uri] = (key, future)
            return future

    def ready_or_started(self, uri: str, text: str, line: int) -> ScopeAnalysis | None:
        """The analysis when it is ready (a request's); else None, and it is started for the
        requests to come (`request`): a request never waits for it."""
        scope = self.ready(uri, text, line)
        if scope is None:
            self.request(uri, text, line)
        return scope

    def wait(self, uri: str, text: str, line: int, timeout: float) -> ScopeAnalysis | None:
        """The analysis, made now if need be (for one-shot callers: the CLI, benchmarks)."""
        return self.request(uri, text, line).result(timeout)

    def forget(self, uri: str) -> None:
        with self._lock:
            self._done.pop(uri, None)
            self._memo.pop(uri, None)

    def _wait_idle(self) -> None:
        while self._busy():
            time.sleep(BUSY_POLL_S)

    def _make(self, uri: str, key: str, text: str, line: int) -> ScopeAnalysis | None:
        try:
            result = analyse(text, line, _path(uri), self._memo.setdefault(uri, {}), self._wait_idle)
        except Exception:  # jedi's internals on unreadable code: decode without (the module docstring)
            log.exception("names analysis of %s at line %d failed", uri, line + 1)
            result = None
        with self._lock:
            kept = self._done.setdefault(uri, OrderedDict())
            kept[key] = result
            while len(kept) > KEEP:
                kept.popitem(last=False)
            self._done.move_to_end(uri)
            while len(self._done) > DOCUMENTS:
                gone, _ = self._done.popitem(last=False)
                self._memo.pop(gone, None)
            if self._pending.get(uri, ("",))[0] == key:
                del self._pending[uri]
        self._executor.submit(self._bound_caches)  # after this future resolves: no one waits for it
        return result

    def _bound_caches(self) -> None:
        """Bound jedi's caches once the user pauses: the cycle collection behind it holds the
        interpreter for 0.1-0.5 s with jedi's trees in memory (every thread waits, the server's
        reading of a request and its decoding too), so it waits until the engine has been free
        for `QUIET_S` in a row (a user who types keeps it busy with requests and prefills every
        few hundred ms); left to the next analysis's bounding when one is queued meanwhile (this
        thread is then needed for it: a request's analysis is never held behind a collection)."""
        quiet_since = time.perf_counter()
        while time.perf_counter() - quiet_since < QUIET_S:
            with self._lock:
                if self._pending:
                    log.debug("jedi's caches: bounded after the next analysis")
                    return
            if self._busy():
                quiet_since = time.perf_counter()
            time.sleep(BUSY_POLL_S)
        started = time.perf_counter()
        try:
            dropped = bound_jedi_caches(self._parse_cache_lines)
        except Exception:  # a parso without the cache this reads: memory grows, nothing else breaks
            log.exception("bounding jedi's caches failed")
            return
        log.debug("jedi's caches bounded (%d modules dropped), freed memory handed back in %.0f ms",
                  dropped, (time.perf_counter() - started) * 1000)
