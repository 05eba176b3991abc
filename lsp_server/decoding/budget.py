"""A request's latency budget: the time after which a completion offers what it has.

    budget = Budget.of(250, start=received_at)      # 250 ms from when the request arrived
    budget.expired()                                 # asked between decoding steps
    NO_BUDGET.expired()                              # always False (background work, tools)

Why: decoding costs 15-21 ms per generated token on a 2-core CPU (checks included;
docs/latency.md), so a 6-line block of ~60 tokens holds the request for a second or more, and the search behind an empty answer (`redecode.search`) has
been seen to take 2.7 s. Once the budget runs out, the decoding loop ends at the longest stop
it has reached that ends a complete line and passes the same whole-file checks as any stop
(`loop._Decoding.budget_stop`); the rest is decoded in the background from where it stopped
(`CompletionRequest.resume`) and served when the user accepts or types on. A budget never cuts
a line: with no complete line yet, decoding goes on to the first one.

The clock is injected so that tests drive the budget without timing: a fake clock, or one that
counts the model's steps.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

Clock = Callable[[], float]


@dataclass(frozen=True)
class Budget:
    """Expires when `clock()` reaches `deadline` (seconds on that clock; None: never)."""

    deadline: float | None = None
    clock: Clock = field(default=time.perf_counter, compare=False, repr=False)

    @classmethod
    def of(cls, ms: float, start: float | None = None, clock: Clock = time.perf_counter) -> Budget:
        """`ms` milliseconds from `start` (default: now) on `clock`; 0 or less: no budget."""
        if ms <= 0:
            return NO_BUDGET
        return cls((clock() if start is None else start) + ms / 1000, clock)

    def expired(self) -> bool:
        return self.deadline is not None and self.clock() >= self.deadline


NO_BUDGET = Budget()
