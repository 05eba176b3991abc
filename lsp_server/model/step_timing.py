"""The model step's clock: how long forward passes take on the device that runs them, and how much
of the grammar's mask work ran while one was in flight (`StepTiming`, one per decoding pass,
held by `decoding.loop.ModelStepper`).

On the CPU a forward pass is over when the call returns, so the wall clock times it. On CUDA the
call only queues the kernels (a replayed graph returns in microseconds): a wall-clock reading
times the launch, not the work, and the speculation's γ chooser, which weighs T(γ+1) against
T(1), would be fed nonsense. CUDA passes are timed with events recorded on the stream around
the pass (`StepTiming.forward`) and read later, when the pass has finished anyway (the next
pass, or `close` at the end of decoding): timing never adds a synchronisation of its own, so
the mask work that overlaps a pass stays overlapped.

On CUDA the decoding loop launches step t's forward pass before it computes step t's mask on the
CPU (`ModelStepper.launch`, where `may_launch`), then applies the mask to the logits (the
XGrammar scheme): the mask costs nothing when the device is still busy when it is done. The
tally: the mask time spent with a forward pass in flight (`overlapped_ms`) and, on CUDA, the
part of it after which the device was still running (`hidden_ms`: an event recorded after the
launch had not been reached when the mask was done). Each pass's tally joins the process's
`TOTALS` when it closes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

Report = Callable[[int, float], None]  # (tokens fed, milliseconds)


class OverlapTotals:
    """The tallies of every decoding pass of the process, summed (the benchmark and the stats
    read `TOTALS`; each pass adds its own when it closes)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sums = {"masks": 0, "mask_ms": 0.0, "overlapped_ms": 0.0, "hidden_ms": 0.0}

    def add(self, tally: StepTiming) -> None:
        with self._lock:
            self._sums["masks"] += tally.masks
            self._sums["mask_ms"] += tally.total_ms
            self._sums["overlapped_ms"] += tally.overlapped_ms
            self._sums["hidden_ms"] += tally.hidden_ms

    def to_json(self) -> dict:
        with self._lock:
            s = dict(self._sums)
        share = s["overlapped_ms"] / s["mask_ms"] if s["mask_ms"] else 0.0
        hidden = s["hidden_ms"] / s["mask_ms"] if s["mask_ms"] else 0.0
        return {k: round(v, 3) for k, v in s.items()} | {"overlapped_share": round(share, 4),
                                                          "hidden_share": round(hidden, 4)}


TOTALS = OverlapTotals()


class StepTiming:
    """One decoding pass's forward passes, timed and reported (`report(tokens, ms)`: at once on
    the CPU, once the pass has finished on CUDA), and its masks' overlap with them.
    `launch_early` None: launch ahead where the device runs asynchronously (CUDA)."""

    def __init__(self, device: torch.device, report: Report, launch_early: bool | None = None) -> None:
        self.device = torch.device(device)
        self.report = report
        self.on_cuda = self.device.type == "cuda"
        self.enabled = self.on_cuda if launch_early is None else launch_early
        self.may_launch = self.enabled  # a pass may be launched ahead of this step's mask
        self.total_ms = self.overlapped_ms = self.hidden_ms = 0.0
        self.masks = 0
        self._pending: list[tuple[int, object, object]] = []  # CUDA: (tokens, start, end)
        self._in_flight: object = None  # the pass launched ahead: its event (True on the CPU)

    @contextmanager
    def forward(self, tokens: int) -> Iterator[None]:
        """Times the forward pass over `tokens` tokens that the block runs (on CUDA, first
        reports the passes that have finished)."""
        if self.on_cuda:
            self._flush()
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            stop.record()
            self._pending.append((tokens, start, stop))
        else:
            t0 = time.perf_counter()
            yield
            self.report(tokens, (time.perf_counter() - t0) * 1000)

    def _flush(self) -> None:
        """Report the CUDA passes whose end event has been reached (all of them once the host
        has read their results); the others wait for the next flush."""
        waiting = []
        for tokens, start, stop in self._pending:
            if stop.query():
                self.report(tokens, start.elapsed_time(stop))
            else:
                waiting.append((tokens, start, stop))
        self._pending = waiting

    def launched(self) -> None:
        """A forward pass was launched ahead of the step's mask."""
        if self.on_cuda:
            event = torch.cuda.Event()
            event.record()
            self._in_flight = event
        else:
            self._in_flight = True

    def masked(self, ms: float) -> None:
        """The step's mask took `ms` milliseconds."""
        self.total_ms += ms
        self.masks += 1
        if self._in_flight is not None:
            self.overlapped_ms += ms
            if not isinstance(self._in_flight, bool) and not self._in_flight.query():
                self.hidden_ms += ms
        self._in_flight = None

    def step(self, forced: bool) -> None:
        """The step's mask left one token (`forced`: its token waits, to be fed with the next
        in one pass, so the next pass is not launched ahead) or a choice."""
        self.may_launch = self.enabled and not forced

    def close(self) -> None:
        """The decoding pass ended: wait for the passes still running and report them; the
        tally joins the process's `TOTALS`."""
        if self._pending:
            self._pending[-1][2].synchronize()
        self._flush()
        TOTALS.add(self)

    @property
    def share(self) -> float:
        """The part of the mask time computed while a forward pass was in flight."""
        return self.overlapped_ms / self.total_ms if self.total_ms else 0.0

    def to_json(self) -> dict:
        return {"masks": self.masks, "mask_ms": round(self.total_ms, 3), "overlapped_ms": round(self.overlapped_ms, 3),
                "hidden_ms": round(self.hidden_ms, 3), "overlapped_share": round(self.share, 4)}
