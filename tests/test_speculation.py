"""Speculative decoding: the γ chooser, the lossless sampler, greedy equivalence."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from lsp_server.decoding.engine import CompletionEngine, CompletionRequest
from lsp_server.options import EngineOptions
from lsp_server.decoding.sampling import speculative_choice
from lsp_server.decoding.speculation.speculator import PromptLookup, choose_gamma, expected_speedup

from scripted_model import ScriptedRuntime
from completion_support import stdlib_cuts


# ---------------------------------------------------------------- the maths


def formula(alpha, c, gamma):
    return (1 - alpha ** (gamma + 1)) / ((c * gamma + 1) * (1 - alpha))


@pytest.mark.parametrize(
    "alpha, c", list(itertools.product([0.05, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95], [0.0, 0.01, 0.05, 0.1, 0.3, 0.6, 1.0]))
)
def test_gamma_chooser_reproduces_the_formula_optimum(alpha, c):
    values = [1.0] + [formula(alpha, c, g) for g in range(1, 9)]
    best = min(g for g in range(9) if values[g] >= max(values) - 1e-9)
    assert choose_gamma(alpha, c, max_gamma=8) == best
    if alpha <= c:  # no γ gains: speculation is skipped
        assert choose_gamma(alpha, c, max_gamma=8) == 0
    g = choose_gamma(alpha, c, max_gamma=8)
    assert expected_speedup(alpha, c, g) == pytest.approx(1.0 if g == 0 else formula(alpha, c, g))


def test_gamma_chooser_gains_whenever_alpha_exceeds_c():
    for alpha, c in [(0.2, 0.1), (0.6, 0.5), (0.9, 0.85)]:
        assert choose_gamma(alpha, c, max_gamma=64) > 0


CHI2_CRITICAL_7DF_0001 = 24.322  # the chi-square distribution's 99.9% quantile, 7 degrees of freedom


def chi_square(counts: np.ndarray, probs: np.ndarray) -> float:
    expected = probs * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


def sample_counts(p, q, n, seed, draft_from_q=True):
    g = torch.Generator().manual_seed(seed)
    counts = np.zeros(len(p), dtype=np.int64)
    for _ in range(n):
        if q is None:
            d = 3  # a deterministic draft (prompt lookup)
        else:
            d = int(torch.multinomial(q, 1, generator=g))
        counts[speculative_choice(p, d, q, g)] += 1
    return counts


P = torch.tensor([0.30, 0.05, 0.15, 0.20, 0.02, 0.08, 0.12, 0.08])
Q = torch.tensor([0.10, 0.20, 0.05, 0.30, 0.10, 0.05, 0.05, 0.15])
N = 60_000


@pytest.mark.parametrize("q", [None, Q], ids=["lookup-draft", "model-draft"])
def test_speculative_sampling_keeps_the_target_distribution(q):
    counts = sample_counts(P, q, N, seed=11)
    assert chi_square(counts, P.numpy()) < CHI2_CRITICAL_7DF_0001
    # the same test does see a 1% shift of probability mass at this sample size
    shifted = P.clone()
    shifted[0] -= 0.01
    shifted[3] += 0.01
    assert chi_square(counts, shifted.numpy()) > CHI2_CRITICAL_7DF_0001


def test_prompt_lookup_continues_the_latest_ngram():
    ctx = [5, 6, 7, 8, 9, 1, 2, 5, 6, 7, 3, 4, 5, 6, 7]
    assert PromptLookup().propose(ctx, 3) == [3, 4, 5]  # the later 5 6 7 wins
    assert PromptLookup().propose([1, 2, 3], 2) == []


# ---------------------------------------------------------------- greedy equivalence


def run_cuts(engine, cuts, speculative):
    out = []
    for path, i, ch in cuts:
        lines = path.read_text().split("\n")
        doc = "\n".join(lines[:i] + [lines[i][:ch]] + lines[i + 1 :])
        opts = engine.options.updated(speculative=speculative)
        r = engine.complete(CompletionRequest.at(doc, i, ch, document=f"{path}:{speculative}"), options=opts)
        out.append(r)
    return out


@pytest.mark.slow
def test_greedy_speculation_is_token_for_token_identical_on_a_scripted_model(compiled_full):
    comp, tok = compiled_full
    cuts = stdlib_cuts(30, seed=3)
    texts = {}
    for spec in (False, True):
        results = []
        for path, i, ch in cuts:
            lines = path.read_text().split("\n")
            doc = "\n".join(lines[:i] + [lines[i][:ch]] + lines[i + 1 :])
            engine = CompletionEngine(EngineOptions(max_tokens=24, speculative=spec),
                                      ScriptedRuntime(tok, "\n".join(lines).encode()), comp)
            results.append(engine.complete(CompletionRequest.at(doc, i, ch)))
        texts[spec] = [(r.text, r.stop_reason) for r in results]
        if spec:
            accepted = sum(r.figures.speculation["request"]["accepted"] for r in results)
            assert accepted > 0  # drafts were made and kept
    assert texts[True] == texts[False]


@pytest.mark.slow
def test_greedy_speculation_is_token_for_token_identical_on_a_tiny_model(tiny_model_dir, monkeypatch):
    """Whether drafting pays is decided from forward costs measured as it runs, which differ from
    machine to machine: here a verification costs what one step costs (as on a GPU), so drafts are
    made on every machine and their answers are checked against plain decoding."""
    from lsp_server.decoding.speculation.speculator import SpeculationStats

    monkeypatch.setattr(SpeculationStats, "verify_ratio", lambda self, gamma: 1.0)
    # a window of ~256 tokens: a new window holds at most REFILL_SHARE of contextTokens (prompt.window)
    engine = CompletionEngine.load(EngineOptions(model=str(tiny_model_dir), max_tokens=12, context_tokens=342))
    cuts = stdlib_cuts(100, seed=5, small=True)
    plain = run_cuts(engine, cuts, False)
    spec = run_cuts(engine, cuts, True)
    assert [r.text for r in spec] == [r.text for r in plain]
    assert [r.figures.tokens_generated + r.figures.tokens_forced for r in spec] == [r.figures.tokens_generated + r.figures.tokens_forced for r in plain]
    assert sum(r.figures.speculation["request"]["drafted"] for r in spec) > 0


def test_lookup_acceptance_is_kept_per_match_length():
    from lsp_server.decoding.speculation.speculator import Draft, Speculator
    from lsp_server.decoding.speculation.speculator import SpeculationStats

    assert PromptLookup().propose_with_length([5, 6, 7, 1, 5, 6, 7], 2) == ([1, 5], 3)
    assert PromptLookup().propose_with_length([1, 2, 3], 2) == ([], 0)
    stats = SpeculationStats()
    spec = Speculator(stats, [], set())
    for _ in range(20):  # long matches are right, short ones wrong
        spec.record(Draft([1, 2, 3], [], [False] * 3, [None] * 3, "lookup", kind="n4"), 3, False)
        spec.record(Draft([1, 2, 3], [], [False] * 3, [None] * 3, "lookup", kind="n2"), 0, True)
    overall = stats.alpha("lookup")
    assert stats.alpha("lookup", "n4") > 0.9 > overall > stats.alpha("lookup", "n2") < 0.1
    assert stats.alpha("lookup", "n3") == overall  # no record of its own: the source's α
    stats.forward_ms.update({1: 40.0, 2: 50.0, 5: 60.0})
    assert stats.choose("lookup", "n4") > 0 and stats.choose("lookup", "n2") == 0


def test_lookup_falls_back_to_the_rest_of_the_document():
    """A match in the prompt or the output wins, even a shorter one; else the reference (the
    text after the cursor) drafts, from its first match (nearest the cursor), never across its
    end."""
    ref = [9, 8, 7, 6, 5, 9, 8, 4]
    lookup = PromptLookup(reference=ref)
    assert lookup.propose_with_length([1, 9, 8], 3) == ([7, 6, 5], -2)  # the first 9 8 of the reference
    assert lookup.propose_with_length([9, 8, 3, 1, 9, 8], 2) == ([3, 1], 2)  # the prompt's own match
    assert lookup.propose_with_length([1, 5, 9, 8], 5) == ([4], -3)  # longest match: 5 9 8
    assert lookup.propose_with_length([2, 8, 4], 3) == ([], 0)  # 8 4 ends the reference: nothing follows
    assert lookup.propose_with_length([5, 9, 3, 5, 9], 3) == ([3, 5, 9], 2)  # not the reference's 5 9 8
    assert PromptLookup(reference=[9]).propose_with_length([1, 9, 8], 3) == ([], 0)  # shorter than a match
    assert PromptLookup(reference=[]).propose_with_length([1, 9, 8], 3) == ([], 0)


def plain_lookup(context, k, reference, max_n=4, min_n=1):
    """The lookup's definition, written plainly: the longest n-gram ending the context that
    occurs earlier (its latest occurrence) with a continuation; else in the reference (its
    first occurrence there), the continuation not running past the reference's end."""
    for n in range(min(max_n, len(context) - 1), min_n - 1, -1):
        tail = context[-n:]
        starts = [i for i in range(len(context) - n) if context[i : i + n] == tail]
        if starts:
            return context[starts[-1] + n : starts[-1] + n + k], n
    for n in range(min(max_n, len(context) - 1), min_n - 1, -1):
        tail = context[-n:]
        starts = [i for i in range(len(reference) - n) if reference[i : i + n] == tail]
        if starts:
            return reference[starts[0] + n : starts[0] + n + k], -n
    return [], 0


