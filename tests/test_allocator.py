"""The allocator settings (`lsp_server.allocator`): applied through glibc's mallopt where the
environment doesn't set them, left to the environment where it does."""

from __future__ import annotations

import platform

import pytest

from lsp_server.allocator import ENVIRONMENT, SETTINGS, MallocOption, give_back_freed_memory


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt's options are glibc's")
def test_the_settings_are_applied_unless_the_environment_sets_them():
    assert give_back_freed_memory({}) == {option.name: value for option, value in SETTINGS.items()}
    env = {ENVIRONMENT[MallocOption.ARENA_MAX]: "4"}
    applied = give_back_freed_memory(env)
    assert MallocOption.ARENA_MAX.name not in applied
    assert applied[MallocOption.MMAP_THRESHOLD.name] == SETTINGS[MallocOption.MMAP_THRESHOLD]
