"""What jedi keeps between analyses, bounded (the names analysis's memory, docs/memory.md).

jedi parses every module an analysis follows (typeshed's stubs, the stdlib's and the
environment's sources) with parso, and parso keeps each tree in `parso.cache.parser_cache` for
the life of the process: over 40 documents that cache grows past 200 modules and the server's
resident memory by ~180 MiB. After each analysis `bound_jedi_caches` keeps the trees of the most
recently used modules up to `PARSE_CACHE_LINES` source lines (builtins and typing stay: every
analysis reads them), collects the trees it dropped (their nodes point at their parents: only
the cycle collector frees them) and hands the freed heap pages back to the system
(`malloc_trim`, glibc only). A dropped module is parsed again from its source when an analysis
needs it (parso's disk cache of pickles is off: `parso_disk`).
"""

from __future__ import annotations

from ...allocator import release_freed_memory

PARSE_CACHE_LINES = 30_000  # source lines of parsed modules kept (the measure in docs/memory.md)


def prune_parse_cache(lines: int, cache: dict | None = None) -> int:
    """Drop the least recently used parsed modules of parso's cache (`cache`: parso's
    `parser_cache`, {grammar: {path: item}}) until the ones kept hold at most `lines` source
    lines. Returns how many modules were dropped."""
    if cache is None:
        from parso.cache import parser_cache as cache
    items = sorted(((item.last_used, grammar, path, len(item.lines))
                    for grammar, modules in cache.items() for path, item in modules.items()),
                   key=lambda x: x[0], reverse=True)
    kept, dropped = 0, 0
    for _, grammar, path, n in items:
        kept += n
        if kept > lines:
            del cache[grammar][path]
            dropped += 1
    return dropped


def cached_lines(cache: dict | None = None) -> int:
    """The source lines of the parsed modules parso keeps (`cache`: its `parser_cache`)."""
    if cache is None:
        from parso.cache import parser_cache as cache
    return sum(len(item.lines) for modules in cache.values() for item in modules.values())


def bound_jedi_caches(lines: int = PARSE_CACHE_LINES) -> int:
    """`prune_parse_cache(lines)` under the lock jedi's analyses hold, then
    `release_freed_memory()`: what the analysis and the requests before it freed (a prompt's
    temporaries among it) goes back too. Returns how many modules were dropped."""
    from .analysis import _JEDI  # parso's cache is read and written by jedi under this lock

    with _JEDI:
        dropped = prune_parse_cache(lines)
    release_freed_memory()
    return dropped
