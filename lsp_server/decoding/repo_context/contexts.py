"""The context blocks of the documents, made ahead of the requests on a thread of their own and
kept per document: a request reads the block ready for its document (`block`), never waits, and
never runs jedi.

    contexts = RepoContexts(busy=engine_busy, on_ready=plan_a_prefill)
    contexts.request(uri, text, line, others)   # on open, cursor report, save (others: (uri, text) of the open documents)
    contexts.block(uri)                         # the document's ContextBlock, or None

Stability (the KV cache keeps the prompt's start, and the block is that start): a document's
block is made again only when the cursor enters another scope (`definitions.cursor_scope`: the
function it is in, named by its first line and header) or another open document's text
changes, never while the user types in the scope (a name typed there would re-rank the
neighbours, add a definition, and throw the whole window's KV cache away at each keystroke);
and a block made again with the same sections is the same object, the prompt's start
unchanged. So typing inside one function, and moving about in it, leave the block (and the
prefill made for it) as they are. A new block calls `on_ready(uri)`: the server plans a prefill
with it before the user asks (docs/context.md).

Work: the definitions and their stubs from a process of its own, stopped while the server is
`busy()` (the model runs) and at the lowest CPU priority (`lookup_process.DefinitionsProcess`:
one `jedi.Script` of the document with the workspace as its project, `MAX_LOOKUPS` goto queries
at most, ~0.1-0.5 s warm, seconds the first time; it never holds the server's interpreter
lock), which also ranks the neighbours by Jaccard and packs the block (`sections.py`). A lookup
that fails (jedi raising on odd code, the process dying or timing out) leaves the previous block
in place (logged).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from ..workspace_context import _path_of
from .block import DEFAULT_SHARE, ContextBlock, ContextSection
from .definitions import Scope
from ..jedi_process import JediFailed
from .lookup_process import DefinitionsProcess

log = logging.getLogger(__name__)

CHARS_PER_TOKEN = 3.0  # a block is cut to share x contextTokens x this many characters (the prompt cuts it in tokens)
CLOSED_KEPT = 8  # recently closed documents still searched for neighbours
CLOSED_MAX_CHARS = 1_000_000  # a closed document longer than this is not kept as a neighbours source
DOCUMENTS = 16  # blocks kept (least recently used out first)


@dataclass
class _Made:
    scope: Scope
    others_hash: int  # of the other documents' texts (a saved or edited module: its stubs made again)
    block: ContextBlock


class RepoContexts:
    """See the module docstring. Thread-safe."""

    def __init__(self, busy: Callable[[], bool] = lambda: False, on_ready: Callable[[str], None] = lambda uri: None,
                 share: float = DEFAULT_SHARE, context_tokens: int = 1024, roots: tuple[str, ...] = (),
                 form: str = "comments") -> None:
        self._busy = busy
        self.on_ready = on_ready
        self.share = share
        self.context_tokens = context_tokens
        self.roots = tuple(roots)
        self.form = form  # ContextBlock.form
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="repo-context")
        self._lock = threading.Lock()
        self._made: OrderedDict[str, _Made] = OrderedDict()
        # requests not started, the newest last: uri -> (text, line, others, its future)
        self._waiting: OrderedDict[str, tuple[str, int, list[tuple[str, str]], Future]] = OrderedDict()
        self._closed: OrderedDict[str, str] = OrderedDict()
        self._edited: OrderedDict[str, int] = OrderedDict()  # document -> the 0-based line of its last edit
        self.lookups = DefinitionsProcess(busy)
        self.stats = {"made": 0, "kept": 0, "failed": 0, "served": 0, "ms": 0.0}

    # --- the event loop's side ---------------------------------------------------------------
    def configure(self, share: float, context_tokens: int) -> None:
        """New settings: blocks are made again at the next request when the share changed."""
        with self._lock:
            if share != self.share or context_tokens != self.context_tokens:
                self._made.clear()
            self.share, self.context_tokens = share, context_tokens

    def set_roots(self, roots: tuple[str, ...]) -> None:
        """The workspace folders (file system paths) the client names."""
        self.roots = tuple(os.path.normpath(r) for r in roots if r)

    def block(self, uri: str) -> ContextBlock | None:
        """The document's block (the last one made; None when none is made or the share is 0)."""
        with self._lock:
            made = self._made.get(uri)
            if made is None or self.share <= 0 or not made.block:
                return None
            self.stats["served"] += 1
            return made.block

    def request(self, uri: str, text: str, line: int, others: list[tuple[str, str]]) -> Future | None:
        """Make the block for the cursor at 0-based `line` of `text` unless it is made (the newest
        request of a document replaces one not started yet); `others`: the other open documents.
        The newest request is made first (`_make_newest`): the document opened or moved in last
        is the one the user is in, and restored tabs opened before it wait behind it. The
        future is done once this request is made, or cancelled when a newer one replaced it."""
        if self.share <= 0:
            return None
        with self._lock:
            waiting = self._waiting.pop(uri, None)
            if waiting is not None:
                waiting[3].cancel()
            done: Future = Future()
            self._waiting[uri] = (text, line, list(others), done)
            try:
                self._executor.submit(self._make_newest)
            except RuntimeError:  # shut down: the server is exiting
                self._waiting.pop(uri, None)
                done.cancel()
                return None
            return done

    def wait(self, uri: str, text: str, line: int, others: list[tuple[str, str]], timeout: float) -> ContextBlock | None:
        """The block made now if need be (one-shot callers: the CLI, benchmarks)."""
        future = self.request(uri, text, line, others)
        if future is not None:
            future.result(timeout)
        return self.block(uri)

    def edited(self, uri: str, line: int) -> None:
        """The user edited `uri` at 0-based `line` (the server's didChange): the region around the
        last edit of another document is a section of the blocks made next, as Continue's and
        Tabby's recently edited ranges are."""
        with self._lock:
            self._edited[uri] = line
            self._edited.move_to_end(uri)
            while len(self._edited) > DOCUMENTS:
                self._edited.popitem(last=False)

    def closed(self, uri: str, text: str) -> None:
        """A document was closed: its text is still searched for neighbours for a while."""
        with self._lock:
            self._made.pop(uri, None)
            # kept only while blocks are made, and only texts of a source file's size (a 10 MB
            # document kept after its close would hold its memory for nothing a chunk needs)
            if self.share > 0 and text.strip() and len(text) <= CLOSED_MAX_CHARS:
                self._closed[uri] = text
                self._closed.move_to_end(uri)
                while len(self._closed) > CLOSED_KEPT:
                    self._closed.popitem(last=False)

    def report(self) -> dict:
        with self._lock:
            return {"share": self.share, "documents": {u: [f"{s.kind}:{s.name}" for s in m.block.sections]
                                                       for u, m in self._made.items()}, **self.stats}

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        self.lookups.close()

    # --- the worker's side ---------------------------------------------------------------------
    def _make_newest(self) -> None:
        """One job of the worker: the newest request not started (each request submits one job;
        a job finds nothing where requests were replaced)."""
        with self._lock:
            if not self._waiting:
                return
            uri, (text, line, others, done) = self._waiting.popitem(last=True)
            if not done.set_running_or_notify_cancel():
                return
        try:
            self._make(uri, text, line, others)
        finally:
            done.set_result(None)

    def _make(self, uri: str, text: str, line: int, others: list[tuple[str, str]]) -> None:
        t0 = time.perf_counter()
        try:
            made = self._build(uri, text, line, others)
        except JediFailed as e:  # jedi on code it can't read, the process gone: the previous block stays
            log.warning("context block of %s at line %d failed: %s", uri, line + 1, e)
            self.stats["failed"] += 1
            return
        except Exception:  # a defect here: logged, the previous block stays, the worker goes on
            log.exception("context block of %s at line %d failed", uri, line + 1)
            self.stats["failed"] += 1
            return
        if made is None:
            return
        with self._lock:
            old = self._made.get(uri)
            if old is not None and old.block.sections == made.block.sections:
                made.block = old.block  # the same sections: the very same block (the prompt's start stays)
                self.stats["kept"] += 1
                changed = False
            else:
                self.stats["made"] += 1
                changed = True
            self._made[uri] = made
            self._made.move_to_end(uri)
            while len(self._made) > DOCUMENTS:
                self._made.popitem(last=False)
            self.stats["ms"] = round((time.perf_counter() - t0) * 1000, 1)
        if changed:
            log.info("context block of %s: %s in %.0f ms", uri, ", ".join(f"{s.kind}:{s.name}" for s in made.block.sections),
                     (time.perf_counter() - t0) * 1000)
            self.on_ready(uri)

    def _build(self, uri: str, text: str, line: int, others: list[tuple[str, str]]) -> _Made | None:
        path = _path_of(uri)
        own_path = os.path.normpath(path) if os.path.isabs(path) else None
        open_texts = {os.path.normpath(_path_of(u)): t for u, t in others if u != uri}
        others_hash = hash(tuple(sorted((u, t) for u, t in others if u != uri)))
        with self._lock:
            old = self._made.get(uri)
            closed = {p: t for u, t in self._closed.items()
                      if u != uri and (p := os.path.normpath(_path_of(u))) not in open_texts}
            edited = [(os.path.normpath(_path_of(u)), ln) for u, ln in reversed(self._edited.items()) if u != uri]
        # the same function, the other documents as they were: the block stays
        same = (old.scope.start, old.scope.header) if old is not None and old.others_hash == others_hash else None
        found = self.lookups.find(text, own_path, line, self.roots, open_texts, same, closed, edited,
                                  int(self.share * self.context_tokens * CHARS_PER_TOKEN))
        if found.sections is None:
            return None
        sections = tuple(ContextSection(name, body, kind) for name, body, kind in found.sections)
        return _Made(found.scope, others_hash, ContextBlock(sections, self.share, self.form))
