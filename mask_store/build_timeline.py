"""Where a store build's time goes: wall and CPU seconds per phase, and how many cores were busy.

`mask-store build --json` reports the phases (`phases`: tokenizer, lexer, the full store's
signatures and walk, each streamlining step, the analyses' pools, saving). CPU is this
process's and its reaped children's (`os.times`): a forked pool's workers count once the pool
is closed, which each phase does before it ends, so `cores` (CPU / wall) says how much of the
machine a phase used; `own_cpu_s` is this process's alone (the parent's share of a pooled
phase)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


def cpu_seconds(children: bool = True) -> float:
    """CPU seconds of this process and (with `children`) of its children reaped so far."""
    t = os.times()
    return t.user + t.system + (t.children_user + t.children_system if children else 0.0)


@dataclass
class Timeline:
    """The phases measured so far, in the order they ended (a phase may hold others: its
    figures include theirs)."""

    phases: list[dict] = field(default_factory=list)

    @contextmanager
    def phase(self, name: str) -> Iterator[dict]:
        """Measure the `with` block as phase `name`; the yielded dict takes extra figures."""
        extra: dict = {}
        w0, c0, own0 = time.perf_counter(), cpu_seconds(), cpu_seconds(children=False)
        try:
            yield extra
        finally:
            wall, cpu = time.perf_counter() - w0, cpu_seconds() - c0
            self.phases.append(
                {"phase": name, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
                 "own_cpu_s": round(cpu_seconds(children=False) - own0, 2),
                 "cores": round(cpu / wall, 2) if wall > 0 else 0.0, **extra}
            )
