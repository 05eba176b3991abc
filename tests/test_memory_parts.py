"""Resident memory by part (`lsp_server.model.memory_parts`): the parts add up to the kernel's
total, a memory-mapped safetensors file shows as its own part once read, and a model's tensors
are counted once each, the file-viewing ones apart."""

from __future__ import annotations

import numpy as np
import torch

from lsp_server.model.memory_parts import array_bytes, mapped_parts, process_memory, tensor_bytes

WEIGHTS = "mapped safetensors (weights)"


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
