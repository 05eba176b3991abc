"""The greedy choice on the CPU (`sampling.greedy_choice`): the branch-free shift gives the
select's answer on every row, infinities, NaNs, huge logits, ties and banned tokens included."""

from __future__ import annotations

import numpy as np
import torch

from lsp_server.decoding.sampling import greedy_choice


def _select(logits: torch.Tensor, mask: np.ndarray, banned: set[int]) -> int | None:
    """The reference: the allowed logits selected (the rest -inf), their first maximum, None
    where it is not finite."""
    allowed = mask[: logits.shape[0]].copy()
    allowed[[t for t in banned if t < allowed.shape[0]]] = False
    values = np.where(allowed, logits.numpy()[: allowed.shape[0]], -np.inf)
    best = int(values.argmax())
    return best if np.isfinite(values[best]) else None


def test_the_shifted_argmax_is_the_selects_on_odd_rows():
    rng = np.random.default_rng(5)
    specials = np.array([np.inf, -np.inf, np.nan, 3.3e38, -3.3e38, 1e30, -1e30, 0.0], dtype=np.float32)
    for _ in range(2000):
        n = int(rng.integers(1, 80))
        rows = torch.from_numpy(rng.integers(-3, 3, (2, n)).astype(np.float32))  # many ties
        odd = torch.from_numpy(rng.random((2, n)) < rng.random() * 0.3)
        rows[odd] = torch.from_numpy(rng.choice(specials, (2, n)))[odd]
        logits = rows[1]  # a view of a 2-D tensor, as a verification pass's rows
        mask = rng.random(max(n - int(rng.integers(0, 3)), 1)) < rng.random()
        banned = {int(t) for t in rng.integers(0, n, int(rng.integers(0, 3)))}
        want = _select(logits, mask, banned)
        assert greedy_choice(logits, mask, banned) == want
        scratch = np.full(n + int(rng.integers(0, 3)), np.nan, dtype=np.float32)  # what it held: no matter
        assert greedy_choice(logits, mask, banned, scratch) == want
        assert greedy_choice(logits, mask, banned, scratch[: max(len(mask) - 1, 0)]) == want  # too short: not used


def test_the_shifted_argmax_is_the_selects_at_a_real_vocabulary_size():
    rng = np.random.default_rng(6)
    for n in (49152, 151936, 262144):
        logits = torch.from_numpy((rng.standard_normal(n) * 8).astype(np.float32))
        for share in (0.0, 1e-5, 0.01, 0.3, 1.0):
            mask = rng.random(n) < share
            got = greedy_choice(logits, mask, set())
            assert got == _select(logits, mask, set())
            assert (got is None) == (not mask.any())
