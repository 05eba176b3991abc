"""Where a request's time in the engine went: named parts that add up to its wall time.

    times = RequestTimes()
    times.add("model", ms)            # each part measured where it is spent
    parts = times.split(total_ms)     # {"lock": ..., ..., "unaccounted": total - the parts}

The parts (`PARTS`), each measured once, none inside another:
- `lock`: waiting for the engine, which serves one request at a time (`CompletionEngine._lock`:
  a prefill or another request holds it);
- `setup`: before the prompt is run: the prompt built and tokenized, the text before the cursor
  parsed (the grammar matcher), the names guide made, the first line's steering;
- `prefill`: the prompt through the model (what the KV cache did not hold), every pass's;
- `model`: the decoding passes' forward passes (speculation's verifications included);
- `mask`: the grammar's masks of every step (the drafted positions' included);
- `checks`: edits checked against the whole rest of the file (`Compatibility.ms`: its set-up,
  the stop policy's checks and the offer's search);
- `names`: the names guide reshaping steps (`IdentifierGuide.shape`) and the names cut of a
  multi-line answer (pyflakes over the file; the checks it asks are `checks`);
- `gate`: CPython's compiler over the file with the answer (`compiler_gate.py`);
- `unaccounted`: the rest of the wall time: sampling, the stop policy's line scanning,
  drafting, building the result, and a thread switch or a collection that held the interpreter
  meanwhile (those land in whichever part was running). On CUDA, where `model` is the device's
  time and the masks are computed while it runs (loop.py), the two overlap: there the rest may
  come out below zero by the overlap.

Why: a warm request's p90 (issue 44: 387 ms on a machine that decodes at 14 ms per token) must
be split before it can be cut; `bench/lsp_latency.py` reads the parts off the server's log.
"""

from __future__ import annotations

import re

PARTS = ("lock", "setup", "prefill", "model", "mask", "checks", "names", "gate")
LOGGED = re.compile(r"parts \(ms\): ((?:\w+=-?[\d.]+ ?)+)")


class RequestTimes:
    """The milliseconds of one request's parts, added as they are measured."""

    def __init__(self) -> None:
        self.ms = dict.fromkeys(PARTS, 0.0)

    def add(self, part: str, ms: float) -> None:
        self.ms[part] += ms

    def split(self, total_ms: float) -> dict[str, float]:
        """The parts, and `unaccounted` = `total_ms` (the request's wall time in the engine, its
        wait for the lock included) less their sum."""
        return {part: round(ms, 2) for part, ms in self.ms.items()} | {
            "unaccounted": round(total_ms - sum(self.ms.values()), 2)}


def log_text(parts: dict[str, float]) -> str:
    """`parts` as the server's log gives them (`parts_in` reads them back)."""
    return "parts (ms): " + " ".join(f"{part}={ms:.2f}" for part, ms in parts.items())


def parts_in(line: str) -> dict[str, float] | None:
    """The parts a log line gives (`log_text`), None where it gives none."""
    m = LOGGED.search(line)
    return None if m is None else {part: float(ms) for part, ms in (kv.split("=") for kv in m.group(1).split())}
