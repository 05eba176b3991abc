"""The allocator settings (`lsp_server.allocator`): applied through glibc's mallopt where the
environment doesn't set them, left to the environment where it does; freed heap memory handed
back on demand (`release_freed_memory`)."""

from __future__ import annotations

import platform

import pytest

from lsp_server.allocator import ENVIRONMENT, SETTINGS, MallocOption, give_back_freed_memory, release_freed_memory
from lsp_server.model.memory_parts import process_memory


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt's options are glibc's")
def test_the_settings_are_applied_unless_the_environment_sets_them():
    assert give_back_freed_memory({}) == {option.name: value for option, value in SETTINGS.items()}
    env = {ENVIRONMENT[MallocOption.ARENA_MAX]: "4"}
    applied = give_back_freed_memory(env)
    assert MallocOption.ARENA_MAX.name not in applied
    assert applied[MallocOption.MMAP_THRESHOLD.name] == SETTINGS[MallocOption.MMAP_THRESHOLD]


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_freed_memory_below_a_live_block_goes_back_to_the_system():
    blocks = [bytes(2000) + bytes([i % 256]) for i in range(100_000)]  # ~200 MB from the heap, not mmap
    kept = bytes(3000) + b"!"  # above them: the heap's top stays in use, so free() alone can't shrink it
    before = process_memory()["VmRSS"]
    del blocks
    assert process_memory()["VmRSS"] > before - 100 * 1024  # freed, still resident (KiB)
    assert release_freed_memory()
    assert process_memory()["VmRSS"] < before - 100 * 1024
    assert kept.endswith(b"!")