def test_lookup_finds_what_the_plain_definition_finds():
    import random

    rng = random.Random(7)
    for _ in range(400):
        alphabet = rng.choice([2, 3, 5, 12])  # few symbols: long and overlapping matches
        context = [rng.randrange(alphabet) for _ in range(rng.randrange(1, 40))]
        reference = [rng.randrange(alphabet) for _ in range(rng.randrange(0, 30))]
        k = rng.randrange(1, 9)
        got = PromptLookup(reference=list(reference)).propose_with_length(context, k)
        assert got == plain_lookup(context, k, reference), (context, reference, k)


def test_lookup_reference_holds_the_text_the_prompt_leaves_out():
    from mask_store.vocabulary import load_tokenizer
    from lsp_server.decoding.prompt import build_prompt, lookup_reference

    tok = load_tokenizer("default")

    def text_of(ids):
        return b"".join(tok.vocab.token_bytes[i] for i in ids).decode()

    before = "".join(f"value_{i} = compute_{i}(x)\n" for i in range(400)) + "y = "
    after = "\nresult = finish(y)\n"
    prompt = build_prompt(tok, before, after, 256, None)
    assert prompt.truncated and 0 < prompt.window_start < len(before)
    assert before[prompt.window_start:] == prompt.text
    ref = text_of(lookup_reference(tok, before, after, prompt))
    assert ref.startswith(after)
    assert ref[len(after):] == before[max(0, prompt.window_start - 6000) : prompt.window_start]
    short = build_prompt(tok, "y = ", after, 256, None)
    assert text_of(lookup_reference(tok, "y = ", after, short)) == after


