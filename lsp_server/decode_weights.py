"""Half-precision weights for decoding steps on the CPU.

A decoding step multiplies one row (a verification, a few) by every weight matrix of the
model: the time goes into reading the weights, not into arithmetic. Read as float16 they take
half the bytes, and PyTorch's CPU kernels for few-row float16 products are fast even without
native float16 arithmetic (measured on this 2-core AVX2 machine, SmolLM2-135M, 150-token
context: one token 64-82 ms → 52 ms, four tokens 125-137 ms → 88 ms; the 49,152 × 576 output
projection alone 12.8 ms → 4.0 ms). For many rows (a prompt) the float16 product is several
times *slower* than float32, so `SmallBatchLinear` keeps both copies and picks by the number of
rows: prompts run as before, decoding steps read half the bytes. Everything around the products
(norms, attention, the KV cache, the logits) stays float32; only the inputs of the few-row
products are rounded to float16 (their accumulation is float32). Greedy top-1 agreement with the
float32 model was 199/199 teacher-forced positions of json/decoder.py.

`use_half_weights_for_decoding(model)` swaps every `nn.Linear` of a float32 model in place;
models on a GPU (bf16 there) are left alone.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

MAX_HALF_ROWS = 16  # products with at most this many rows read the float16 copy


class SmallBatchLinear(torch.nn.Module):
    """An `nn.Linear` with a float16 copy of its weight for products of few rows."""

    def __init__(self, linear: torch.nn.Linear, max_half_rows: int = MAX_HALF_ROWS) -> None:
        super().__init__()
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
        out = F.linear(x.to(torch.float16), self.weight_half).to(torch.float32)
        return out if self.bias is None else out + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, half for <= {self.max_half_rows} rows"


def use_half_weights_for_decoding(model: torch.nn.Module, max_half_rows: int = MAX_HALF_ROWS) -> int:
    """Swap the float32 CPU `nn.Linear` modules of `model` for `SmallBatchLinear`; the number
    swapped (0 for a model on another device or in another dtype)."""
    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if (
                type(child) is torch.nn.Linear
                and child.weight.device.type == "cpu"
                and child.weight.dtype == torch.float32
            ):
                setattr(parent, name, SmallBatchLinear(child, max_half_rows))
                swapped += 1
    return swapped
