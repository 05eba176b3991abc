"""Resident memory by part (`lsp_server.model.memory_parts`): the parts add up to the kernel's
total, a memory-mapped safetensors file shows as its own part once read, and a model's tensors
are counted once each, the file-viewing ones apart."""

from __future__ import annotations

import numpy as np
import torch

from lsp_server.model.memory_parts import array_bytes, mapped_parts, process_memory, tensor_bytes

WEIGHTS = "mapped weights (GGUF, safetensors)"


def test_the_parts_add_up_to_the_resident_total():
    before = process_memory()
    parts = mapped_parts()
    after = process_memory()
    total = sum(parts.values())
    assert min(before["VmRSS"], after["VmRSS"]) - 1024 <= total <= max(before["VmRSS"], after["VmRSS"]) + 1024
    assert parts["anonymous"] > 0 and parts["torch libraries"] > 0


def test_a_mapped_file_is_its_own_part_and_its_tensors_are_counted_as_mapped(tmp_path):
    from safetensors import safe_open
    from safetensors.torch import save_file

    path = tmp_path / "w.safetensors"
    save_file({"a": torch.ones(1024, 1024, dtype=torch.float16)}, str(path))
    before = mapped_parts().get(WEIGHTS, 0)
    with safe_open(str(path), framework="pt") as f:
        a = f.get_tensor("a")
    assert float(a.float().sum()) == 1024 * 1024  # read: its pages are resident
    assert mapped_parts().get(WEIGHTS, 0) >= before + 1024  # 2 MiB of the file, at least 1 MiB seen
    owned = torch.zeros(256, dtype=torch.float32)
    counts = tensor_bytes([a, a, owned, owned[:10]])  # each storage once
    assert counts == {"float16": 2 * 1024 * 1024, "mapped": 2 * 1024 * 1024, "float32": 1024}


def test_array_bytes_sums_an_objects_arrays():
    class Tables:
        def __init__(self):
            self.x = np.zeros(10, dtype=np.int32)
            self.y = np.zeros((2, 4), dtype=np.uint64)
            self.name = "not an array"

    assert array_bytes(Tables()) == 40 + 64


def test_heap_usage_sees_a_block_allocated_and_freed():
    """`heap_usage`: glibc's counters move with a block malloc'd and freed (in use, then not)."""
    import ctypes

    from lsp_server.model.memory_parts import heap_usage

    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    before = heap_usage()
    if "malloc_in_use" not in before:
        import pytest

        pytest.skip("not glibc 2.33+ (no mallinfo2)")
    block = libc.malloc(100_000)  # under the mmap threshold: from the heap
    held = heap_usage()
    libc.free(block)
    after = heap_usage()
    assert held["malloc_in_use"] >= before["malloc_in_use"] + 100_000
    assert after["malloc_in_use"] <= held["malloc_in_use"] - 100_000
    assert before["python_blocks"] > 0


def test_cached_lines_counts_parsos_modules():
    import parso

    from lsp_server.decoding.identifiers.jedi_memory import cached_lines
    from lsp_server.decoding.identifiers.parso_disk import memory_only

    memory_only()  # parso's cache in memory only: nothing pickled to disk
    parso.cache.parser_cache.clear()
    assert cached_lines() == 0
    grammar = parso.load_grammar()
    grammar.parse("x = 1\ny = 2\n", path="/nowhere/m.py", cache=True)
    assert cached_lines() == 3
    parso.cache.parser_cache.clear()
