"""jedi's caches bounded between names analyses (lsp_server/decoding/identifiers/jedi_memory.py,
docs/memory.md): parso's parsed modules kept up to a number of source lines, the least recently
used dropped, the analyses unchanged; the server's analyses made in a process of their own
(`jedi_process`), its parse trees never in the server's heap."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from parso.cache import parser_cache

from lsp_server.decoding.identifiers.analyses import NameAnalyses
from lsp_server.decoding.jedi_process import CAN_STOP
from lsp_server.decoding.identifiers.analysis import analyse
from lsp_server.decoding.identifiers.jedi_memory import PARSE_CACHE_LINES, cached_lines, prune_parse_cache

pytestmark = pytest.mark.names

DOC = """import os
import json


class Shop:
    def __init__(self, customers):
        self.customers = customers

    def count(self):
        return len(self.customers)
"""


def summary(scope) -> tuple:
    receivers = {name: (list(r.attributes), r.closed) for name, r in scope.receivers.items()}
    return list(scope.names), list(scope.document_names), receivers, scope.name_set, list(scope.wanted)


def test_the_modules_used_most_recently_are_kept_up_to_the_bound():
    cache = {"g": {f"m{i}": SimpleNamespace(last_used=used, lines=[""] * n)
                   for i, (used, n) in enumerate([(5.0, 100), (9.0, 300), (1.0, 50), (7.0, 200)])},
             "h": {"m4": SimpleNamespace(last_used=8.0, lines=[""] * 10)}}
    assert prune_parse_cache(520, cache) == 2
    assert set(cache["g"]) == {"m1", "m3"} and set(cache["h"]) == {"m4"}  # 300 + 10 + 200 lines
    assert prune_parse_cache(0, cache) == 3
    assert cache == {"g": {}, "h": {}}


def test_the_servers_analysis_is_made_in_the_jedi_process_bounded_and_unchanged():
    parser_cache.clear()
    analyses = NameAnalyses()
    made = analyses.wait("file:///shop.py", DOC, 9, 120.0)
    assert cached_lines() == 0  # no parse tree in this (the server's) process
    assert analyses.jedi.pid is not None and 3000 < analyses.jedi.parsed_lines <= PARSE_CACHE_LINES
    in_process = analyse(DOC, 9)
    assert summary(made) == summary(in_process) and made.receivers[b"os"].closed
    analyses.jedi.close()
    assert analyses.jedi.pid is None


def test_after_an_analysis_jedis_parsed_modules_are_bounded_and_the_analysis_is_unchanged():
    from lsp_server.decoding.identifiers.jedi_memory import bound_jedi_caches

    parser_cache.clear()
    unbounded = summary(analyse(DOC, 9))
    assert cached_lines() > 3000  # builtins, os, json, typing: what the bound is about
    bound_jedi_caches(3000)
    assert 0 < cached_lines() <= 3000
    assert summary(analyse(DOC, 9)) == unbounded  # the dropped modules parsed again


@pytest.mark.skipif(not CAN_STOP or not Path("/proc/self/stat").exists(), reason="SIGSTOP and /proc (Linux)")
def test_the_analysis_waits_stopped_while_the_engine_is_busy():
    import threading

    busy = threading.Event()
    busy.set()
    analyses = NameAnalyses(busy=busy.is_set)
    future = analyses.request("file:///shop.py", DOC, 9)

    def state() -> str:
        pid = analyses.jedi.pid
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] if pid else ""

    deadline = time.monotonic() + 60
    while state() != "T" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert state() == "T" and analyses.jedi.stops == 1 and not future.done()  # stopped, the analysis waiting in it
    busy.clear()
    assert summary(future.result(120)) == summary(analyse(DOC, 9))
    analyses.jedi.close()
