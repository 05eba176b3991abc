"""A pool of forked workers for the analyses (Bar-Hillel queries, the store's per-context
streamlining): the parent's structures are shared by the fork, page by page, and stay shared."""

from __future__ import annotations

import gc
import multiprocessing
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


def can_fork() -> bool:
    """Whether this process may fork its workers: no thread but the main one runs (a fork copies
    only the calling thread; a lock another thread holds would stay held in the child). tqdm's
    monitor (`TMonitor`, a daemon started by the first progress bar, asleep on its own event)
    does not count: the workers never use it, and progress bars would otherwise keep every
    build in one process."""
    return all(t is threading.main_thread() or type(t).__name__ == "TMonitor" for t in threading.enumerate())


@contextmanager
def forked_pool(processes: int, initializer: Callable | None = None, initargs: tuple = (),
                tasks_per_worker: int | None = None) -> Iterator:
    """`multiprocessing`'s fork pool of `processes` workers, with the objects made so far out of
    the collector's reach while it runs (`gc.freeze`): a collection in a worker would write to
    every one of them and so copy every page the fork shares with this process. With
    `tasks_per_worker`, a worker that has run that many tasks is replaced by a fresh fork (what
    it grew goes back to the system)."""
    gc.freeze()
    try:
        with multiprocessing.get_context("fork").Pool(processes, initializer=initializer, initargs=initargs,
                                                     maxtasksperchild=tasks_per_worker) as pool:
            yield pool
    finally:
        gc.unfreeze()


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off while the block runs (as it was after). For the
    analyses' workers: the explorers' memos hold millions of tuples, and every full collection
    walked them all (a third of the jointly-legal step's CPU; Bar-Hillel's queries, whose
    grammar objects are as many, 15 -> 6 s), to find next to nothing: these searches make no
    reference cycles that outlive them."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            if multiprocessing.parent_process() is not None:
                # a pool's worker: what the block made goes out of the collector's sight, else
                # the first allocation after (pickling the result) walks it all once. Not in
                # a process of its own (a server's): frozen cycles would never be collected
                gc.freeze()
            gc.enable()

