"""The packed-bitmask mask application (lsp_server/model/token_bitmask.py), the device choice
built on it, the samplers' per-device generators and the device timers: on the CPU against the
index-based path, and on CUDA (marked `cuda`)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lsp_server.decoding.sampling import Sampler, choose, device_choice, masked_logits
from lsp_server.model.step_timing import StepTiming
from lsp_server.model.token_bitmask import (BitmaskUpload, apply_token_bitmask_inplace, masked_argmax, pack_mask,
                                            words_for)

V = 1000  # not a multiple of 32: the last word is partly used


def random_mask(n: int, frac: float, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random(n) < frac


def test_bit_layout_is_token_32w_plus_j():
    mask = np.zeros(70, dtype=bool)
    mask[[0, 31, 32, 69]] = True
    words = pack_mask(mask)
    assert words.dtype == np.int32 and words.shape == (words_for(70),) == (3,)
    assert words[0] == np.int32(np.uint32(1 | 1 << 31).view(np.int32)) and words[1] == 1 and words[2] == 1 << 5


@pytest.mark.parametrize("mask_len", [V, V - 37, 64])  # a mask shorter than the logits: the rest is never allowed
def test_bitmask_applies_exactly_what_the_bool_mask_does(mask_len):
    logits = torch.randn(V, generator=torch.Generator().manual_seed(1))
    mask = random_mask(mask_len, 0.3, mask_len)
    expected = masked_logits(logits, mask, set())
    out = logits.clone()
    apply_token_bitmask_inplace(out, torch.from_numpy(pack_mask(mask, V)))
    assert torch.equal(out, expected)


def test_a_batch_of_rows_takes_one_mask_each():
    logits = torch.randn(3, V)
    masks = [random_mask(V, f, i) for i, f in enumerate((0.1, 0.5, 0.9))]
    packed = torch.from_numpy(np.stack([pack_mask(m) for m in masks]))
    out = logits.clone()
    apply_token_bitmask_inplace(out, packed)
    for row, m, src in zip(out, masks, logits):
        assert torch.equal(row, masked_logits(src, m, set()))


def test_wrong_dtype_or_device_is_refused():
    with pytest.raises(TypeError):
        apply_token_bitmask_inplace(torch.zeros(64), torch.zeros(2, dtype=torch.int64))


def test_masked_argmax_reads_token_and_emptiness_together():
    row = torch.tensor([1.0, 5.0, 5.0, float("-inf")])
    assert masked_argmax(row) == 1  # the first of equal maxima
    assert masked_argmax(torch.full((40,), float("-inf"))) is None


@pytest.mark.parametrize("frac", [0.0, 0.002, 0.3])
def test_device_choice_agrees_with_the_cpu_choice(frac):
    row = torch.randn(V, generator=torch.Generator().manual_seed(2))
    mask = random_mask(V, frac, 3)
    banned = {int(np.flatnonzero(mask)[0])} if mask.sum() > 1 else set()
    assert device_choice(Sampler(), row, mask, banned) == choose(Sampler(), row, mask, banned)
    hot = [device_choice(Sampler(0.8, 0.9, seed=5), row, mask, banned) for _ in range(2)]
    cpu = choose(Sampler(0.8, 0.9, seed=5), row, mask, banned)
    assert hot[0] == hot[1] == cpu  # same seed, same device: the same draw
    if mask.any():
        assert mask[hot[0]] and hot[0] not in banned


def test_upload_reuses_its_buffers():
    up = BitmaskUpload(V, torch.device("cpu"))
    a = up(random_mask(V, 0.5, 1))
    b = up(random_mask(V, 0.5, 2))
    assert a.data_ptr() == b.data_ptr() and np.array_equal(b.numpy(), pack_mask(random_mask(V, 0.5, 2), V))


def test_sampler_keeps_one_seeded_generator_per_device():
    s = Sampler(1.0, seed=7)
    g = s.generator_for(torch.device("cpu"))
    assert s.generator_for("cpu") is g
    assert torch.equal(torch.rand(4, generator=g), torch.rand(4, generator=torch.Generator().manual_seed(7)))


def test_cpu_clock_and_overlap_tally():
    seen = []
    clock = StepTiming(torch.device("cpu"), lambda n, ms: seen.append((n, ms)))
    with clock.forward(3):
        pass
    clock.close()
    assert len(seen) == 1 and seen[0][0] == 3 and seen[0][1] >= 0
    tally = StepTiming(torch.device("cpu"), lambda n, ms: None, launch_early=True)
    assert tally.may_launch
    tally.launched()
    tally.masked(2.0)
    tally.masked(1.0)  # no pass in flight
    tally.step(forced=True)  # a forced token waits for the next: no pass launched ahead
    assert not tally.may_launch
    tally.step(forced=False)
    assert tally.may_launch
    assert tally.enabled and tally.overlapped_ms == 2.0 and tally.total_ms == 3.0 and tally.to_json()["masks"] == 2
    cpu = StepTiming(torch.device("cpu"), lambda n, ms: None)
    assert not cpu.enabled and not cpu.may_launch  # a CPU forward is synchronous: no early launch


@pytest.mark.cuda
def test_on_cuda_the_mask_and_the_draws_stay_on_the_device():
    row = torch.randn(V, device="cuda")
    mask = random_mask(V, 0.3, 4)
    expected = masked_logits(row.cpu(), mask, set())
    assert choose(Sampler(), row, mask, set()) == int(torch.argmax(expected))
    a = choose(Sampler(0.7, seed=1), row, mask, set())
    b = choose(Sampler(0.7, seed=1), row, mask, set())
    assert a == b and mask[a]
    seen = []
    clock = StepTiming(torch.device("cuda"), lambda n, ms: seen.append((n, ms)))
    with clock.forward(1):
        torch.cuda._sleep(1_000_000)
    clock.close()
    assert len(seen) == 1 and seen[0][1] > 0
