"""How long forward passes take on the device that runs them.

On the CPU a forward pass is over when the call returns, so the wall clock times it. On CUDA the
call only queues the kernels (a replayed graph returns in microseconds): a wall-clock reading
times the launch, not the work, and the speculation's γ chooser, which weighs T(γ+1) against
T(1), would be fed nonsense. `ForwardClock` times CUDA passes with events recorded on the
stream around the pass and reads them later, when the pass has finished anyway (the next pass,
or `flush` after the logits were read): timing never adds a synchronisation of its own, so
the mask work that overlaps a pass stays overlapped.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

Report = Callable[[int, float], None]  # (tokens fed, milliseconds)


class ForwardClock:
    """Times forward passes of `tokens` tokens and reports them (`report(tokens, ms)`): at once
    on the CPU, once the pass has finished on CUDA."""

    def __init__(self, device: torch.device, report: Report) -> None:
        self.device = torch.device(device)
        self.report = report
        self._pending: list[tuple[int, object, object]] = []  # CUDA: (tokens, start, end)
        self._t0 = 0.0
        self._start = None

    @property
    def on_cuda(self) -> bool:
        return self.device.type == "cuda"

    def begin(self) -> None:
        if self.on_cuda:
            self._start = torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._t0 = time.perf_counter()

    def end(self, tokens: int) -> None:
        if self.on_cuda:
            stop = torch.cuda.Event(enable_timing=True)
            stop.record()
            self._pending.append((tokens, self._start, stop))
            self._start = None
        else:
            self.report(tokens, (time.perf_counter() - self._t0) * 1000)

    def flush(self) -> None:
        """Report the CUDA passes whose end event has been reached (all of them once the host
        has read their results); the others wait for the next flush."""
        waiting = []
        for tokens, start, stop in self._pending:
            if stop.query():
                self.report(tokens, start.elapsed_time(stop))
            else:
                waiting.append((tokens, start, stop))
        self._pending = waiting

    def finish(self) -> None:
        """Wait for the passes still running and report them (the end of a decoding pass)."""
        if self._pending:
            self._pending[-1][2].synchronize()
        self.flush()
