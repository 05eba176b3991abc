"""The decoding loop's early launch (CUDA's order: step t's forward pass launched, then step t's
mask computed, then applied), forced on the CPU with a scripted model: the same tokens as the
plain order, the mask time tallied as overlapped, and forced runs still fed in one pass."""

from __future__ import annotations

from test_completion import scripted_decode

PREFIX, SCRIPT = b"x = y if z els", b"x = y if z else compute(a, b) + 1\n"


def test_early_launch_gives_the_same_tokens_and_tallies_the_overlap(compiled):
    plain, plain_stepper, plain_calls = scripted_decode(compiled, PREFIX, SCRIPT, 24, launch_early=False)
    early, stepper, calls = scripted_decode(compiled, PREFIX, SCRIPT, 24, launch_early=True)
    tally, plain_tally = stepper.timing, plain_stepper.timing
    assert early.tokens == plain.tokens and early.generated == plain.generated and early.forced >= 1
    assert plain_tally.overlapped_ms == 0 and plain_tally.masks == tally.masks > 0
    assert 0 < tally.overlapped_ms <= tally.total_ms and 0 < tally.share <= 1
    # a pass is launched early only after a sampled step: a forced run adds at most one pass
    assert plain_calls <= calls <= plain_calls + early.forced
