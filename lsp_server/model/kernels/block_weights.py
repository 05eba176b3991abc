"""Weight matrices kept in GGUF's quantized blocks, as the kernels read them.

A GGUF model stores most matrices in blocks of 32 values along a row: Q4_1 (a float16 scale
d, a float16 minimum m, 32 4-bit codes: value = d * q + m; 20 bytes for 32 values) and Q8_0
(a float16 scale d, 32 int8 codes: value = d * q; 34 bytes). A float16 copy of such a matrix
takes 64 bytes per 32 values and holds each value rounded; the blocks hold the file's values
exactly in a third (Q4_1) or half (Q8_0) of it. The kernels (`decode_kernels.c`,
`weights_matmul` and the layer kernels) de-quantize a panel of weight rows at a time (8; 64
for a prompt's products) into float32 (exact: d * q is exact in float32, so d * q + m is rounded once, as gguf's own
`(d * q) + m`) and multiply it with the same tiles as float16 weights, so a row's result
still does not depend on the other rows of the pass.

`BlockMatrix` is such a matrix: its blocks as a uint8 tensor [N, K / 32 * block bytes] (a
view of a memory-mapped file: page cache, shared), its `WeightFormat` and its shape [N, K].
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import torch

BLOCK_VALUES = 32  # values per block, along a row


class WeightFormat(enum.IntEnum):
    """How a matrix's values are stored (the C enum's values: `W_F16`, `W_Q4_1`, `W_Q8_0`)."""

    F16 = 0
    Q4_1 = 1
    Q8_0 = 2

    @property
    def block_bytes(self) -> int:
        """Bytes per block of `BLOCK_VALUES` values (block formats only)."""
        return {WeightFormat.Q4_1: 20, WeightFormat.Q8_0: 34}[self]


BLOCK_FORMATS = (WeightFormat.Q4_1, WeightFormat.Q8_0)


class BlockFormatError(ValueError):
    """A tensor that is not a matrix of the blocks it claims; the message says why."""


def _scales(blocks: torch.Tensor, at: int) -> torch.Tensor:
    """The float16 field at byte `at` of every block [..., blocks] as float32 [..., blocks, 1]."""
    return blocks[..., at:at + 2].contiguous().view(torch.float16).to(torch.float32)


@dataclass(frozen=True)
class BlockMatrix:
    """A matrix [rows, cols] stored as GGUF blocks: `blocks` uint8 [rows, cols / 32 * block bytes],
    C-ordered. Made through `BlockMatrix.of`, which checks the sizes."""

    blocks: torch.Tensor
    format: WeightFormat
    rows: int
    cols: int

    @staticmethod
    def of(blocks: torch.Tensor, fmt: WeightFormat, cols: int) -> BlockMatrix:
        """The matrix whose rows of `cols` values are the rows of `blocks`; `BlockFormatError`
        where `blocks` can't be that."""
        if fmt not in BLOCK_FORMATS:
            raise BlockFormatError(f"{fmt!r} is not a block format ({', '.join(f.name for f in BLOCK_FORMATS)})")
        if not isinstance(blocks, torch.Tensor) or blocks.dtype != torch.uint8 or blocks.dim() != 2:
            what = f"{blocks.dtype} {list(blocks.shape)}" if isinstance(blocks, torch.Tensor) else type(blocks).__name__
            raise BlockFormatError(f"{fmt.name} blocks must be a 2-D uint8 tensor, not {what}")
        if cols <= 0 or cols % BLOCK_VALUES:
            raise BlockFormatError(f"a {fmt.name} row must hold a positive multiple of {BLOCK_VALUES} values, not {cols}")
        want = cols // BLOCK_VALUES * fmt.block_bytes
        if blocks.shape[1] != want:
            raise BlockFormatError(
                f"{fmt.name} rows of {cols} values take {want} bytes, not {blocks.shape[1]}"
            )
        if not blocks.is_contiguous() or not blocks.is_cpu:
            raise BlockFormatError(f"{fmt.name} blocks must be a contiguous CPU tensor")
        return BlockMatrix(blocks, fmt, blocks.shape[0], cols)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows, self.cols)

    def dequantize(self, ids: torch.Tensor | None = None) -> torch.Tensor:
        """The values of rows `ids` (all rows where None) as float32 [..., cols]: exactly what
        the kernels compute with (and what gguf's `dequantize` gives)."""
        b = self.blocks if ids is None else self.blocks[ids]
        b = b.reshape(*b.shape[:-1], self.cols // BLOCK_VALUES, self.format.block_bytes)
        d = _scales(b, 0)
        if self.format is WeightFormat.Q8_0:
            q = b[..., 2:].contiguous().view(torch.int8).to(torch.float32)
            out = d * q
        else:
            packed = b[..., 4:]
            q = torch.cat((packed & 0x0F, packed >> 4), dim=-1).to(torch.float32)
            out = d * q + _scales(b, 2)  # d * q exact, so one rounding, as gguf's (d * q) + m
        return out.reshape(*out.shape[:-2], self.cols)

    def embedding(self, ids: torch.Tensor) -> torch.Tensor:
        """The rows `ids` as float32 (an embedding lookup)."""
        return self.dequantize(ids)
