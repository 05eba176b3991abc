"""What the stop policy says after a token (`Verdict` or a `Stop`), and why a completion ended
(`StopReason`, reported as `stop_reason`)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, StrEnum


class StopReason(StrEnum):
    """Why a completion ended (the value is what `--json` and the logs say)."""

    LINE_END = "line-end"
    BLOCK_END = "block-end"
    SUFFIX = "suffix"
    EOS = "eos"
    MAX_TOKENS = "max-tokens"
    CANCELLED = "cancelled"
    NO_CONTINUATION = "no-continuation"
    ECHO = "echo"
    BUDGET = "budget"
    COMPILER = "compiler"

    @property
    def description(self) -> str:
        return _DESCRIPTIONS[self]


_DESCRIPTIONS = {
    StopReason.LINE_END: "the logical line is complete",
    StopReason.BLOCK_END: "the code dedented below the block it started in, or a blank line followed a complete "
                          "statement",
    StopReason.SUFFIX: "the completion joins the text after the cursor",
    StopReason.EOS: "the model ended the sequence where the code can end",
    StopReason.MAX_TOKENS: "the token limit",
    StopReason.CANCELLED: "the request was cancelled",
    StopReason.NO_CONTINUATION: "the grammar allows nothing the model would say",
    StopReason.ECHO: "the completion stopped where it began to repeat the text after the cursor (the file's next "
                     "lines, the rest of the line), or it was that text already",
    StopReason.COMPILER: "CPython's compiler refuses the file with the completion where it was written (a check "
                         "made after the parse: decoding/compiler_gate.py); nothing is offered",
    StopReason.BUDGET: "the latency budget ran out: the complete lines so far are offered, the rest is decoded in "
                       "the background (decoding/budget.py)",
}


@dataclass(frozen=True)
class Stop:
    """The completion ends: its first `cut` bytes (0 is the empty completion) are kept."""

    cut: int
    reason: StopReason


class Verdict(Enum):
    """The policy's answer after a token when it does not stop the completion."""

    CONTINUE = "continue"  # the completion goes on
    REJECT = "reject"  # the token ends the line where the file can't go on: roll it back, try another


Decision = Verdict | Stop
