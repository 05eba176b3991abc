"""A stand-in for the model that writes again the tokens a real model wrote at a cut point: the
stopping rules of other code measured on the same generations without running the model again
(`completion_quality.py --replay`).

Greedy decoding is deterministic, so as long as the other code takes the same tokens, the real
model would have written what the replay writes; stopping rules that only stop earlier (or
drop a completion) give exactly what the real model would with them. After the recorded
tokens the replay ends the sequence."""

from __future__ import annotations

import torch


class _Positions:
    """Just enough of a KV cache: how many positions it holds."""

    def __init__(self) -> None:
        self.n = 0

    nbytes = 0

    def get_seq_length(self) -> int:
        return self.n

    def crop(self, k: int) -> None:
        self.n += k


class ReplayRuntime:
    """Logits that put the recorded token first at each generated position (after the prompt:
    what the first pass on a new cache reads), then the end of sequence; the real runtime's
    tokenizer and infilling format."""

    prefill_chunk = 1 << 30  # the prompt in one call

    def __init__(self, runtime, recorded: list[int]) -> None:
        self.tokenizer = runtime.tokenizer
        self.fim = runtime.fim
        self.name = f"replay of {runtime.name}"
        self.device = torch.device("cpu")
        self.load_seconds = 0.0
        self.vocab_size = self.tokenizer.vocab.size
        self.recorded = list(recorded)
        self.prompt_len = 0
        self.eos = int(sorted(self.tokenizer.vocab.eos)[0])

    def forward(self, ids, past=None, keep: int | None = None, cancel=None, wanted=None):
        if past is None:
            past = _Positions()
            self.prompt_len = len(ids)
        past.n += len(ids)
        keep = min(keep or len(ids), len(ids))
        logits = torch.full((keep, self.vocab_size), -10.0)
        for r in range(keep):  # row r: after the first past.n - keep + r + 1 positions
            step = past.n - keep + r + 1 - self.prompt_len
            if step >= 0:
                logits[r, self.recorded[step] if step < len(self.recorded) else self.eos] = 100.0
        return logits, past
