"""The matcher fills a caller's buffer (`GrammarMatcher.fill_next_token_mask`): its masks, made
in words and unpacked once, are the masks made token by token in booleans (the reference below:
the configurations' masks ORed, healing, the end of sequence, canonical tokenization and its
fallback), with and without a buffer reused step after step, at every step of stdlib text,
healed prompts included."""

from __future__ import annotations

import numpy as np
import pytest
from corpus_support import read_source, stdlib_files

from mask_store import healing
from mask_store.canonical import OFF, START
from mask_store.matcher import GrammarMatcher, MaskBuffer, MaskCounts


def _reference(m: GrammarMatcher) -> tuple[np.ndarray, int]:
    """The mask in booleans, and whether it fell back to the grammar's (1) or not (0)."""
    comp = m.compiled
    mask = np.zeros(comp.V, dtype=bool)
    for c in m.configs:
        mask |= comp.config_mask(c)
    if m.heal:
        allowed = np.zeros(comp.V, dtype=bool)
        allowed[comp.vocab.tokens_compatible_with(m.heal)] = True
        mask &= allowed
    elif m.configs and m.is_complete():
        mask[comp.eos] = True
    if not m.canonical.active:
        return mask, 0
    grammar = mask
    mask = grammar & comp.canonical.allowed_after(m.canonical)
    if m.heal:
        pairs, by = comp.canonical, comp.vocab.by_bytes
        for k in range(1, len(m.heal)):
            t = by.get(m.heal[:k])
            if t is not None and mask[t] and not comp.heal_goes_on(pairs.after(m.canonical, t), m.heal[k:]):
                mask[t] = False
    end = mask[comp.eos]
    mask[comp.eos] = False
    if mask.any():
        mask[comp.eos] = end
        return mask, 0
    mask[comp.eos] = True
    if not (grammar & ~mask).any():
        mask[comp.eos] = end
        return mask, 0
    return grammar, 1


def _check(m: GrammarMatcher, buffer: MaskBuffer) -> int:
    want, fell_back = _reference(m)
    before = (m.counts.canonical_masks, m.counts.canonical_fallbacks)
    fresh = m.next_token_mask()
    filled = m.next_token_mask(buffer)
    assert np.array_equal(fresh, want) and np.array_equal(filled, want)
    assert fresh.flags.writeable and filled.flags.writeable
    words = m.fill_next_token_mask(buffer)
    assert words is buffer.words and np.array_equal(np.unpackbits(words.view(np.uint8), bitorder="little")
                                                     [: len(want)].view(bool), want)
    on = int(m.canonical.active)
    assert (m.counts.canonical_masks, m.counts.canonical_fallbacks) == (before[0] + 3 * on,
                                                                        before[1] + 3 * fell_back)
    return fell_back


@pytest.mark.parametrize("canonical", [False, True])
def test_filled_masks_are_the_boolean_ones_along_stdlib_text(compiled_full, canonical):
    compiled, tok = compiled_full
    buffer = MaskBuffer(compiled)
    steps = fallbacks = 0
    for path in stdlib_files()[:6]:
        text = read_source(path).decode("utf-8")[:1500]
        ids = tok.encode(text)
        for cut in (len(ids) // 3, 2 * len(ids) // 3):
            # a healed prompt ending mid-text, then the tokens that follow it, as decoding takes them
            prefix = b"".join(tok.vocab.token_bytes[i] for i in ids[:cut])
            h = healing.back_off(tok.vocab.token_bytes, prefix, ids[:cut])
            state = compiled.canonical.state_after(h.kept, START) if canonical else OFF
            try:
                m = GrammarMatcher.from_prefix(compiled, prefix[: len(prefix) - len(h.healed)], heal=h.healed,
                                               canonical=state, counts=MaskCounts())
            except Exception:  # noqa: BLE001 - a cut the recovery can't parse: another cut
                continue
            for t in [*h.healed_ids, *ids[cut : cut + 25]]:  # the healed bytes spelled again first
                fallbacks += _check(m, buffer)
                steps += 1
                if not m.accept_token(t):
                    break
    assert steps > 150


def test_a_fallback_and_an_empty_mask_are_filled_alike(compiled_full):
    """After a lone space every token spelling a healed `q...` merges with it, so the grammar
    decides alone (test_canonical); a healed `x...` leaves some: the AND. A matcher with no
    configuration fills nothing, whatever the buffer held."""
    from mask_store.canonical import CanonicalState, Continuation

    compiled, tok = compiled_full
    buffer = MaskBuffer(compiled)
    space = CanonicalState(tok.vocab.by_bytes[b" "], Continuation.FREE)
    fell = {c: _check(GrammarMatcher.from_prefix(compiled, b"a = ", heal=c, canonical=space, counts=MaskCounts()),
                      buffer) for c in (b"q", b"x")}
    assert fell == {b"q": 1, b"x": 0}
    empty = GrammarMatcher(compiled, [], counts=MaskCounts())
    buffer.words.fill(np.uint64(0xFFFF))
    assert not empty.next_token_mask(buffer).any() and not buffer.words.any()