def test_the_reference_texts_are_encoded_once_while_they_stay():
    from mask_store.vocabulary import load_tokenizer
    from lsp_server.decoding.prompt import RecentEncodings, build_prompt, lookup_reference

    tok = load_tokenizer("default")
    encoded = []

    class Counting:
        def encode(self, text):
            encoded.append(text)
            return tok.encode(text)

    memo = RecentEncodings(Counting(), kept=2)
    before = "".join(f"value_{i} = compute_{i}(x)\n" for i in range(400)) + "y = "
    after = "\nresult = finish(y)\n"
    prompt = build_prompt(tok, before, after, 256, None)
    want = lookup_reference(tok, before, after, prompt)
    for typed in ("", "a", "ab"):  # keystrokes: the window and the text after the cursor stay
        assert lookup_reference(memo, before + typed, after, prompt) == want
    assert len(encoded) == 2  # the text after the cursor and the text before the window, once each
    memo.encode("other = 1\n")  # a third text: the least recent (the text after the cursor) is forgotten
    assert memo.encode(encoded[1]) == tok.encode(encoded[1]) and len(encoded) == 3  # still kept
    assert lookup_reference(memo, before, after, prompt) == want
    assert encoded[3] == after and len(encoded) == 4


def test_the_reference_is_made_only_when_the_prompt_has_no_match():
    made = []

    def reference():
        made.append(1)
        return [9, 8, 7]

    lookup = PromptLookup(reference=reference)
    assert lookup.propose_with_length([9, 8, 1, 9, 8], 2) == ([1, 9], 2)
    assert made == []
    assert lookup.propose_with_length([1, 9, 8], 2) == ([7], -2)
    assert lookup.propose_with_length([2, 9, 8], 2) == ([7], -2)
    assert made == [1]


# ---------------------------------------------------------------- a draft model


