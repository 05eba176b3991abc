"""One float16 copy of the weights, for every product on the CPU (prompts and decoding steps).

A decoding step multiplies one row (a verification, a few) by every weight matrix of the
model: the time goes into reading the weights. A prompt multiplies hundreds of rows: the time
goes into arithmetic. Our kernel (`library.half_matmul`: float32 inputs and sums, float16
weights converted in registers, weights read once for all rows, each row's result the same
whatever the number of rows) beats MKL's float32 product at both. Measured on this 2-core
AVX-512 machine, [1536, 576] weights: 1 row 0.021 ms against 0.083, 64 rows 0.29 against 0.67,
512 rows 2.4 against 4.5 (`docs/memory.md`). So the model keeps ONE copy, in float16: `HalfLinear`
holds it and multiplies every row count by it; `HalfEmbedding` looks rows up in it (a tied
output projection shares the tensor). Everything around the products (norms, attention, the
KV cache, the logits) stays float32.

`use_half_weights(model, kernels)` swaps a model's `nn.Linear` and `nn.Embedding` modules in
place; their float32 weights (if any) are dropped, float16 weights (a model loaded in float16,
perhaps memory-mapped from the file) are kept as they are, not copied. Matrices the kernel
can't multiply (rows not a multiple of 8 long) stay `nn.Linear` in float32. Without the kernels
the runtime keeps a float32 model (PyTorch's CPU float16 product runs one row at a time: a
prompt would cost a step per token).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

HALF = torch.float16


class HalfLinear(torch.nn.Module):
    """`x @ weight.T (+ bias)` for float32 `x` and a float16 `weight` [N, K] (the only copy),
    through the kernel for any number of rows; the result float32."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, kernel) -> None:
        super().__init__()
        self.kernel = kernel  # a library.DecodeKernels
        self.out_features, self.in_features = weight.shape
        self.weight = torch.nn.Parameter(weight.detach(), requires_grad=False)
        self.bias = None if bias is None else torch.nn.Parameter(bias.detach().float(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.kernel.half_matmul(x.float(), self.weight)
        return out if self.bias is None else out + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, float16 weight (kernel)"


class HalfEmbedding(torch.nn.Module):
    """An embedding table kept in float16; the rows looked up come out float32."""

    def __init__(self, weight: torch.Tensor, padding_idx: int | None = None) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = weight.shape
        self.padding_idx = padding_idx
        self.weight = torch.nn.Parameter(weight.detach(), requires_grad=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.weight).to(torch.float32)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, float16"


def _half(t: torch.Tensor, copies: dict[int, torch.Tensor]) -> torch.Tensor:
    """`t` in float16, converted once per tensor (tied weights stay one tensor)."""
    key = id(t)
    if key not in copies:
        copies[key] = t.detach() if t.dtype == HALF else t.detach().to(HALF)
    return copies[key]


def use_half_weights(model: torch.nn.Module, kernel) -> int:
    """Swap the CPU `nn.Linear` modules of `model` that `kernel.fits` for `HalfLinear` and its
    `nn.Embedding` modules for `HalfEmbedding`, float16 weights kept as they are and others
    converted (tied weights stay tied: one float16 tensor); the others are made float32. The
    number of modules swapped. Its small parameters (norms) are made float32."""
    copies: dict[int, torch.Tensor] = {}
    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is torch.nn.Linear and child.weight.device.type == "cpu":
                if kernel.fits(child.weight):
                    new = HalfLinear(_half(child.weight, copies), child.bias, kernel)
                    swapped += 1
                else:
                    new = child.to(torch.float32)
                setattr(parent, name, new)
            elif type(child) is torch.nn.Embedding and child.weight.device.type == "cpu":
                setattr(parent, name, HalfEmbedding(_half(child.weight, copies), child.padding_idx))
                swapped += 1
    # the swapped modules hold `copies`' tensors; rebuild their Parameters to share them
    _tie(model, copies)
    for p in model.parameters():
        if p.dtype != HALF or p.dim() < 2:
            p.data = p.data.to(torch.float32)
    for b_name, b in model.named_buffers():
        if b.is_floating_point() and b.dtype != torch.float32:
            raise ValueError(f"buffer {b_name} is {b.dtype}: load the model in float32 buffers")
    return swapped


def _tie(model: torch.nn.Module, copies: dict[int, torch.Tensor]) -> None:
    """Modules given the same float16 tensor hold the same Parameter (ties stay ties)."""
    params: dict[int, torch.nn.Parameter] = {}
    for m in model.modules():
        if isinstance(m, (HalfLinear, HalfEmbedding)):
            key = m.weight.data_ptr()
            if key in params:
                m.weight = params[key]
            else:
                params[key] = m.weight
