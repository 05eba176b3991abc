"""Weight matrices kept in GGUF's own storage, as the kernels read them.

A GGUF model stores most matrices in blocks along a row (ggml's layouts, `WeightFormat`):
legacy blocks of 32 values with a float16 scale d (Q4_0, Q5_0, Q8_0: value = d * (q - offset))
or a scale and a minimum m (Q4_1, Q5_1: value = d * q + m), and K-quant super-blocks of 256
values (Q4_K, Q5_K: 8 sub-blocks of 32 with 6-bit scales and mins under float16 d and dmin;
Q6_K: 16 sub-blocks of 16 with int8 scales under a float16 d). Small models also hold plain
F32, F16 and BF16 matrices. A float16 copy of a Q4_K matrix takes 3.6 times its memory and
holds each value rounded; the blocks hold the file's values exactly.

`BlockMatrix` is such a matrix: its storage as a uint8 tensor [N, K / block values * block
bytes] (a view of a memory-mapped file: page cache, shared), its `WeightFormat` and its shape
[N, K]. Every format but F16 is a `BlockMatrix` (F32 and BF16 rows as their bytes); F16
matrices stay plain float16 tensors (`library.DecodeKernels.half_matmul`).

`BlockMatrix.dequantize` gives gguf's own values bit for bit (`gguf.quants.dequantize`, the
reference): every format's value is one exact product d * q (or (d * sc) * q: at most 23
significant bits, exact in float32) and, for the formats with a minimum, one rounded
addition, which is what gguf's numpy computes. It runs in the C kernels
(`decode_kernels.c`'s `dequantize_matrix`: ~3 ms for 1,000 rows of a 262,144 x 640 Q8_0
table, checks included, against gguf's numpy 60 ms); where they can't be built, gguf's numpy
code computes it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import torch

BLOCK_VALUES = 32  # values per legacy block, along a row (`WeightFormat.block_values` for each format)
SUPER_BLOCK_VALUES = 256  # values per K-quant super-block


class WeightFormat(enum.IntEnum):
    """How a matrix's values are stored: ggml's type numbers (`gguf.GGMLQuantizationType`),
    which the C kernels' `W_*` constants repeat; each with its `block_values` (values per block
    along a row, 1 for the plain float formats) and `block_bytes` (bytes per block): gguf's
    GGML_QUANT_SIZES. (Attributes, not properties: the kernels' checks read them at every call.)"""

    def __new__(cls, number: int, values: int, nbytes: int) -> WeightFormat:
        member = int.__new__(cls, number)
        member._value_ = number
        member.block_values = values
        member.block_bytes = nbytes
        return member

    F32 = (0, 1, 4)
    F16 = (1, 1, 2)
    Q4_0 = (2, 32, 18)
    Q4_1 = (3, 32, 20)
    Q5_0 = (6, 32, 22)
    Q5_1 = (7, 32, 24)
    Q8_0 = (8, 32, 34)
    Q4_K = (12, 256, 144)
    Q5_K = (13, 256, 176)
    Q6_K = (14, 256, 210)
    BF16 = (30, 1, 2)

    @property
    def quantized(self) -> bool:
        """Integer codes under block scales (the kernels' int8 products apply to these)."""
        return self.block_values > 1


# the formats a `BlockMatrix` holds (F16 matrices are plain float16 tensors)
BLOCK_FORMATS = tuple(f for f in WeightFormat if f is not WeightFormat.F16)


class BlockFormatError(ValueError):
    """A tensor that is not a matrix of the blocks it claims, or a storage type the kernels
    don't read; the message says why."""


def weight_format(kind) -> WeightFormat:
    """The `WeightFormat` of a ggml type (a `gguf.GGMLQuantizationType`, its number or its
    name); `BlockFormatError` naming it where the kernels don't read that type."""
    name = getattr(kind, "name", kind)
    try:
        return WeightFormat(kind) if isinstance(kind, int) else WeightFormat[name]
    except (KeyError, ValueError):
        pass
    known = ", ".join(f.name for f in WeightFormat)
    raise BlockFormatError(f"storage type {name} is not one the kernels read ({known})")


@dataclass(frozen=True)
class BlockMatrix:
    """A matrix [rows, cols] stored in `format`: `blocks` uint8 [rows, cols / block values *
    block bytes], C-ordered. Made through `BlockMatrix.of`, which checks the sizes."""

    blocks: torch.Tensor
    format: WeightFormat
    rows: int
    cols: int

    @staticmethod
    def of(blocks: torch.Tensor, fmt, cols: int) -> BlockMatrix:
        """The matrix whose rows of `cols` values are the rows of `blocks`; `fmt` a
        `WeightFormat` or a ggml type (`weight_format`). `BlockFormatError` where `blocks`
        can't be that, or the type is not one the kernels read."""
        fmt = weight_format(fmt)
        if fmt not in BLOCK_FORMATS:
            raise BlockFormatError(
                f"{fmt.name} is not a block format ({', '.join(f.name for f in BLOCK_FORMATS)}): "
                "float16 matrices are float16 tensors")
        if not isinstance(blocks, torch.Tensor) or blocks.dtype != torch.uint8 or blocks.dim() != 2:
            what = f"{blocks.dtype} {list(blocks.shape)}" if isinstance(blocks, torch.Tensor) else type(blocks).__name__
            raise BlockFormatError(f"{fmt.name} blocks must be a 2-D uint8 tensor, not {what}")
        if cols <= 0 or cols % fmt.block_values:
            raise BlockFormatError(
                f"a {fmt.name} row must hold a positive multiple of {fmt.block_values} values, not {cols}")
        want = cols // fmt.block_values * fmt.block_bytes
        if blocks.shape[1] != want:
            raise BlockFormatError(f"{fmt.name} rows of {cols} values take {want} bytes, not {blocks.shape[1]}")
        if not blocks.is_contiguous() or not blocks.is_cpu:
            raise BlockFormatError(f"{fmt.name} blocks must be a contiguous CPU tensor")
        return BlockMatrix(blocks, fmt, blocks.shape[0], cols)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows, self.cols)

    def dequantize(self, ids: torch.Tensor | None = None, kernels=None) -> torch.Tensor:
        """The values of rows `ids` (any shape of int64 indices; all rows where None) as float32
        [..., cols]: exactly gguf's `dequantize` of those rows, what the kernels compute with;
        by `kernels` (a `library.DecodeKernels`: C, fast enough for embedding lookups) where
        given, else by gguf's numpy code."""
        if ids is not None:
            ids = torch.as_tensor(ids)
            if ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8) or ids.is_floating_point():
                raise IndexError(f"row ids must be integers, not {ids.dtype}")
            flat = ids.reshape(-1).to(torch.int64)
            if flat.numel() and (int(flat.min()) < -self.rows or int(flat.max()) >= self.rows):
                raise IndexError(f"row ids must be in [-{self.rows}, {self.rows}), not {int(flat.min())}..{int(flat.max())}")
            flat = torch.where(flat < 0, flat + self.rows, flat).contiguous()
        if kernels is not None:
            out = kernels.dequantize(self, None if ids is None else flat)
        else:
            out = self._gguf_values(self.blocks if ids is None else self.blocks[flat])
        return out if ids is None else out.reshape(*ids.shape, self.cols)

    def _gguf_values(self, rows: torch.Tensor) -> torch.Tensor:
        """gguf's numpy de-quantization of these rows of blocks (the machines without kernels)."""
        from gguf import GGMLQuantizationType, quants

        raw = rows.numpy()
        kind = GGMLQuantizationType(int(self.format))
        if self.format is WeightFormat.F32:
            values = raw.view("<f4").copy()
        else:
            values = quants.dequantize(raw, kind)
        return torch.from_numpy(values.reshape(rows.shape[0], self.cols))

    def embedding(self, ids: torch.Tensor, kernels=None) -> torch.Tensor:
        """The rows `ids` as float32 (an embedding lookup; `kernels` as for `dequantize`)."""
        return self.dequantize(ids, kernels)
