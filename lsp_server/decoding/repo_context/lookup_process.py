"""The context block's definitions, looked up with jedi in a process of its own, stopped while
the server's model runs: the server's requests never share an interpreter lock, nor the cores,
with jedi.

    lookups = DefinitionsProcess(busy=engine_busy)
    found = lookups.find(text, path, line, roots, open_texts, same=(start, header) or None)
    found.scope, found.sections                    # sections None: the scope is `same`
    lookups.close()

Why a process: in the server's own process a jedi query the block started (a `goto` parsing a
large module: 0.1-0.5 s warm, 2-9 s cold under a prefill's load) could neither be stopped by a
request nor let go of the interpreter lock while it ran; a request's mask took 10.9 ms alone and
270 ms beside one (docs/context.md). A process can be stopped: while a lookup runs, the server
looks at `busy()` every `POLL_S` and stops the child (`SIGSTOP`) while the model runs, and lets
it go on (`SIGCONT`) once it is idle (looking every `STOPPED_POLL_S` meanwhile: a look wakes a
thread of the server's, which takes the interpreter lock from the model's thread for a moment).
Its priority is the lowest besides (`SCHED_IDLE` on Linux, else `nice` 19): a lower priority alone was not enough (at `nice` 19 a warm request's 6 tokens
took 398 ms of model time beside a lookup instead of ~60: the child ran in the gaps of the
model's threads and took their caches). Its collections and parso's trees are its own memory,
bounded after each lookup (`bound_jedi_caches`) before it answers (so, also stopped while busy).

What the process does for one lookup (`lookup`): the document's jedi project (the workspace
folder holding it, else the folder jedi finds), the cursor's scope (`definitions.cursor_scope`),
the workspace definitions of the names used there (`definitions.definitions`) and their stubs
(`stubs.stub_of`, the modules read from the open documents' texts, else from disk), one section
per file; then the block's other sections, packed (`sections.block_sections`: the neighbours
ranked here too, off the server's interpreter lock). The protocol is one JSON line each way
over the child's stdin and stdout (no pickles); the child prints nothing else there (its stdout
is its stderr). A lookup that raises answers its
error; a child that dies, or takes longer than `TIMEOUT_S` (then it is killed), fails that
lookup (`LookupFailed`) and a new child serves the next one.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .definitions import Scope, Target, cursor_scope, definitions
from .sections import block_sections
from .stubs import stub_of
from .workspace_paths import display_name, inside, root_of

log = logging.getLogger(__name__)

TIMEOUT_S = 120.0  # one lookup's running time at most (its time stopped not counted; cold jedi: seconds)
POLL_S = 0.005  # how often a running lookup's waiter looks at busy() (the child runs this long at most beside the model)
STOPPED_POLL_S = 0.05  # and a stopped one's (the model runs: each look wakes a thread that wants the interpreter lock)
MAX_SOURCE_BYTES = 2_000_000  # a module larger than this is not read for stubs
NICE = 19  # the lowest CPU priority where SCHED_IDLE is not to be had
PR_SET_PDEATHSIG = 1  # linux/prctl.h
CAN_STOP = hasattr(signal, "SIGSTOP")  # POSIX; elsewhere the child runs at the lowest priority only


class LookupFailed(Exception):
    """A lookup raised in the child, or the child died or was killed."""


@dataclass(frozen=True)
class Found:
    scope: Scope
    sections: list[tuple[str, str, str]] | None  # (name, text, kind) of the block's sections; None: the scope is `same`


# ---------------------------------------------------------------------------- the child's side


def lookup(job: dict, projects: dict) -> dict:
    """One lookup (see the module docstring); `projects`: jedi projects by folder, kept."""
    import jedi

    text, roots = job["text"], tuple(job["roots"])
    own_path = job["path"]
    open_texts: dict[str, str] = job["open"]
    lines = text.split("\n")
    line1 = min(max(job["line"], 0), len(lines) - 1) + 1
    project = _project(own_path, roots, projects)
    project_path = str(project.path) if project is not None else None
    script = jedi.Script(text, path=own_path, project=project)
    scope = cursor_scope(script, lines, line1)
    out = {"scope": [scope.start, scope.end, scope.header], "sections": None}
    if job.get("same") == [scope.start, scope.header]:
        return out
    targets = definitions(script, lines, scope, line1, lambda p: inside(p, own_path, roots, project_path), own_path)

    def name(path: str) -> str:
        return display_name(path, own_path, roots, project_path)

    stubs = [(name(p), s) for p, s in stub_sections(targets, open_texts, own_path, text).items()]
    others = [(name(p), t) for p, t in open_texts.items() if p != own_path and t != text]
    others += [(name(p), t) for p, t in job["closed"].items()]
    edited = [(name(p), open_texts[p], ln) for p, ln in job["edited"] if p in open_texts]
    query = "\n".join(lines[scope.start - 1 : scope.end])
    out["sections"] = [list(s) for s in block_sections(stubs, query, text, others, edited, job["limit"])]
    return out


def _project(own_path: str | None, roots: tuple[str, ...], projects: dict):
    """The jedi project of a document: the workspace folder holding it, else the one jedi finds
    from its path (a folder with setup.py, pyproject.toml or .git)."""
    import jedi

    root = root_of(own_path, roots)
    if root is None:
        return None if own_path is None else jedi.get_default_project(os.path.dirname(own_path))
    if root not in projects:
        projects[root] = jedi.Project(root)
    return projects[root]


def stub_sections(targets: list[Target], open_texts: dict[str, str], own_path: str | None,
                  own_text: str) -> OrderedDict[str, str]:
    """The stubs of `targets` by file, in the order of each file's first target; each
    definition once; a module read as a receiver: its members, after the definitions themselves."""
    by_file: OrderedDict[str, list[str]] = OrderedDict()
    seen: set[tuple[str, str]] = set()
    modules: list[Target] = []
    for t in targets:
        if t.kind == "module":
            modules.append(t)
            continue
        source = own_text if t.path == own_path else _source(t.path, open_texts)
        got = stub_of(source, t.line) if source else None
        if got is None or (t.path, got[0]) in seen:
            continue
        seen.add((t.path, got[0]))
        by_file.setdefault(t.path, []).append(got[1])
    for t in modules:
        source = _source(t.path, open_texts)
        listed = frozenset(name for path, name in seen if path == t.path)
        got = stub_of(source, 0, "module", listed) if source else None
        if got is not None and (t.path, "") not in seen:
            seen.add((t.path, ""))
            by_file.setdefault(t.path, []).append(got[1])
    return OrderedDict((p, "".join(stubs)) for p, stubs in by_file.items())


def _source(path: str, open_texts: dict[str, str]) -> str | None:
    if path in open_texts:
        return open_texts[path]
    try:
        if os.path.getsize(path) > MAX_SOURCE_BYTES:
            return None
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def serve(server_pid: int) -> None:
    """The child's loop: a job per line on stdin, its answer per line on the protocol's stdout,
    jedi's caches bounded after each; ends when the server closes stdin, or dies."""
    from ..identifiers.jedi_memory import bound_jedi_caches
    from ..identifiers.parso_disk import memory_only

    die_with(server_pid)
    protocol = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed goes to stderr, never into the protocol
    sys.stdout = sys.stderr
    lowest_priority()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    memory_only()
    projects: dict = {}
    for raw in sys.stdin.buffer:
        try:
            answer = lookup(json.loads(raw), projects)
        except Exception as e:  # jedi on code it can't read: this lookup fails, the child goes on
            answer = {"error": f"{type(e).__name__}: {e}"}
        try:
            bound_jedi_caches()
        except Exception:  # a parso without the cache it reads: the child's memory grows, nothing else
            log.exception("bounding jedi's caches failed")
        protocol.write(json.dumps(answer).encode("ascii") + b"\n")
        protocol.flush()


