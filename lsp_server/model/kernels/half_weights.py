"""Half-precision weights for decoding steps on the CPU.

A decoding step multiplies one row (a verification, a few) by every weight matrix of the
model: the time goes into reading the weights, not into arithmetic. Read as float16 they take
half the bytes. `SmallBatchLinear` keeps both copies and picks by the number of rows: prompts
(many rows) use the float32 weights and MKL, decoding steps and verification passes the float16
copy through `library` (our AVX2 kernel: float32 inputs and sums, float16 weights read once
for all rows, the same result for a row whatever the number of rows). Where the kernel can't be
built, PyTorch's float16 product is used instead (inputs rounded to float16; it runs one row at
a time, so n rows cost about n steps, and its result may depend on the number of rows).
Measured on this 2-core AVX2 machine, the 211 products of one SmolLM2-135M step: float32 20 ms,
PyTorch float16 13 ms, the kernel 10 ms; for 8 rows 48 / 80 / 21 ms.
Everything around the products (norms, attention, the KV cache, the logits) stays float32.
Greedy top-1 agreement with the float32 model was 199/199 teacher-forced positions of
json/decoder.py (PyTorch's float16 product).

`use_half_weights_for_decoding(model)` swaps every `nn.Linear` of a float32 model in place;
models on a GPU (bf16 there) are left alone.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

MAX_HALF_ROWS = 16  # products with at most this many rows read the float16 copy
MAX_KERNEL_ROWS = 32  # ... with the kernel, which stays ahead of MKL's float32 product up to here


class SmallBatchLinear(torch.nn.Module):
    """An `nn.Linear` with a float16 copy of its weight for products of few rows."""

    def __init__(self, linear: torch.nn.Linear, max_half_rows: int = MAX_HALF_ROWS, kernel=None) -> None:
        super().__init__()
        self.kernel = kernel  # a library.DecodeKernels, or None: PyTorch's float16 product
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.weight = linear.weight  # shared (tied embeddings stay tied)
        self.bias = linear.bias
        self.register_buffer("weight_half", linear.weight.detach().to(torch.float16), persistent=False)
        self.max_half_rows = max_half_rows

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // max(1, x.shape[-1])
        if rows > self.max_half_rows or x.dtype != torch.float32:
            return F.linear(x, self.weight, self.bias)
        if self.kernel is not None:
            out = self.kernel.half_matmul(x, self.weight_half)
        else:
            out = F.linear(x.to(torch.float16), self.weight_half).to(torch.float32)
        return out if self.bias is None else out + self.bias

    def extra_repr(self) -> str:
        how = "kernel" if self.kernel is not None else "torch"
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"half ({how}) for <= {self.max_half_rows} rows")


def use_half_weights_for_decoding(model: torch.nn.Module, max_half_rows: int | None = None,
                                  use_kernel: bool = True) -> int:
    """Swap the float32 CPU `nn.Linear` modules of `model` for `SmallBatchLinear`; the number
    swapped (0 for a model on another device or in another dtype). With `use_kernel` the
    products go through `library` where it can be built here."""
    kernel = None
    if use_kernel:
        from . import library as decode_kernels

        kernel = decode_kernels.load()
    if max_half_rows is None:
        max_half_rows = MAX_KERNEL_ROWS if kernel is not None else MAX_HALF_ROWS
    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if (
                type(child) is torch.nn.Linear
                and child.weight.device.type == "cpu"
                and child.weight.dtype == torch.float32
            ):
                usable = kernel if kernel is not None and kernel.fits(child.weight) else None
                setattr(parent, name, SmallBatchLinear(child, max_half_rows, usable))
                swapped += 1
    return swapped
