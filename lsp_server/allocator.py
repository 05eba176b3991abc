"""C allocator settings that give freed memory back to the system (glibc's malloc).

PyTorch's CPU tensors come from malloc. glibc serves a large block from its own mapping only
above a threshold that it raises, up to 32 MiB, each time such a block is freed; after the
first prompt the per-layer temporaries (megabytes each) come from the heaps instead, one heap
("arena") per thread that allocates (up to 8 per core), and their freed space stays with the
process. Measured with bench/memory.py (40 completions on real files, default model): the
server's steady RSS was 1,655 MiB with glibc's defaults and 1,328 MiB with a fixed threshold
of 256 KiB, trimming above 256 KiB and two arenas (`SETTINGS`), the KV caches 506 MiB in both.

`give_back_freed_memory()` applies `SETTINGS` through `mallopt` (the CLI calls it first
thing); a variable the user set (MALLOC_MMAP_THRESHOLD_, ...) wins, since glibc read it at
start. Elsewhere than glibc it does nothing and says why.

`release_freed_memory()` collects what nothing reaches and hands the heaps' free pages back
(`malloc_trim`): memory freed below the threshold (Python's objects, a parsed JSON) otherwise
stays resident. Called after loading the model and after jedi's caches are bounded.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import os
from enum import IntEnum


class MallocOption(IntEnum):
    """glibc's `mallopt` parameters (malloc.h)."""

    TRIM_THRESHOLD = -1
    MMAP_THRESHOLD = -3
    ARENA_MAX = -8


SETTINGS = {
    MallocOption.MMAP_THRESHOLD: 256 * 1024,  # blocks from here up get their own mapping, freed at once
    MallocOption.TRIM_THRESHOLD: 256 * 1024,  # free space above this at a heap's top goes back
    MallocOption.ARENA_MAX: 2,  # heaps shared by the threads instead of one per thread
}
ENVIRONMENT = {
    MallocOption.MMAP_THRESHOLD: "MALLOC_MMAP_THRESHOLD_",
    MallocOption.TRIM_THRESHOLD: "MALLOC_TRIM_THRESHOLD_",
    MallocOption.ARENA_MAX: "MALLOC_ARENA_MAX",
}


@functools.cache
def glibc_function(function: str):
    """glibc's `function`, or None where the C library has none (musl, macOS, Windows)."""
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c")), function)
    except (OSError, AttributeError, TypeError):
        return None


def give_back_freed_memory(environ: dict | None = None) -> dict[str, int] | str:
    """Apply `SETTINGS` (those the environment doesn't set); the ones applied by name, or why
    none could be (not glibc)."""
    environ = os.environ if environ is None else environ
    mallopt = glibc_function("mallopt")
    if mallopt is None:
        return f"no glibc mallopt here ({ctypes.util.find_library('c')})"
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    applied = {}
    for option, value in SETTINGS.items():
        if ENVIRONMENT[option] in environ:
            continue
        if mallopt(int(option), value) == 1:
            applied[option.name] = value
    return applied


def release_freed_memory() -> bool:
    """Collect what nothing reaches (cycles included), then hand the heaps' free pages back to
    the system (glibc's `malloc_trim`); whether pages could be handed back (False: not glibc)."""
    gc.collect()
    trim = glibc_function("malloc_trim")
    if trim is None:
        return False
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    trim(0)
    return True