def die_with(server_pid: int) -> None:
    """Linux: the kernel kills this process when the server's process ends (a child stopped
    while the model ran would never read its stdin's end): `prctl(PR_SET_PDEATHSIG, SIGKILL)`,
    the one libc call made here, its result checked; a server gone before it took effect: exit."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            log.warning("prctl(PR_SET_PDEATHSIG) failed: errno %d", ctypes.get_errno())
            return
    except (OSError, AttributeError):  # no libc to be had: the stdin's end still ends it
        return
    if os.getppid() != server_pid:
        os._exit(0)


def lowest_priority() -> None:
    """This process runs only where nothing else would: `SCHED_IDLE` (Linux), else `nice` 19."""
    if hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_IDLE"):
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            return
        except OSError:  # a kernel or sandbox that refuses it
            pass
    if hasattr(os, "nice"):
        os.nice(NICE)


# ---------------------------------------------------------------------------- the server's side


class DefinitionsProcess:
    """The child process (started at the first lookup, again after one died); `find` one lookup
    at a time, the child stopped while `busy()`. Thread-safe."""

    def __init__(self, busy: Callable[[], bool] = lambda: False, timeout_s: float = TIMEOUT_S) -> None:
        self.busy = busy
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._child: subprocess.Popen | None = None
        self._answers: queue.Queue[bytes] = queue.Queue()  # the child's lines (b"": it ended)
        self.started = 0  # children started
        self.stops = 0  # times a lookup was stopped because the model ran

    @property
    def pid(self) -> int | None:
        child = self._child
        return child.pid if child is not None and child.poll() is None else None

    def find(self, text: str, path: str | None, line: int, roots: tuple[str, ...], open_texts: dict[str, str],
             same: tuple[int, str] | None = None, closed: dict[str, str] | None = None,
             edited: list[tuple[str, int]] = (), limit: int = sys.maxsize) -> Found:
        """The block's sections for the cursor at 0-based `line` of `text` (the document at
        `path`; `open_texts`: the other open documents' by path, `closed`: recently closed
        ones', `edited`: (path, 0-based line) of the last edits in other documents, the most
        recent first; `limit`: the block's characters); raises LookupFailed."""
        job = {"text": text, "path": path, "line": line, "roots": list(roots), "open": open_texts,
               "same": list(same) if same is not None else None, "closed": closed or {},
               "edited": [list(e) for e in edited], "limit": limit}
        with self._lock:
            child = self._running()
            try:
                child.stdin.write(json.dumps(job).encode("ascii") + b"\n")
                child.stdin.flush()
                raw, killed = self._await(child)
            except OSError:
                raw, killed = b"", False
            if not raw:
                self._end(child)
                why = f", killed after {self.timeout_s:.0f} s of running" if killed else ""
                raise LookupFailed(f"the definitions process ended (exit code {child.returncode}{why})")
        answer = json.loads(raw)
        if "error" in answer:
            raise LookupFailed(answer["error"])
        start, end, header = answer["scope"]
        sections = None if answer["sections"] is None else [tuple(s) for s in answer["sections"]]
        return Found(Scope(start, end, header), sections)

    def _await(self, child: subprocess.Popen) -> tuple[bytes, bool]:
        """The child's answer (b"": it ended), stopping it while `busy()` and killing it once it
        has run `timeout_s` (its stopped time not counted); and whether it was killed."""
        ran, stopped, last = 0.0, False, time.perf_counter()
        try:
            while True:
                busy = self.busy()
                if busy != stopped and CAN_STOP:
                    child.send_signal(signal.SIGSTOP if busy else signal.SIGCONT)
                    stopped = busy
                    self.stops += busy
                try:
                    return self._answers.get(timeout=STOPPED_POLL_S if stopped else POLL_S), False
                except queue.Empty:
                    pass
                now = time.perf_counter()
                ran += 0.0 if stopped else now - last
                last = now
                if ran > self.timeout_s:
                    child.kill()
                    return b"", True
        finally:
            if stopped and child.poll() is None:
                child.send_signal(signal.SIGCONT)

    def _running(self) -> subprocess.Popen:
        if self._child is not None and self._child.poll() is None:
            return self._child
        root = str(Path(__file__).resolve().parents[3])
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
        self._child = subprocess.Popen([sys.executable, "-c", f"from {__name__} import serve; serve({os.getpid()})"],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self._answers = queue.Queue()
        threading.Thread(target=_read_lines, args=(self._child.stdout, self._answers), daemon=True,
                         name="definitions-answers").start()
        self.started += 1
        return self._child

    def _end(self, child: subprocess.Popen) -> None:
        child.kill()
        child.wait()
        try:
            child.stdin.close()
        except OSError:  # a write the dead child never read
            pass
        if self._child is child:
            self._child = None

    def close(self) -> None:
        """End the child (a lookup running ends with LookupFailed)."""
        child = self._child
        if child is not None:
            child.kill()  # before the lock: a lookup waiting on the child holds it
        with self._lock:
            if self._child is not None:
                self._end(self._child)


def _read_lines(stream, answers: queue.Queue) -> None:
    """The child's answers, a line each, into `answers`; b"" once it ended (its stdout closed)."""
    with stream:
        for raw in iter(stream.readline, b""):
            answers.put(raw)
    answers.put(b"")