def test_a_draft_model_drafts_and_greedy_output_stays_the_same(tiny_model_dir):
    """`--draft-model DIR`: another small model with the same tokenizer drafts (its own KV
    cache, its tokens checked by the grammar), and the target's greedy output is unchanged."""
    import os
    from pathlib import Path

    from model_support import make_tiny_model_dir

    draft_dir = make_tiny_model_dir(Path(os.environ["SYNTAXLOCK_CACHE"]) / "tiny-draft-model", seed=1)
    engine = CompletionEngine.load(EngineOptions(model=str(tiny_model_dir), draft_model=str(draft_dir),
                                                 max_tokens=12, context_tokens=256))
    cuts = stdlib_cuts(30, seed=9, small=True)
    plain = run_cuts(engine, cuts, False)
    spec = run_cuts(engine, cuts, True)
    assert [r.text for r in spec] == [r.text for r in plain]
    drafts = engine.spec_stats.sources.get("draft-model")
    assert drafts is not None and drafts.drafted > 0  # the draft model was chosen and verified
    assert 0 < engine.spec_stats.cost_ratio("draft-model")  # its cost is measured, not assumed
    assert "draft-model" in spec[-1].figures.speculation["sources"]


def test_a_draft_model_with_another_tokenizer_is_refused(tiny_model_dir, tmp_path):
    import json
    import shutil

    from lsp_server.model.runtime import ModelLoadError

    other = tmp_path / "other-tokenizer"
    shutil.copytree(tiny_model_dir, other)
    tj = json.loads((other / "tokenizer.json").read_text())
    vocab = tj["model"]["vocab"]
    a, b = "Ġthe", "Ġand"  # two tokens trade ids: same size, another tokenizer
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (other / "tokenizer.json").write_text(json.dumps(tj))
    with pytest.raises(ModelLoadError, match="another tokenizer"):
        CompletionEngine.load(EngineOptions(model=str(tiny_model_dir), draft_model=str(other)))


# ---------------------------------------------------------------- estimates that stay alive


def test_declined_proposals_keep_the_estimates_alive():
    """After a bad start (four drafts, each refused at once) the chooser drafts nothing, and
    drafts were once the only thing α learnt from: speculation stayed off for the engine's life.
    A declined proposal is now tried against the target's own token (`observe`): where the
    target goes on writing what the lookup proposes, drafting resumes within a few steps."""
    from lsp_server.decoding.sampling import Sampler
    from lsp_server.decoding.speculation.speculator import Speculator
    from lsp_server.decoding.speculation.speculator import SpeculationStats

    stats = SpeculationStats(forward_ms={n: 10.0 + 2.5 * (n - 1) for n in range(1, 11)})
    start = stats.source("lookup")
    start.drafted = start.rejections = 4
    pattern = [5, 6, 7, 8, 9] * 8
    spec = Speculator(stats, pattern[:10], set())
    accepted: list[int] = []
    while spec.draft(None, None, accepted, 48, Sampler()) is None:
        assert len(accepted) < 10, "drafting never resumed"
        token = pattern[10 + len(accepted)]
        spec.observe(token)  # the target wrote the proposal's first token
        accepted.append(token)
    assert accepted and spec.request["probed"] == spec.request["probe_hits"] == len(accepted)


def test_the_cost_of_drafting_leaves_out_the_lookup_paid_at_every_step():
    """The lookup runs at every step, drafting or not: its time is not the drafts' cost (charged
    to them, it grew while nothing was drafted and kept the chooser from drafting again)."""
    from lsp_server.decoding.sampling import Sampler
    from lsp_server.decoding.speculation.speculator import Speculator
    from lsp_server.decoding.speculation.speculator import SpeculationStats

    stats = SpeculationStats(forward_ms={n: 10.0 + 2.5 * (n - 1) for n in range(1, 11)})
    stats.source("lookup").rejections = 50  # α ~0.02: nothing pays, no draft is made
    spec = Speculator(stats, [1, 2, 3, 1, 2], set())
    for _ in range(20):
        assert spec.draft(None, None, [], 48, Sampler()) is None
    lookup = stats.source("lookup")
    assert lookup.seconds == 0.0 and lookup.proposing_seconds > 0.0


