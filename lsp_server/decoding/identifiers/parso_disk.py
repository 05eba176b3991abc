"""parso's disk cache off: the names analysis reads no pickle and writes none.

jedi parses every module a document imports with parso, asking for parso's cache (`cache=True`),
and parso then keeps each parsed tree in memory *and* pickles it to disk
(`~/.cache/jedi/<interpreter>/*.pkl`, one file per module per path, never bounded by size: 3 GB
after a day of this project's benchmarks), and on the next run loads those pickles back with
`pickle.load`. The project never loads a pickle (a file anyone who can write the cache directory
could have planted runs code when unpickled), and two processes writing the same pickle while one
reads it failed analyses (an `EOFError` inside parso).

Neither jedi nor parso has a switch for it (jedi passes `cache=True` itself; parso's only knob is
the directory), so `memory_only()` replaces parso's two file-system functions with ones that read
nothing and write nothing; its in-memory cache (`parso.cache.parser_cache`, what jedi reuses
between analyses of one process) is untouched. It checks first that they are the functions this
was written against (name and parameters); where a parso release changed them it raises
`ParsoCacheChanged` and the analysis is not made (the request decodes without it) rather than
risk a pickle. Costs: the first analysis after the server starts parses the modules it follows
(~0.1-1 s, off the request path) instead of unpickling them.
"""

from __future__ import annotations

import inspect
import threading

import parso.cache

_LOAD = "_load_from_file_system"
_SAVE = "_save_to_file_system"
_EXPECTED = {_LOAD: ["hashed_grammar", "path", "p_time", "cache_path"],
             _SAVE: ["hashed_grammar", "path", "item", "cache_path"]}
_DONE = threading.Lock()


class ParsoCacheChanged(RuntimeError):
    """parso's disk cache is not the one `memory_only` knows how to turn off."""


def _read_nothing(hashed_grammar, path, p_time, cache_path=None):
    return None  # as parso answers for a module it has no cache file of: parse it


def _write_nothing(hashed_grammar, path, item, cache_path=None):
    return None


def memory_only() -> None:
    """Turn parso's disk cache off in this process (idempotent; see the module docstring)."""
    with _DONE:
        if getattr(parso.cache, _LOAD, None) is _read_nothing and getattr(parso.cache, _SAVE, None) is _write_nothing:
            return
        for name, parameters in _EXPECTED.items():
            function = getattr(parso.cache, name, None)
            if function is None or list(inspect.signature(function).parameters) != parameters:
                raise ParsoCacheChanged(f"parso {parso.__version__}: parso.cache.{name} is not the function "
                                        f"with parameters {parameters}; its disk cache cannot be turned off")
        setattr(parso.cache, _LOAD, _read_nothing)
        setattr(parso.cache, _SAVE, _write_nothing)
