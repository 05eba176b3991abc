"""The kernel builds the kernel tests run against (test_kernels.py, test_block_formats.py): every
build this machine can run (avx512, avx2, portable), and under AddressSanitizer the sanitized
builds in their place (see test_kernels.test_kernel_tests_pass_under_address_sanitizer: its
subprocess names them in SANITIZED_ENV, and importing this module makes them the ones
`build.load` gives)."""

from __future__ import annotations

import ctypes
import json
import os

import numpy as np
import pytest

from lsp_server.model.kernels import build, library

SANITIZED_ENV = "SYNTAXLOCK_TEST_SANITIZED_KERNELS"
SANITIZED: dict[str, library.DecodeKernels] = {}
if os.environ.get(SANITIZED_ENV):
    for _isa, _path in json.loads(os.environ[SANITIZED_ENV]).items():
        SANITIZED[_isa] = library.DecodeKernels(ctypes.CDLL(_path), _isa)
        build._loaded[build._load_key(_isa)[0]] = SANITIZED[_isa]


def kernels_of(isa: str) -> library.DecodeKernels:
    """The build `isa` of the kernels; the test is skipped (with the reason) where it can't be
    loaded here."""
    if isa not in build.runnable_isas():
        pytest.skip(f"this CPU can't run the {isa} build")
    kernels = build.load(isa)
    if kernels is None:
        pytest.skip(f"the kernels can't be loaded here: {build.unavailable(isa)}")
    return kernels


def random_blocks(fmt, rows: int, cols: int, rng: np.random.Generator, sane: bool = True,
                  scales: tuple[float, float] = (1e-3, 1e-2)) -> np.ndarray:
    """uint8 [rows, bytes a row] of `fmt` (a quantized `WeightFormat`): random bytes, and where
    `sane` the float16 scales (d, and Q4_1/Q5_1/Q4_K/Q5_K's minimum or dmin) drawn in
    `scales` (random bytes make NaN and infinite scales)."""
    size, values = fmt.block_bytes, fmt.block_values
    blocks = rng.integers(0, 256, (rows, cols // values, size), dtype=np.uint8)
    if sane:
        at_bytes = {"Q4_0": (0,), "Q5_0": (0,), "Q8_0": (0,), "Q6_K": (208,)}.get(fmt.name, (0, 2))
        for at in at_bytes:
            d = rng.uniform(*scales, (rows, cols // values)).astype(np.float16)
            blocks[:, :, at:at + 2] = d.view(np.uint8).reshape(rows, cols // values, 2)
    return blocks.reshape(rows, -1)
