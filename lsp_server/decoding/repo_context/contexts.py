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

Work: one `jedi.Script` of the document with the workspace as its project, `MAX_LOOKUPS` goto
queries at most (~0.1-0.5 s warm on a 2-core CPU, seconds the first time: jedi loads the
builtins), waiting between them while `busy()` (the server's: the model runs), the
stubs read with `ast`, the neighbours ranked by Jaccard. jedi raising on odd code leaves the
previous block in place (logged).
"""

from __future__ import annotations

import logging
import os
import sys
import sysconfig
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from ..workspace_context import _path_of
from .block import DEFAULT_SHARE, ContextBlock, ContextSection
from .definitions import Scope, Target, cursor_scope, definitions
from .neighbours import CHUNK_STEP, chunks, nearest
from .stubs import stub_of

log = logging.getLogger(__name__)

BUSY_POLL_S = 0.01
CHARS_PER_TOKEN = 3.0  # a block is cut to share x contextTokens x this many characters (the prompt cuts it in tokens)
NEIGHBOURS = 2  # chunks of other documents per block
CLOSED_KEPT = 8  # recently closed documents still searched for neighbours
CLOSED_MAX_CHARS = 1_000_000  # a closed document longer than this is not kept as a neighbours source
EDITED = 1  # regions edited last in other documents, per block (the most recent documents first)
DOCUMENTS = 16  # blocks kept (least recently used out first)
MAX_SOURCE_BYTES = 2_000_000  # a module larger than this is not read for stubs
_OUTSIDE = ("site-packages", "dist-packages", "typeshed")
_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git", ".hg")  # a folder with one is a project
# the environment's own files are never the workspace's (a document at /x.py: jedi's project is "/")
_ENVIRONMENT = tuple(sorted({os.path.normpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                                             sysconfig.get_paths()["stdlib"])}))


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
        self._projects: dict[str, object] = {}
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

    # --- the worker's side ---------------------------------------------------------------------
    def _between(self) -> None:
        while self._busy():
            time.sleep(BUSY_POLL_S)

    def _bound_caches(self) -> None:
        """jedi's parsed modules bounded once the user pauses, as the names analysis does after
        each of its analyses (identifiers/analyses.py `_bound_caches`: the collection behind it
        holds the interpreter for 0.1-0.5 s, so it waits for the engine to be free QUIET_S in a
        row, and leaves it to the next block when one is queued); with `identifiers: off` this
        is what bounds them."""
        from ..identifiers.analyses import QUIET_S
        from ..identifiers.jedi_memory import bound_jedi_caches

        quiet_since = time.perf_counter()
        while time.perf_counter() - quiet_since < QUIET_S:
            with self._lock:
                if self._waiting:  # a block is asked for: it comes first
                    return
            if self._busy():
                quiet_since = time.perf_counter()
            time.sleep(BUSY_POLL_S)
        try:
            bound_jedi_caches()
        except Exception:  # a parso without the cache this reads: memory grows, nothing else breaks
            log.exception("bounding jedi's caches failed")

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
        except Exception:  # jedi's internals on code it can't read: the previous block stays
            log.exception("context block of %s at line %d failed", uri, line + 1)
            self.stats["failed"] += 1
            return
        if made is None:
            return
        self._executor.submit(self._bound_caches)  # after this block is ready: no one waits for it
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
        import jedi

        from ..identifiers.analysis import _JEDI
        from ..identifiers.parso_disk import memory_only

        memory_only()
        path = _path_of(uri)
        own_path = os.path.normpath(path) if os.path.isabs(path) else None
        lines = text.split("\n")
        line1 = min(max(line, 0), len(lines) - 1) + 1
        open_texts = {os.path.normpath(_path_of(u)): t for u, t in others}
        with _JEDI:
            script = jedi.Script(text, path=own_path, project=self._project(own_path))
            scope = cursor_scope(script, lines, line1)
            others_hash = hash(tuple(sorted((u, t) for u, t in others if u != uri)))
            with self._lock:
                old = self._made.get(uri)
            if old is not None and (old.scope.start, old.scope.header, old.others_hash) == (scope.start, scope.header,
                                                                                           others_hash):
                return None  # the same function, the other documents as they were: the block stays
            targets = definitions(script, lines, scope, line1, lambda p: self._inside(p, own_path), own_path,
                                  self._between)
        sections = self._stub_sections(targets, open_texts, own_path, text)
        neighbours = [(self._name(p, own_path), t) for p, t in open_texts.items() if p != own_path and t != text]
        with self._lock:
            neighbours += [(self._name(os.path.normpath(_path_of(u)), own_path), t) for u, t in self._closed.items()
                           if u != uri and os.path.normpath(_path_of(u)) not in open_texts]
        query = "\n".join(lines[scope.start - 1 : scope.end])
        picked = nearest(query, neighbours, NEIGHBOURS, exclude=text)
        for c in picked:
            sections.append(ContextSection(c.name, c.text, "neighbour"))
        sections += self._edited_sections(uri, own_path, open_texts, picked, text)
        limit = int(self.share * self.context_tokens * CHARS_PER_TOKEN)
        kept, used = [], 0
        for s in sections:
            if used + len(s.text) <= limit:
                kept.append(s)
                used += len(s.text)
        return _Made(scope, others_hash, ContextBlock(tuple(kept), self.share, self.form))

    def _edited_sections(self, uri: str, own_path: str | None, open_texts: dict[str, str], picked: list,
                         own_text: str) -> list[ContextSection]:
        """The chunk around the last edit of the other open documents edited last (EDITED of
        them), unless a neighbour holds it already."""
        with self._lock:
            recent = [(u, ln) for u, ln in reversed(self._edited.items()) if u != uri]
        out: list[ContextSection] = []
        for u, ln in recent:
            path = os.path.normpath(_path_of(u))
            text = open_texts.get(path)
            if text is None or text == own_text or len(out) == EDITED:
                continue
            name = self._name(path, own_path)
            for c in chunks(name, text):
                if c.line <= ln < c.line + CHUNK_STEP and not any(p.name == name and p.line == c.line for p in picked):
                    if c.text not in own_text:
                        out.append(ContextSection(name, c.text, "edited"))
                    break
        return out

    def _stub_sections(self, targets: list[Target], open_texts: dict[str, str], own_path: str | None,
                       own_text: str) -> list[ContextSection]:
        """One section per file, in the order of its first target; each definition once."""
        by_file: OrderedDict[str, list[str]] = OrderedDict()
        seen: set[tuple[str, str]] = set()
        modules: list[Target] = []
        for t in targets:
            if t.kind == "module":
                modules.append(t)
                continue
            source = own_text if t.path == own_path else self._source(t.path, open_texts)
            got = stub_of(source, t.line) if source else None
            if got is None or (t.path, got[0]) in seen:
                continue
            seen.add((t.path, got[0]))
            by_file.setdefault(t.path, []).append(got[1])
        for t in modules:  # a module read as a receiver: its members, after the definitions themselves
            source = self._source(t.path, open_texts)
            listed = frozenset(name for path, name in seen if path == t.path)
            got = stub_of(source, 0, "module", listed) if source else None
            if got is not None and (t.path, "") not in seen:
                seen.add((t.path, ""))
                by_file.setdefault(t.path, []).append(got[1])
        return [ContextSection(self._name(p, own_path), "".join(stubs), "definitions") for p, stubs in by_file.items()]

    def _source(self, path: str, open_texts: dict[str, str]) -> str | None:
        if path in open_texts:
            return open_texts[path]
        try:
            if os.path.getsize(path) > MAX_SOURCE_BYTES:
                return None
            with open(path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return None

    def _root_of(self, path: str | None) -> str | None:
        if path is None:
            return None
        for r in self.roots:
            if path == r or path.startswith(r.rstrip(os.sep) + os.sep):
                return r
        return None

    def _inside(self, path: str, own_path: str | None) -> bool:
        """A definition in the workspace: under a root the client named (else under the
        document's own project), not in an environment's packages or jedi's typeshed."""
        path = os.path.normpath(path)
        if any(part in _OUTSIDE for part in path.split(os.sep)) or _under(path, _ENVIRONMENT):
            return False
        root = self._root_of(own_path)
        if root is None and own_path is not None:
            project = str(self._project(own_path).path)
            if any(os.path.exists(os.path.join(project, m)) for m in _MARKERS) and not _under(project, _ENVIRONMENT):
                root = project
        return root is not None and _under(path, (root,))

    def _name(self, path: str, own_path: str | None) -> str:
        """A path as the prompt names it: relative to the workspace folder holding the document."""
        root = self._root_of(own_path) or self._root_of(path)
        if root is None and own_path is not None:
            root = str(self._project(own_path).path)
        return os.path.relpath(path, root) if root and os.path.isabs(path) else os.path.basename(path)

    def _project(self, own_path: str | None):
        """The jedi project of a document: the workspace folder holding it, else the one jedi
        finds from its path (a folder with setup.py, pyproject.toml or .git)."""
        import jedi

        root = self._root_of(own_path)
        if root is None:
            if own_path is None:
                return None
            return jedi.get_default_project(os.path.dirname(own_path))
        if root not in self._projects:
            self._projects[root] = jedi.Project(root)
        return self._projects[root]


def _under(path: str, roots) -> bool:
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)
