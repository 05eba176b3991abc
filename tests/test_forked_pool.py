"""The analyses' pool of forked workers (grammar_tools/analyses/forked_pool.py): a worker that
has run `tasks_per_worker` tasks is replaced by a fresh fork (the mask-store build's workers
give back what they grew: docs/memory.md), and the parent's collector is frozen only while the
pool runs."""

from __future__ import annotations

import gc
import os

from grammar_tools.analyses.forked_pool import forked_pool


def _pid(_):
    return os.getpid()


def test_a_worker_is_replaced_after_its_tasks():
    with forked_pool(2, tasks_per_worker=2) as pool:
        pids = pool.map(_pid, range(12), chunksize=1)
    assert os.getpid() not in pids
    assert max(pids.count(p) for p in set(pids)) <= 2 and len(set(pids)) >= 6
    assert gc.get_freeze_count() == 0


def test_without_a_bound_the_workers_stay():
    with forked_pool(2) as pool:
        pids = pool.map(_pid, range(12), chunksize=1)
    assert len(set(pids)) <= 2
