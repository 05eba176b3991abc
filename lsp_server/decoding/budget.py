"""A request's latency budget: the time after which a completion offers what it has.

    budget = Budget.of(250, start=received_at)      # 250 ms from when the request arrived
    budget.expired()                                 # asked between decoding steps
    budget.for_line(decoding_started)                # a line's: 250 ms of decoding at least
    NO_BUDGET.expired()                              # always False (background work, tools)

Why: decoding costs 15-21 ms per generated token on a 2-core CPU (checks included;
docs/latency.md), so a 6-line block of ~60 tokens holds the request for a second or more, and the search behind an empty answer (`request.search_again`) has
been seen to take 2.7 s. Once the budget runs out, the decoding loop ends at the longest stop
it has reached that ends a complete line and passes the same whole-file checks as any stop
(`loop._Decoding.budget_stop`); the rest is decoded in the background from where it stopped
(`CompletionRequest.resume`) and served when the user accepts or types on. A budget ends at
a complete line: with no complete line yet, decoding goes on to the first one until the line
itself has had the budget's span of decoding (`for_line`: from when decoding started, so that a
request that waited for its prompt still gets a whole line in most cases); then the longest cut
of the line that keeps the file valid is offered (single-line answers: a lexeme boundary, no
bracket of its own left open), and its rest too is decoded in the background.

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
    """Expires when `clock()` reaches `deadline` (seconds on that clock; None: never); `span`:
    how long it was (seconds on that clock), what `for_line` gives a line."""

    deadline: float | None = None
    clock: Clock = field(default=time.perf_counter, compare=False, repr=False)
    span: float = 0.0

    @classmethod
    def of(cls, ms: float, start: float | None = None, clock: Clock = time.perf_counter) -> Budget:
        """`ms` milliseconds from `start` (default: now) on `clock`; 0 or less: no budget."""
        if ms <= 0:
            return NO_BUDGET
        return cls((clock() if start is None else start) + ms / 1000, clock, ms / 1000)

    def expired(self) -> bool:
        return self.deadline is not None and self.clock() >= self.deadline

    def for_line(self, start: float | None = None) -> Budget:
        """The budget of a line whose decoding starts at `start` (default: now, on the same
        clock): this one's deadline, or its span after `start` when that is later."""
        if self.deadline is None:
            return self
        begun = self.clock() if start is None else start
        return Budget(max(self.deadline, begun + self.span), self.clock, self.span)


NO_BUDGET = Budget()
