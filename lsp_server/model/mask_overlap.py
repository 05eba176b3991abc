"""How much of the grammar's mask work ran while the device computed a forward pass.

On CUDA the decoding loop launches step t's forward pass before it computes step t's mask on the
CPU (`ModelStepper.launch`), then applies the mask to the logits (the XGrammar scheme): the mask
costs nothing when the device is still busy when it is done. `MaskOverlap` keeps the tally:
the mask time spent with a forward pass in flight (`overlapped_ms`) and, on CUDA, the part of it
after which the device was still running (`hidden_ms`: an event recorded after the launch had not
been reached when the mask was done, so all of that mask's time was hidden).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import torch


class OverlapTotals:
    """The tallies of every decoding pass of the process, summed (the benchmark and the stats
    read `TOTALS`; each pass adds its own when it ends)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sums = {"masks": 0, "mask_ms": 0.0, "overlapped_ms": 0.0, "hidden_ms": 0.0}

    def add(self, tally: MaskOverlap) -> None:
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


@dataclass
class MaskOverlap:
    device: torch.device
    launch_early: bool | None = None  # None: on CUDA only (a CPU forward is synchronous)
    total_ms: float = 0.0
    overlapped_ms: float = 0.0
    hidden_ms: float = 0.0
    masks: int = 0
    after_forced: bool = False  # the last step was a fast-forward: its token waits to be batched
    _in_flight: object = field(default=None, repr=False)  # the launched pass's event (True on the CPU)

    @property
    def enabled(self) -> bool:
        if self.launch_early is None:
            return torch.device(self.device).type == "cuda"
        return self.launch_early

    @property
    def may_launch(self) -> bool:
        """A pass may be launched ahead of this step's mask: the overlap is on, and the last step
        was not a fast-forward (whose token waits, to be fed with the next in one pass)."""
        return self.enabled and not self.after_forced

    def launched(self) -> None:
        """A forward pass was launched ahead of the step's mask."""
        if torch.device(self.device).type == "cuda":
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
        """The step's mask left one token (`forced`) or a choice."""
        self.after_forced = forced

    def close(self) -> None:
        """The decoding pass ended: its tally joins the process's `TOTALS`."""
        TOTALS.add(self)

    @property
    def share(self) -> float:
        """The part of the mask time computed while a forward pass was in flight."""
        return self.overlapped_ms / self.total_ms if self.total_ms else 0.0

    def to_json(self) -> dict:
        return {"masks": self.masks, "mask_ms": round(self.total_ms, 3), "overlapped_ms": round(self.overlapped_ms, 3),
                "hidden_ms": round(self.hidden_ms, 3), "overlapped_share": round(self.share, 4)}
