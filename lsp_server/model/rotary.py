"""The rotary embedding's tables: cos and sin of every angle a forward pass rotates by, for the
positions it computes (`RotaryTables.of`).

Why kept: a decoding step needs the angles of one position, and computing them is two
transcendental PyTorch operations that PyTorch splits over its threads from a few hundred
values up; with the threads waiting as the server's do (`threads.use_fair_threads`) each split
costs 60-80 µs to wake them, ~0.15 ms of a 10-15 ms step for nothing. Here the angles are
computed a block of `BLOCK` positions at a time and the last `KEPT` blocks are kept (a few
MiB at most: Gemma 3's two tables of 256 dimensions take 1 MiB a block), so a step slices its
row out of a block computed 256 steps ago.

The values are those computed per pass before: the same element-wise operations on the same
inputs (positions as float32 times the scale, times each table's inverse frequencies, each
angle written for both dimensions it rotates, then cos and sin), whose result for an element
does not depend on the tensor around it (every count here a multiple of PyTorch's vector
width, so no element takes a scalar tail). tests/test_cpu_decoder.py holds every pass's logits
to transformers' bits, which compute theirs per pass.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import torch

from .architectures import Rotary

BLOCK = 256  # positions computed together
KEPT = 8  # blocks kept (the most recent used)


def angles(inv_freq: torch.Tensor, rope_scale: float, rotary: Rotary, start: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [tables, end - start, head_dim] of positions start .. end - 1."""
    positions = torch.arange(start, end).float() * rope_scale
    freqs = positions[None, :, None] * inv_freq[:, None, :]  # [tables, rows, D/2]
    if rotary is Rotary.HALVES:
        emb = torch.cat((freqs, freqs), dim=-1)
    else:
        emb = freqs.repeat_interleave(2, dim=-1)
    return emb.cos(), emb.sin()


class RotaryTables:
    """The angles of a model's rotary tables (`inv_freq` [tables, head_dim / 2], positions
    times `rope_scale`, `rotary` the dimensions' pairing) by blocks of positions."""

    def __init__(self, inv_freq: torch.Tensor, rope_scale: float, rotary: Rotary) -> None:
        self.inv_freq = inv_freq
        self.rope_scale = rope_scale
        self.rotary = rotary
        self._blocks: OrderedDict[int, tuple[torch.Tensor, torch.Tensor]] = OrderedDict()
        self._lock = threading.Lock()

    def _block(self, b: int) -> tuple[torch.Tensor, torch.Tensor]:
        with self._lock:
            got = self._blocks.get(b)
            if got is not None:
                self._blocks.move_to_end(b)
                return got
            got = angles(self.inv_freq, self.rope_scale, self.rotary, b * BLOCK, (b + 1) * BLOCK)
            self._blocks[b] = got
            while len(self._blocks) > KEPT:
                self._blocks.popitem(last=False)
            return got

    def of(self, rows: int, past: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin [tables, rows, head_dim] (contiguous) of positions past .. past + rows - 1."""
        first, last = past // BLOCK, (past + rows - 1) // BLOCK
        if rows <= 0 or last - first >= KEPT // 2:  # a long pass: its own angles, the blocks left for the steps
            return angles(self.inv_freq, self.rope_scale, self.rotary, past, past + rows)
        parts = []
        for b in range(first, last + 1):
            cos, sin = self._block(b)
            lo, hi = max(past, b * BLOCK) - b * BLOCK, min(past + rows, (b + 1) * BLOCK) - b * BLOCK
            parts.append((cos[:, lo:hi], sin[:, lo:hi]))
        if len(parts) == 1:
            cos, sin = parts[0]
            return cos.contiguous(), sin.contiguous()
        return torch.cat([c for c, _ in parts], dim=1), torch.cat([s for _, s in parts], dim=1)
