"""The grammar's mask as a packed bitmask, applied to logits on their device in place.

The matcher gives a mask as one bool per token (49,152 bytes for SmolLM2). To apply it on a GPU
with index tensors (`logits[~mask] = -inf`) costs a host→device copy of the mask, a nonzero
(a device→host synchronisation for the count) and a scatter. Packed, the mask is ceil(V/32)
int32 words (6 KB: bit j of word w says whether token 32·w + j is allowed, as XGrammar and vLLM
lay it out); one small copy per step moves it, and `apply_token_bitmask_inplace` expands the
bits with a shift and an AND and writes -inf where a bit is clear, with plain tensor ops: no
index tensor, no synchronisation, the same code on every device (a custom kernel would do it in
one pass; at these sizes the few elementwise kernels cost microseconds, and they can be
captured in a CUDA graph).

`masked_argmax` then reads the chosen token and whether anything was allowed in ONE device→host
transfer (the max's value and index together), instead of `isfinite().any()` and an `argmax`.
"""

from __future__ import annotations

import numpy as np
import torch

from mask_store import bits as mask_bits

BITS = 32


def words_for(vocab_size: int) -> int:
    """The int32 words of a bitmask over `vocab_size` tokens."""
    return mask_bits.n_words(vocab_size, np.int32)


def pack_mask(mask: np.ndarray, vocab_size: int | None = None) -> np.ndarray:
    """A bool mask (True: allowed) as int32 words, bit j of word w for token 32·w + j (the one
    layout: `mask_store.bits`); tokens past the mask's end (up to `vocab_size`) are not allowed."""
    size = len(mask) if vocab_size is None else int(vocab_size)
    return mask_bits.pack(np.asarray(mask[: min(len(mask), size)], dtype=bool), words_for(size), np.int32)


_shifts: dict[torch.device, torch.Tensor] = {}


def _bit_shifts(device: torch.device) -> torch.Tensor:
    """0..31 as int32 on `device`, made once per device (a constant, not an index)."""
    t = _shifts.get(device)
    if t is None:
        t = _shifts[device] = torch.arange(BITS, dtype=torch.int32, device=device)
    return t


def apply_token_bitmask_inplace(logits: torch.Tensor, bitmask: torch.Tensor) -> None:
    """Set the logits of the tokens whose bit is clear to -inf, in place. `logits`: (..., V)
    floats; `bitmask`: (..., W) int32 on the same device, broadcast over the leading dimensions
    when it has fewer; logits past 32·W are not allowed."""
    if bitmask.dtype != torch.int32:
        raise TypeError(f"a token bitmask is int32 words, not {bitmask.dtype}")
    if bitmask.device != logits.device:
        raise ValueError(f"the bitmask is on {bitmask.device}, the logits on {logits.device}")
    v = logits.shape[-1]
    covered = min(v, bitmask.shape[-1] * BITS)
    bits = torch.bitwise_and(torch.bitwise_right_shift(bitmask.unsqueeze(-1), _bit_shifts(logits.device)), 1)
    allowed = bits.reshape(*bitmask.shape[:-1], bitmask.shape[-1] * BITS)[..., :covered]
    logits[..., :covered].masked_fill_(allowed == 0, float("-inf"))
    if covered < v:
        logits[..., covered:] = float("-inf")


def masked_argmax(logits: torch.Tensor) -> int | None:
    """The argmax of a masked logits row (the first of equal maxima, as `torch.argmax`) and
    whether anything is allowed, read in one transfer: None when every logit is -inf (or NaN)."""
    index = torch.argmax(logits, dim=-1, keepdim=True)
    value, token = torch.cat((logits.gather(-1, index).float(), index.float())).tolist()
    if not value > float("-inf"):
        return None
    return int(token)


class BitmaskUpload:
    """A bool mask packed on the host and copied into one device buffer reused every step. The
    copy is asynchronous from pageable memory: the driver stages the words before the call
    returns, so the host side is never shared with a copy still queued, and nothing waits."""

    def __init__(self, vocab_size: int, device: torch.device) -> None:
        self.vocab_size = int(vocab_size)
        self.device = torch.device(device)
        self.on_device = torch.zeros(words_for(self.vocab_size), dtype=torch.int32, device=self.device)

    def __call__(self, mask: np.ndarray) -> torch.Tensor:
        """The device's packed copy of `mask` (valid until the next call)."""
        self.on_device.copy_(torch.from_numpy(pack_mask(mask, self.vocab_size)), non_blocking=True)
        return self.on_device