@pytest.mark.slow
def test_speculation_resumes_after_a_bad_start_and_greedy_output_stays_the_same(compiled_full, monkeypatch):
    """The engine's estimates start as after a bad start (the lookup's drafts refused at once);
    a verification costs what 1.2 steps cost and drafting nothing (as on a machine where that
    holds), so drafting pays again once α is known to be high. The scripted model writes the
    file's own text, which the lookup proposes from the rest of the document: drafts are made
    again, and the answers are plain decoding's."""
    from lsp_server.decoding.speculation.speculator import SpeculationStats

    monkeypatch.setattr(SpeculationStats, "verify_ratio", lambda self, gamma: 1.2 if gamma else 1.0)
    monkeypatch.setattr(SpeculationStats, "cost_ratio", lambda self, name: 0.0)
    comp, tok = compiled_full
    texts, drafted = {}, 0
    for spec in (False, True):
        results = []
        for path, i, ch in stdlib_cuts(12, seed=11):
            lines = path.read_text().split("\n")
            doc = "\n".join(lines[:i] + [lines[i][:ch]] + lines[i + 1 :])
            engine = CompletionEngine(EngineOptions(max_tokens=24, speculative=spec),
                                      ScriptedRuntime(tok, "\n".join(lines).encode()), comp)
            bad = engine.spec_stats.source("lookup")
            bad.drafted = bad.rejections = 6
            results.append(engine.complete(CompletionRequest.at(doc, i, ch)))
        texts[spec] = [(r.text, r.stop_reason) for r in results]
        if spec:
            drafted = sum(r.figures.speculation["request"]["drafted"] for r in results)
    assert drafted > 0
    assert texts[True] == texts[False]




def _steered_decoding(steer):
    """A decoding pass's state as `loop.decode` makes it, with the first line's steering `steer`
    (no model, no grammar: only its masks are asked for)."""
    from types import SimpleNamespace

    from lsp_server.decoding.loop import _Decoding
    from lsp_server.decoding.sampling import Sampler

    token_bytes = [b" ", b"    ", b"if", b"value", b"\n", b"for"]
    return _Decoding(None, None, token_bytes, set(), Sampler(), SimpleNamespace(cursor=0, held=b""), 16,
                     lambda: False, None, frozenset(), steer)


def _header_at_four(room: int, written: int):
    """Steering to a header at width 4: the four-blank token first, then `if` or `for` only."""
    return np.array([False, True, False, False, False, False]) if written < 4 else np.array([False, False, True, False, False, True])


def test_a_drafted_position_gets_the_steered_mask_of_its_step():
    """While the first line is steered (header_steering), a drafted position's mask is the one
    the plain step there would use: the grammar's narrowed by the steering while the drafted
    tokens before it wrote only blanks (checked against the grammar's alone, the verification
    let the model's own `value` through where only a header may start)."""
    narrow = _steered_decoding(_header_at_four).draft_masks()
    grammar = np.ones(6, dtype=bool)
    assert narrow(1, [1], grammar).tolist() == [False, False, True, False, False, True]  # after the blanks: a header
    assert narrow(2, [1, 2], grammar).tolist() == grammar.tolist()  # code written: the steering is over
    assert narrow(1, [0], grammar).tolist() == [False, True, False, False, False, False]  # one blank: before the code
    assert narrow(1, [1], np.array([True, True, False, True, True, False])) is None  # it leaves nothing: the loop's alone
    assert _steered_decoding(None).draft_masks() is None  # not steered: the grammar's masks


def test_a_draft_ends_where_the_steered_mask_refuses_its_token():
    """The lookup proposes the blanks and then `value` (what the document wrote after them);
    steered to a header, the draft keeps the blanks only, and the position after them is
    decided under the steered mask."""
    from lsp_server.decoding.sampling import Sampler
    from lsp_server.decoding.speculation.speculator import Speculator
    from lsp_server.decoding.speculation.speculator import SpeculationStats

    class Fork:
        def fork(self):
            return self

        def accept_token(self, token):
            return True

        def next_token_mask(self):
            return np.ones(6, dtype=bool)

    narrow = _steered_decoding(_header_at_four).draft_masks()
    spec = Speculator(SpeculationStats(), [4, 1, 3, 4], set())  # `\n    value\n`: after `\n`, `    value`
    mask0 = np.array([True, True, False, False, False, False])  # one blank or four
    draft = spec.draft(Fork(), mask0, [], 16, Sampler(), narrow)
    assert draft.tokens == [1]
    assert [m.tolist() for m in draft.masks] == [mask0.tolist(), [False, False, True, False, False, True]]
