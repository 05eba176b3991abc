"""The decoding loop's early launch (CUDA's order: step t's forward pass launched, then step t's
mask computed, then applied), forced on the CPU with a scripted model: the same tokens as the
plain order, the mask time tallied as overlapped, and forced runs still fed in one pass."""

from __future__ import annotations

from lsp_server.decoding.stopping.context import cursor_context

from scripted_model import ScriptedRuntime
from test_completion import matcher_parser


def run(compiled, launch_early: bool):
    from lsp_server.decoding.loop import ModelStepper, decode
    from lsp_server.decoding.sampling import Sampler
    from lsp_server.decoding.stopping.compatibility import Compatibility
    from lsp_server.decoding.stopping.line_scanner import LineScanner
    from lsp_server.decoding.stopping.policy import StopPolicy
    from mask_store.matcher import GrammarMatcher

    comp, tok = compiled
    prefix = b"x = y if z els"
    runtime = ScriptedRuntime(tok, prefix + b"e compute(a, b) + 1\n")
    logits, past = runtime.forward(tok.encode(prefix.decode()))
    calls = len(runtime.calls)
    matcher = GrammarMatcher.from_prefix(comp, prefix)
    st = matcher.prefix_state
    compat = Compatibility(matcher_parser(comp), prefix, b"\n", b"")
    policy = StopPolicy(cursor_context(prefix.decode(), "\n"), LineScanner(comp.lexer), compat,
                        prefix[st.lexeme_start :], b"", 0, 0)
    stepper = ModelStepper(runtime.forward, logits[-1], past, launch_early=launch_early)
    out = decode(stepper, matcher, comp.tokens, {0, 2}, Sampler(), policy, 24)
    return out, stepper.overlap, len(runtime.calls) - calls


def test_early_launch_gives_the_same_tokens_and_tallies_the_overlap(compiled):
    plain, plain_tally, plain_calls = run(compiled, False)
    early, tally, calls = run(compiled, True)
    assert early.tokens == plain.tokens and early.generated == plain.generated and early.forced >= 1
    assert plain_tally.overlapped_ms == 0 and plain_tally.masks == tally.masks > 0
    assert 0 < tally.overlapped_ms <= tally.total_ms and 0 < tally.share <= 1
    # a pass is launched early only after a sampled step: a forced run adds at most one pass
    assert plain_calls <= calls <= plain_calls + early.forced
