"""The names analyses of the documents, made ahead of the requests on a thread of their own and
kept per document and cursor line (`line_key`): a request takes the one ready for its
document, line and text, and decodes without one when it is not ready; it never waits.

    analyses = NameAnalyses()
    analyses.request(uri, text, line)      # work-ahead (a pause, a change) and each request
    analyses.ready(uri, text, line)        # a ScopeAnalysis, or None (not made yet, or failed)
    analyses.wait(uri, text, line, 30.0)   # the CLI and benchmarks: made now if need be

The analysis runs in a process of its own (`jedi_process.JediProcess` running
`analysis.scope_job`), stopped while `busy()` says a request or a prefill holds the engine: it
never runs beside a request, never holds the server's interpreter lock, and jedi's parse trees
are not in the server's heap (its full cycle collections walked them: 0.1-0.5 s each, on
whichever thread allocated, a request's included). The child bounds jedi's caches after each
analysis (`jedi_memory`: parso's trees of the modules used least recently dropped; unbounded,
they grew by ~180 MiB over 40 documents). Only the newest request of a document is made (one
waiting at most: typing replaces it), and a document keeps its last `KEEP` analyses. jedi raises
on code it can't read now and then, and the process may die: the analysis is then None and the
request decodes without it (logged, never raised to a request).
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from urllib.parse import unquote, urlparse

from ..jedi_process import JediFailed, JediProcess
from .analysis import ScopeAnalysis

log = logging.getLogger(__name__)

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

    def __init__(self, busy: Callable[[], bool] = lambda: False) -> None:
        self.jedi = JediProcess("lsp_server.decoding.identifiers.analysis:scope_job", busy)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="names")
        self._lock = threading.Lock()
        self._done: OrderedDict[str, OrderedDict[str, ScopeAnalysis | None]] = OrderedDict()
        self._pending: dict[str, tuple[str, Future]] = {}  # document -> (key, future)

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

    def _make(self, uri: str, key: str, text: str, line: int) -> ScopeAnalysis | None:
        try:
            answer = self.jedi.ask({"document": uri, "text": text, "line": line, "path": _path(uri)})
            result = ScopeAnalysis.from_json(answer)
        except JediFailed as e:  # jedi's internals on unreadable code, the process gone: decode without
            log.warning("names analysis of %s at line %d failed: %s", uri, line + 1, e)
            result = None
        with self._lock:
            kept = self._done.setdefault(uri, OrderedDict())
            kept[key] = result
            while len(kept) > KEEP:
                kept.popitem(last=False)
            self._done.move_to_end(uri)
            while len(self._done) > DOCUMENTS:
                self._done.popitem(last=False)
            if self._pending.get(uri, ("",))[0] == key:
                del self._pending[uri]
        return result
