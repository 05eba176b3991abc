"""Where a process's resident memory goes, by part (for `syntaxlock.status` and bench/memory.py).

- `process_memory(pid)`: the kernel's totals (/proc/PID/status): resident now and at its peak,
  anonymous and file-backed;
- `mapped_parts(pid)`: resident memory by mapping (/proc/PID/smaps): the weights files
  (a memory-mapped GGUF or safetensors file: page cache, shared by every process that maps them), PyTorch's
  libraries, other libraries and files, and anonymous memory (the Python heap, tensors, the
  mask store's arrays, the KV caches);
- `tensor_bytes(tensors)`, `model_bytes(model)`: what a model holds, by dtype (matrices kept in
  GGUF blocks under their format, "Q4_1 blocks", "Q8_0 blocks") and by whether it views a file
  or owns memory (tied tensors counted once);
- `heap_usage()`: the C heap (glibc's `mallinfo2`): in use, free but kept, and the blocks
  served from their own mappings (tensors of 256 KiB and more: the KV caches), and Python's
  small objects (allocated blocks; their 1 MiB arenas are anonymous mappings outside malloc).
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Iterable
from pathlib import Path

from ..allocator import glibc_function

STATUS_FIELDS = ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem")


def process_memory(pid: int | str = "self") -> dict[str, int]:
    """The kernel's memory totals of process `pid`, in KiB (`STATUS_FIELDS`)."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in STATUS_FIELDS:
            out[key] = int(value.split()[0])
    return out


def _part_of(path: str) -> str:
    if not path or path.startswith("[anon") or path in ("[heap]", "[stack]"):
        return "anonymous"
    if path.endswith((".gguf", ".safetensors")):
        return "mapped weights (GGUF, safetensors)"
    if "/torch/" in path or "/torch.libs/" in path:
        return "torch libraries"
    if path.startswith("["):
        return "kernel mappings"
    return "other libraries and files"


def mapped_parts(pid: int | str = "self") -> dict[str, int]:
    """Resident KiB of process `pid` by part (see the module doc), from /proc/PID/smaps."""
    out: dict[str, int] = {}
    part = "anonymous"
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split(maxsplit=5)
        if head and "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
            part = _part_of(head[5].strip() if len(head) == 6 else "")
        elif line.startswith("Rss:"):
            out[part] = out.get(part, 0) + int(line.split()[1])
    return out


def _is_mapped(t) -> bool:
    """The tensor views a memory-mapped file (a safetensors file loaded without a copy)."""
    try:
        return not t.untyped_storage().resizable()
    except (AttributeError, RuntimeError):
        return False


def tensor_bytes(tensors: Iterable, labels: dict[int, str] | None = None) -> dict[str, int]:
    """Bytes of `tensors` by dtype (or by `labels[storage address]` where given), with the
    file-viewing ones also under "mapped" (each storage counted once)."""
    labels = labels or {}
    seen: set[int] = set()
    out: dict[str, int] = {}
    for t in tensors:
        key = t.untyped_storage().data_ptr()
        if key in seen:
            continue
        seen.add(key)
        n = t.numel() * t.element_size()
        dtype = labels.get(key) or str(t.dtype).removeprefix("torch.")
        out[dtype] = out.get(dtype, 0) + n
        if _is_mapped(t):
            out["mapped"] = out.get("mapped", 0) + n
    return out


def model_bytes(model) -> dict[str, int]:
    """`tensor_bytes` of a model's parameters and buffers, the blocks of its `BlockMatrix`
    attributes (`cpu_decoder`'s GGUF matrices) under "<format> blocks"."""
    from .kernels.block_weights import BlockMatrix

    labels = {}
    for module in model.modules():
        for value in vars(module).values():
            for m in value if isinstance(value, tuple) else (value,):
                if isinstance(m, BlockMatrix):
                    labels[m.blocks.untyped_storage().data_ptr()] = f"{m.format.name} blocks"
    return tensor_bytes(list(model.parameters()) + list(model.buffers()), labels)


def array_bytes(obj) -> int:
    """Bytes of the numpy arrays among `obj`'s attributes (a mask store's tables)."""
    import numpy as np

    return sum(v.nbytes for v in vars(obj).values() if isinstance(v, np.ndarray))


class _MallInfo2(ctypes.Structure):
    """glibc's `struct mallinfo2` (malloc.h), every field a size_t."""

    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def heap_usage() -> dict[str, int]:
    """The C heap in bytes, over all of glibc's arenas: `malloc_in_use` (allocated blocks),
    `malloc_free` (freed, still resident unless trimmed), `malloc_mapped` (blocks with their own
    mapping); and `python_blocks`, Python's allocated small objects (a count). Only
    `python_blocks` where the C library is not glibc 2.33+."""
    out = {"python_blocks": sys.getallocatedblocks()}
    mallinfo2 = glibc_function("mallinfo2")
    if mallinfo2 is not None:
        mallinfo2.restype, mallinfo2.argtypes = _MallInfo2, []
        m = mallinfo2()
        out |= {"malloc_in_use": m.uordblks, "malloc_free": m.fordblks, "malloc_mapped": m.hblkhd}
    return out
