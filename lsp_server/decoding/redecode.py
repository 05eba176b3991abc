"""Search, don't give up: when no cut of what the model wrote keeps the file valid (the offer
search of `offer.py` found none), decode again from the step where validity was lost with the
model's next-best tokens there, before answering nothing.

The step is the one where the completion's first byte was chosen (the tokens before it re-create
the healed text): no cut of the text passed the check, not even of its first line, so the
completion went wrong with its first token (a `return` where the lines after the cursor are a
block's body and need its header, code where they are a docstring's text). Each new pass takes
the tokens before that step again, and there the best token the earlier passes did not take (nor
a shorter spelling of its start: `retur` is not another choice than `return`), in the model's
own order; it then decodes as usual, under a stop policy that reads the rest of the
file: a line may end only where the file can go on (a block header the deeper lines need, a
closing bracket, a dedent), so the following lines steer its last steps. Its text goes through
the offer search like the first pass's; the first pass that offers something is the answer
(`request.search_again`, over `Tries`). Where the following lines can only be a block's body,
the passes start with a token that begins a header the check says fits there
(`header_steering.py`), in the model's order.

Bounded: at most `TRIES` passes, and all of them together generate at most the request's token
limit (the search at most doubles a request's decoding work, and only for answers that would
otherwise be empty); a cancellation ends it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .offer import Offer
from .stopping.policy import StopReason
from .stopping.rest_of_file import RestOfFile

if TYPE_CHECKING:  # loop.py imports torch, which loads after threads.py set its environment
    from .loop import DecodeOutcome

TRIES = 3  # next-best tokens tried at the step where validity was lost


@dataclass(frozen=True)
class Pass:
    """One decoding pass and what the offer search made of it."""

    outcome: DecodeOutcome
    offer: Offer
    speculator: object | None = None  # the pass's Speculator, when speculation ran (its statistics)


def restart_step(tokens: Sequence[int], token_bytes: Sequence[bytes], healed: int) -> int:
    """The index in `tokens` of the step that chose the completion's first byte: the tokens
    before it re-create the `healed` bytes (len(tokens) if none went past them)."""
    n = 0
    for i, t in enumerate(tokens):
        n += len(token_bytes[t])
        if n > healed:
            return i
    return len(tokens)


def code_step(tokens: Sequence[int], token_bytes: Sequence[bytes], healed: int) -> int:
    """The index in `tokens` of the step that chose the completion's first code (its first
    byte past the `healed` ones that is not blank; len(tokens) if none did)."""
    written = b""
    for i, t in enumerate(tokens):
        written += token_bytes[t]
        if written[healed:].strip():
            return i
    return len(tokens)


def same_start(token: bytes, by_bytes: Mapping[bytes, int]) -> set[int]:
    """The tokens spelling `token`'s bytes or a shorter start of them with code in it (`retur`
    for `return`): another spelling of the same text is not another choice."""
    out = set()
    for k in range(1, len(token) + 1):
        t = by_bytes.get(token[:k])
        if t is not None and token[:k].strip():
            out.add(t)
    return out


def ended_where_valid(first: Pass, healed: int, rest: RestOfFile) -> bool:
    """Whether the model's own answer was "nothing here": its first pass ended the line (a
    newline or its end) before writing any code past the `healed` bytes, and the file is valid
    without a completion (the end of a complete line, as after accepting a suggestion). That
    answer fits the file, so there is nothing to search past: forcing its next-best start
    there writes what the model did not want (a trailing comment, a `+ ...` on a done line)."""
    text = first.outcome.generated[healed:]
    return not text.split(b"\n", 1)[0].strip() and rest.compat is not None and rest.keeps_valid(b"")


@dataclass(frozen=True)
class Tries:
    """Where the search stands: the next pass replays `replay` (the tokens before the `step`
    where validity was lost) and bans `avoid` there; all passes together may still generate
    `budget` tokens, in at most `left` passes (`request.search_again` runs them)."""

    step: int
    replay: tuple[int, ...]
    avoid: frozenset[int]
    budget: int
    left: int

    @classmethod
    def after(cls, first: Pass, token_bytes: Sequence[bytes], by_bytes: Mapping[bytes, int], healed: int,
              stop_tokens: frozenset[int], max_tokens: int, steered: bool = False) -> Tries:
        """The first re-decoding pass after `first`. `steered`: the passes are steered as the
        first was (`header_steering.first_line`): its newline and indentation led to an
        indentation that fits, so the search restarts at its first code (the first choice that
        wrote more than blanks is the one banned)."""
        tokens = first.outcome.tokens
        step = (code_step if steered else restart_step)(tokens, token_bytes, healed)
        # the model's choice at the step (and its shorter spellings); it ended there (nothing
        # past the healed text): its end
        if step < len(tokens):
            avoid = frozenset(same_start(token_bytes[tokens[step]], by_bytes) | {tokens[step]})
        else:
            avoid = frozenset(stop_tokens)
        return cls(step, tuple(tokens[:step]), avoid, max_tokens, TRIES)

    @property
    def open(self) -> bool:
        """A pass and tokens left for it."""
        return self.left > 0 and self.budget > 0

    @property
    def limit(self) -> int:
        """The next pass's token limit (the replayed tokens included)."""
        return len(self.replay) + self.budget

    def then(self, p: Pass, token_bytes: Sequence[bytes], by_bytes: Mapping[bytes, int]) -> Tries | None:
        """After pass `p`, which offered nothing: the next pass, its choice at the step banned
        too; None when the search is over (cancelled, no other token at the step)."""
        tokens = p.outcome.tokens
        budget = self.budget - (len(tokens) - len(self.replay))
        if p.outcome.stop.reason == StopReason.CANCELLED or len(tokens) <= self.step:
            return None
        t = tokens[self.step]
        return Tries(self.step, self.replay, self.avoid | same_start(token_bytes[t], by_bytes) | {t}, budget,
                     self.left - 1)
