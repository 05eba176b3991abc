"""Prompt lookup, the draft source that costs nothing: code repeats its names and patterns."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


class PromptLookup:
    """Drafts by n-gram lookup in the prompt and the output so far, then in the rest of the
    document (`reference`: what the prompt leaves out, the text after the cursor first, as the
    first match there is the nearest: code repeats the names and patterns around it).

    Matches of one token count too (`min_ngram` 1): they predict worse (α ~0.45 against ~0.85
    for four tokens on the benchmark's cut points) but cover most positions the longer ones
    leave, and the γ chooser weighs each length by its own α."""

    name = "lookup"

    def __init__(self, max_ngram: int = 4, min_ngram: int = 1,
                 reference: list[int] | Callable[[], list[int]] | None = None) -> None:
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        # a callable is asked once, at the first position the prompt has no match for
        # (tokenizing the document's text costs a few milliseconds)
        self._reference = reference

    def reference(self) -> np.ndarray:
        if not isinstance(self._reference, np.ndarray):
            ref = self._reference() if callable(self._reference) else self._reference
            self._reference = np.asarray(ref or [], dtype=np.int64)
        return self._reference

    def propose(self, context: list[int], k: int) -> list[int]:
        return self.propose_with_length(context, k)[0]

    def propose_with_length(self, context: list[int], k: int) -> tuple[list[int], int]:
        """Up to `k` tokens that followed the most recent earlier occurrence of the longest
        matching n-gram at the end of `context`, and that n (0: no match); only without any
        match there, the reference's first occurrence, with n negative. A longer match predicts
        better (and one in the document worse): the speculator keeps α per kind of match."""
        if k <= 0 or len(context) < self.min_ngram + 1:
            return [], 0
        ctx = np.asarray(context, dtype=np.int64)
        found = self._match(ctx, len(context), k, 0)
        if found[0] or self._reference is None:
            return found
        ref = self.reference()
        if not len(ref):
            return found
        proposal, n = self._match(np.concatenate([ref, ctx]), len(context), k, len(ref))
        return proposal, -n

    def _match(self, seq: np.ndarray, ctx_len: int, k: int, ref_len: int) -> tuple[list[int], int]:
        """The continuation of the longest n-gram ending `seq` (its last `ctx_len` tokens the
        context): with `ref_len` 0 its most recent earlier occurrence, else the first one in
        the reference (`seq[:ref_len]`, nearest the cursor), not running past its end.

        The occurrences' last tokens are found with one comparison over `seq`; their match
        length then grows backwards one token at a time, on those few positions only."""
        top = min(self.max_ngram, ctx_len - 1)
        if top < self.min_ngram:
            return [], 0
        limit = ref_len or len(seq)  # a continuation's first token comes before this
        ends = np.flatnonzero(seq[: limit - 1] == seq[-1])  # an occurrence's last token
        if not ends.size:
            return [], 0
        length = np.ones(ends.size, dtype=np.int64)
        alive = np.ones(ends.size, dtype=bool)
        for back in range(1, top):
            idx = ends - back
            alive &= idx >= 0
            alive[alive] = seq[idx[alive]] == seq[-1 - back]
            if not alive.any():
                break
            length += alive
        best = int(length.max())
        if best < self.min_ngram:
            return [], 0
        at = np.flatnonzero(length == best)
        start = int(ends[at[0] if ref_len else at[-1]]) + 1
        return [int(t) for t in seq[start : min(start + k, limit)]], best
