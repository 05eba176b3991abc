"""jedi in a process of its own, stopped while the server's model runs: the server's requests
never share an interpreter lock, a heap or the cores with jedi.

    names = JediProcess("lsp_server.decoding.identifiers.analysis:scope_job", busy=engine_busy)
    answer = names.ask({"text": ..., "line": ...})   # the handler's JSON answer; raises JediFailed
    names.close()

The child runs one handler (`module:function`, named by a string: the child imports it, the
server's side does not), `handler(job, state) -> dict` for each job, `state` a dict it keeps
across jobs (jedi projects, memos). Two uses: the names guide's scope analysis
(`identifiers.analyses`) and the context block's lookups (`repo_context.lookup_process`).

Why a process: in the server's own process a jedi query (a `goto` parsing a large module: 0.1-0.5 s
warm, 2-9 s cold under a prefill's load) could neither be stopped by a request nor let go of the
interpreter lock while it ran (a request's mask took 10.9 ms alone and 270 ms beside one,
docs/context.md); and jedi's parse trees (hundreds of thousands of objects, their nodes pointing
at their parents) were walked by every full cycle collection of the server's heap, 0.1-0.5 s
each, started by whichever thread allocated at the moment, a request's included (docs/memory.md).
A process can be stopped: while a job runs, the server looks at `busy()` every `POLL_S` and stops
the child (`SIGSTOP`) while the model runs, and lets it go on (`SIGCONT`) once it is idle (looking
every `STOPPED_POLL_S` meanwhile: a look wakes a thread of the server's, which takes the
interpreter lock from the model's thread for a moment). Its priority is the lowest besides
(`SCHED_IDLE` on Linux, else `nice` 19): a lower priority alone was not enough (at `nice` 19 a
warm request's 6 tokens took 398 ms of model time beside a lookup instead of ~60: the child ran in
the gaps of the model's threads and took their caches). jedi's caches are bounded after each job
(`bound_jedi_caches`) before the child answers (so, also stopped while busy), and the answer
says how many source lines of parsed modules it kept (`parsed_lines`).

The protocol is one JSON line each way over the child's stdin and stdout (no pickles); the child
prints nothing else there (its stdout is its stderr). A job that raises answers its error; a
child that dies, or runs longer than `TIMEOUT_S` (then it is killed), fails that job
(`JediFailed`) and a new child serves the next one. The child dies with the server (Linux:
`PR_SET_PDEATHSIG`; elsewhere when the server closes its stdin).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

TIMEOUT_S = 120.0  # one job's running time at most (its time stopped not counted; cold jedi: seconds)
POLL_S = 0.005  # how often a running job's waiter looks at busy() (the child runs this long at most beside the model)
STOPPED_POLL_S = 0.05  # and a stopped one's (the model runs: each look wakes a thread that wants the interpreter lock)
NICE = 19  # the lowest CPU priority where SCHED_IDLE is not to be had
PR_SET_PDEATHSIG = 1  # linux/prctl.h
CAN_STOP = hasattr(signal, "SIGSTOP")  # POSIX; elsewhere the child runs at the lowest priority only


class JediFailed(Exception):
    """A job raised in the child, or the child died or was killed."""


# ---------------------------------------------------------------------------- the child's side


def serve(server_pid: int, handler_name: str) -> None:
    """The child's loop: a job per line on stdin, `handler`'s answer per line on the protocol's
    stdout, jedi's caches bounded after each; ends when the server closes stdin, or dies."""
    from .identifiers.jedi_memory import bound_jedi_caches, cached_lines
    from .identifiers.parso_disk import memory_only

    die_with(server_pid)
    protocol = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed goes to stderr, never into the protocol
    sys.stdout = sys.stderr
    lowest_priority()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    memory_only()
    module, _, function = handler_name.partition(":")
    handler = getattr(importlib.import_module(module), function)
    state: dict = {}
    for raw in sys.stdin.buffer:
        try:
            answer = handler(json.loads(raw), state)
        except Exception as e:  # jedi on code it can't read: this job fails, the child goes on
            answer = {"error": f"{type(e).__name__}: {e}"}
        try:
            bound_jedi_caches()
            answer["parsed_lines"] = cached_lines()
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


class JediProcess:
    """The child process running `handler` (`module:function`; started at the first job, again
    after one died); `ask` one job at a time, the child stopped while `busy()`. Thread-safe."""

    def __init__(self, handler: str, busy: Callable[[], bool] = lambda: False, timeout_s: float = TIMEOUT_S) -> None:
        self.handler = handler
        self.busy = busy
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._child: subprocess.Popen | None = None
        self._answers: queue.Queue[bytes] = queue.Queue()  # the child's lines (b"": it ended)
        self.started = 0  # children started
        self.stops = 0  # times a job was stopped because the model ran
        self.parsed_lines = 0  # source lines of the modules the child keeps parsed, after its last job

    @property
    def pid(self) -> int | None:
        child = self._child
        return child.pid if child is not None and child.poll() is None else None

    def ask(self, job: dict) -> dict:
        """The handler's answer to `job` (JSON both); raises JediFailed."""
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
                raise JediFailed(f"the jedi process ended (exit code {child.returncode}{why})")
            try:
                answer = json.loads(raw)
            except ValueError:  # a line cut short (the child killed while it wrote): a child no longer to be trusted
                self._end(child)
                raise JediFailed(f"the jedi process answered a line that is not JSON: {raw[:80]!r}") from None
        self.parsed_lines = answer.pop("parsed_lines", self.parsed_lines)
        if "error" in answer:
            raise JediFailed(answer["error"])
        return answer

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
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
        code = f"from {__name__} import serve; serve({os.getpid()}, {self.handler!r})"
        self._child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       env=env)
        self._answers = queue.Queue()
        threading.Thread(target=_read_lines, args=(self._child.stdout, self._answers), daemon=True,
                         name="jedi-answers").start()
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
        """End the child (a job running ends with JediFailed)."""
        child = self._child
        if child is not None:
            child.kill()  # before the lock: a job waiting on the child holds it
        with self._lock:
            if self._child is not None:
                self._end(self._child)


def _read_lines(stream, answers: queue.Queue) -> None:
    """The child's answers, a line each, into `answers`; b"" once it ended (its stdout closed)."""
    with stream:
        for raw in iter(stream.readline, b""):
            answers.put(raw)
    answers.put(b"")
