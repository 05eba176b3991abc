"""jedi's caches bounded between names analyses (lsp_server/decoding/identifiers/jedi_memory.py,
docs/memory.md): parso's parsed modules kept up to a number of source lines, the least recently
used dropped, the analyses unchanged."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from parso.cache import parser_cache

from lsp_server.decoding.identifiers.analyses import NameAnalyses
from lsp_server.decoding.identifiers.analysis import analyse
from lsp_server.decoding.identifiers.jedi_memory import prune_parse_cache

pytestmark = pytest.mark.names

DOC = """import os
import json


class Shop:
    def __init__(self, customers):
        self.customers = customers

    def count(self):
        return len(self.customers)
"""


def cached_lines() -> int:
    return sum(len(item.lines) for modules in parser_cache.values() for item in modules.values())


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


def test_after_an_analysis_jedis_parsed_modules_are_bounded_and_the_analysis_is_unchanged():
    parser_cache.clear()
    unbounded = summary(analyse(DOC, 9))
    assert cached_lines() > 3000  # builtins, os, json, typing: what the bound is about
    analyses = NameAnalyses(parse_cache_lines=3000)
    bounded = analyses.wait("file:///shop.py", DOC, 9, 120.0)
    deadline = time.monotonic() + 60.0  # the caches are bounded on the analyses' thread, after the analysis
    while cached_lines() > 3000 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert 0 < cached_lines() <= 3000
    assert summary(bounded) == unbounded and bounded.receivers[b"os"].closed
    assert summary(analyse(DOC, 9)) == unbounded  # the dropped modules parsed again
