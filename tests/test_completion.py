"""The completion engine: stopping rules, token healing, closers, compatibility with the rest of
the file; scripted models for exact behaviour, a tiny random model for the whole path."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from lsp_server.decoding.engine import CompletionEngine, CompletionRequest
from lsp_server.options import EngineOptions
from lsp_server.positions import offset_at, position_of
from lsp_server.decoding.stopping.rest_of_file import cursor_context

from completion_support import accept, complete_at_marker, scripted_engine, stdlib_cuts
from corpus_support import ROOT, STDLIB
from scripted_model import ScriptedRuntime

from grammar_tools.parsing.cpython_check import compiles


# ---------------------------------------------------------------- cursor context


@pytest.mark.parametrize(
    "before, after, mode, infix, covered",
    [
        ("x = foo(", ")\n", "single", False, ")"),
        ("x = foo(", "\n", "single", False, ""),
        ("x = '", "'\n", "single", False, "'"),
        ("x = foo(", ", 2)\n", "single", True, ""),
        ("def f():", "\n    pass\n", "multi", False, ""),
        ("def f():\n    ", "\n", "multi", False, ""),
        ("x = 1\n", "\n", "single", False, ""),
        ("x = 1  ", "  # note\n", "single", False, ""),
    ],
)
def test_cursor_context(before, after, mode, infix, covered):
    ctx = cursor_context(before, after)
    assert (ctx.mode, ctx.infix, ctx.covered) == (mode, infix, covered)


# ---------------------------------------------------------------- stopping rules


def test_single_line_stops_at_the_logical_line_end(compiled):
    doc = "def f(x):\n    return x\n\ny = f(|\nz = 2\n"
    text, off, r = complete_at_marker(compiled, doc, "1, [2,\n 3])\nz = 2\n")
    assert r.text == "1, [2,\n 3])"  # the newline inside brackets doesn't end the line
    assert r.stop_reason == "line-end" and r.mode == "single"
    assert compiles(accept(text, off, r))


def test_closing_brackets_after_the_cursor_are_covered(compiled):
    doc = "def f(x):\n    return x\n\ny = f(|)\nz = 2\n"
    text, off, r = complete_at_marker(compiled, doc, "g(1))\nz = 2\n")
    assert r.text == "g(1))"
    assert r.end == r.start + 1 == off + 1  # the replace range covers the auto-closed ")"
    assert accept(text, off, r).splitlines()[3] == "y = f(g(1))"
    assert compiles(accept(text, off, r))


def test_token_healing_recreates_the_partial_word(compiled):
    doc = "import os\np = os.pa|\n"
    text, off, r = complete_at_marker(compiled, doc, "th.join('a', 'b')\n")
    assert r.figures.tokens_healed == 1
    assert r.text == "th.join('a', 'b')"
    assert accept(text, off, r) == "import os\np = os.path.join('a', 'b')\n"


def test_multi_line_after_a_block_opener_stops_at_the_dedent(compiled):
    doc = "def f(x):|\n\nprint(f(1))\n"
    text, off, r = complete_at_marker(compiled, doc, "\n    y = x + 1\n    return y\nprint(2)\n")
    assert r.mode == "multi" and r.stop_reason == "block-end"
    assert r.text == "\n    y = x + 1\n    return y"
    assert compiles(accept(text, off, r))


def test_multi_line_stops_at_a_blank_line_after_complete_code(compiled):
    doc = "def f(x):\n    |\n"
    text, off, r = complete_at_marker(compiled, doc, "if x:\n        x = 1\n\n    return x\n")
    assert r.mode == "multi" and r.stop_reason == "block-end"
    assert r.text == "if x:\n        x = 1"
    assert compiles(accept(text, off, r))


def test_a_block_opener_in_single_line_mode_brings_its_body(compiled):
    doc = "import os\n|\n\nx = 1\n"
    text, off, r = complete_at_marker(compiled, doc, "def f():\n    return 1\n\n\nx = 1\n")
    assert r.text == "def f():\n    return 1"
    assert compiles(accept(text, off, r))


def test_a_line_end_the_next_line_cannot_follow_is_refused(compiled):
    # `else:` can't follow `y = 1` at the top level: the newline is rejected, and whatever the
    # completion becomes, accepting it keeps the file valid
    doc = "if x:\n    pass\n|\nelse:\n    pass\n"
    text, off, r = complete_at_marker(compiled, doc, "y = 1\nelse:\n    pass\n")
    assert r.text != "y = 1"
    assert compiles(accept(text, off, r))


def test_continuation_lines_after_the_cursor_are_checked_to_their_end(compiled):
    # the cut line opened brackets that the next lines close: a completion that ends the
    # statement here, or opens the wrong bracket, would leave `b)` / `]` dangling
    doc = "def f(a, b):\n    return a\n\n\nx = |\n    b)\ny = 1\n"
    text, off, r = complete_at_marker(compiled, doc, "[1,\n    b]\ny = 1\n")
    assert r.text != "[1,"  # `[` would be closed by `)`
    assert not r.text or compiles(accept(text, off, r))  # the file was broken by the cut: no text is fine
    text, off, r = complete_at_marker(compiled, doc, "f(1,\n    b)\ny = 1\n")
    assert r.text == "f(1,"  # the next lines close what it opened
    assert compiles(accept(text, off, r))
    # with a sibling statement next, a newline inside the completion's brackets ends nothing
    doc = "def f(a, b):\n    return a\n\n\nx = |\ny = 1\n"
    text, off, r = complete_at_marker(compiled, doc, "f(1,\n    2)\ny = 1\n")
    assert r.text == "f(1,\n    2)"
    assert compiles(accept(text, off, r))


def test_the_next_line_of_code_deeper_continues_the_statement():
    from lsp_server.decoding.stopping.rest_of_file import continues_deeper

    assert continues_deeper("\n\n        # c\n        b,\n    z = 1\n", 4)
    assert not continues_deeper("\n    z = 1\n", 4) and not continues_deeper("\n\n", 4)


def test_a_completion_cut_short_inside_the_cursors_brackets_is_not_offered(compiled):
    """The rest of the line (which closed the call) is gone and the next line is a new
    statement: a completion stopped by the token limit before closing the call can't be
    offered, though `f(1, 2, 3,` + `y` reads as more arguments to the parser."""
    doc = "def f(*a):\n    return a\n\n\nx = f(1, |\ny = 2\n"
    intended = "2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13)\ny = 2\n"
    text, off, r = complete_at_marker(compiled, doc, intended, max_tokens=8)
    assert r.stop_reason == "max-tokens"
    assert r.text == "" or compiles(accept(text, off, r))
    text, off, r = complete_at_marker(compiled, doc, intended, max_tokens=64)
    assert r.text == "2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13)" and compiles(accept(text, off, r))


def test_a_long_literal_the_file_goes_on_in_keeps_cuts_inside_it(compiled):
    """Inside a table whose closing bracket lies far below (more lines than the check reads),
    the token limit may still cut between entries: the file goes on inside the brackets, though
    the cut line (`100: 1`) can't be followed by the next ones as it is."""
    rows = "".join(f"    {i}: {i + 1},\n" for i in range(60))
    doc = "table = {\n    100: 1|\n" + rows + "}\n"
    intended = "01, 102: 103, 104: 105, 106: 107, 108: 109,\n" + rows + "}\n"
    text, off, r = complete_at_marker(compiled, doc, intended, max_tokens=6)
    assert r.stop_reason == "max-tokens"
    assert r.text.startswith("01,") and compiles(accept(text, off, r))


def test_a_next_line_that_only_a_string_can_hold_rejects_code(compiled):
    """A cut in a docstring's first line: the lines after it are the docstring's text, which
    no completion but a string can be followed by."""
    doc = 'def f(value):\n    |\n    If it\'s not a member, return the value.\n    """\n    return value\n'
    text, off, r = complete_at_marker(compiled, doc, "return int(value)\n")
    assert r.text != "return int(value)"
    assert not r.text or compiles(accept(text, off, r))


def test_typing_through_a_suggestion_serves_its_rest(compiled):
    doc = "def f(x):\n    return x\n\ny = f(|)\nz = 2\n"
    text, off, r = complete_at_marker(compiled, doc, "g(1, 2))\nz = 2\n")
    assert r.text == "g(1, 2))" and r.typed_through == 0
    engine = scripted_engine(compiled, text[:off] + "g(1, 2))\nz = 2\n")
    assert r.start == off
    first = engine.complete(CompletionRequest(text, cursor=off, document="d"))
    assert first.text == r.text
    calls = len(engine.runtime.calls)
    typed = text[:off] + "g(1" + text[off:]  # the user types the first three characters
    rest = engine.complete(CompletionRequest(typed, cursor=off + 3, document="d"))
    assert rest.text == ", 2))" and rest.typed_through == 3
    assert rest.start == off + 3 and rest.end == off + 4  # still covers the ")"
    assert len(engine.runtime.calls) == calls  # no model call
    assert accept(typed, off + 3, rest) == accept(text, off, r)  # the same file as accepting it whole
    other = text[:off] + "h(" + text[off:]  # typed something else: a new completion
    again = engine.complete(CompletionRequest(other, cursor=off + 2, document="d"))
    assert again.typed_through == 0 and len(engine.runtime.calls) > calls


def test_typed_through_needs_the_same_suffix_and_a_proper_prefix():
    from dataclasses import replace

    from lsp_server.decoding.results import CompletionResult
    from lsp_server.decoding.shown import Shown, typed_through

    shown = Shown("x = ", "\n", CompletionResult("foo(1)", 4, 4, "line-end", "single", True),
                   EngineOptions(), None, None, None)
    assert typed_through(shown, "x = fo", "\n") == "o(1)"
    assert typed_through(shown, "x = fo", "\ny = 2\n") is None  # the rest of the file changed
    assert typed_through(shown, "x = foo(1)", "\n") == ""  # typed all of a line the model ended: nothing more
    assert typed_through(shown, "x = foo(1)", "y = 2\n") is None  # the rest of the file changed
    for other in (CompletionResult("foo(1)", 4, 4, "max-tokens", "single", True),  # the model did not end it
                  CompletionResult("foo(1)", 4, 5, "line-end", "single", True)):  # it replaced a closer
        assert typed_through(Shown("x = ", "\n", other, EngineOptions(), None, None, None), "x = foo(1)", "\n") is None
    opener = Shown("if ", "\n", CompletionResult("x:", 3, 3, "line-end", "single", True), EngineOptions(), "auto",
                    None, None)
    assert typed_through(opener, "if x:", "\n") is None  # a request after a block opener is multi-line
    assert typed_through(replace(opener, mode="single"), "if x:", "\n") == ""
    assert typed_through(shown, "x = ba", "\n") is None
    assert typed_through(shown, "x = ", "\n") is None  # nothing typed: a new request


def test_a_request_at_the_end_of_an_accepted_line_asks_no_model(compiled):
    """Accepting a one-line answer that the model ended, editors ask at its end: nothing more
    on that line, without a model run; after a block opener (auto mode) the model is asked."""
    doc = "def f(x):\n    return x\n\ny = |\nz = 2\n"
    text, off, r = complete_at_marker(compiled, doc, "f(1)\nz = 2\n")
    assert r.text == "f(1)" and r.stop_reason == "line-end"
    engine = scripted_engine(compiled, text[:off] + "f(1)\nz = 2\n")
    assert engine.complete(CompletionRequest(text, cursor=off, document="d", mode="single")).text == "f(1)"
    calls = len(engine.runtime.calls)
    accepted = text[:off] + "f(1)" + text[off:]
    at_end = engine.complete(CompletionRequest(accepted, cursor=off + 4, document="d", mode="single"))
    assert at_end.text == "" and at_end.stop_reason == "line-end" and at_end.typed_through == 4
    assert len(engine.runtime.calls) == calls  # no model call

    doc = "def f(x):\n    return x\n\nif |\n    z = 2\n"
    engine = scripted_engine(compiled, doc[: doc.index("|")] + "f(1):\n    z = 2\n")
    text, off = doc.replace("|", ""), doc.index("|")
    first = engine.complete(CompletionRequest(text, cursor=off, document="d", mode="auto"))
    assert first.text == "f(1):" and first.stop_reason == "line-end"
    calls = len(engine.runtime.calls)
    accepted = text[:off] + "f(1):" + text[off:]
    engine.complete(CompletionRequest(accepted, cursor=off + 5, document="d", mode="auto"))
    assert len(engine.runtime.calls) > calls  # a block opener: the model writes its body


def test_infix_completion_joins_the_rest_of_the_line(compiled):
    doc = "def foo(a, b):\n    pass\n\nx = foo(|, 2)\n"
    text, off, r = complete_at_marker(compiled, doc, "abs(1)\n")
    assert r.stop_reason == "suffix"
    assert r.text == "abs(1)"
    assert accept(text, off, r).splitlines()[3] == "x = foo(abs(1), 2)"


def test_newline_in_a_docstring_ends_a_single_line_completion(compiled):
    doc = 'def f():\n    """Return the|\n    answer."""\n'
    text, off, r = complete_at_marker(compiled, doc, " value.\n    More text.\n")
    assert r.text == " value."
    assert compiles(accept(text, off, r))


def scripted_decode(compiled, prefix: bytes, script: bytes, max_tokens: int, launch_early: bool | None = None,
                    avoid: frozenset[int] = frozenset(), names=None):
    """Decode after `prefix` with a scripted model that writes `script` (`avoid`: banned at the
    first step; `names`: a names guide): (the outcome, the stepper, the forward passes it asked for)."""
    from lsp_server.decoding.loop import ModelStepper, decode
    from lsp_server.decoding.sampling import Sampler
    from lsp_server.decoding.stopping.rest_of_file import LineScanner
    from lsp_server.decoding.stopping.policy import StopPolicy
    from lsp_server.decoding.stopping.rest_of_file import RestOfFile
    from mask_store.matcher import GrammarMatcher

    comp, tok = compiled
    runtime = ScriptedRuntime(tok, script)
    logits, past = runtime.forward(tok.encode(prefix.decode()))
    calls = len(runtime.calls)
    matcher = GrammarMatcher.from_prefix(comp, prefix)
    st = matcher.prefix_state
    scanner = LineScanner(comp.lexer)
    held = prefix[st.lexeme_start :]
    rest = RestOfFile.build(prefix.decode(), "\n", "auto", scanner, held, b"", 0, matcher_parser(comp), prefix)
    policy = StopPolicy(rest, scanner, held, b"", 0)
    stepper = ModelStepper(runtime.forward, logits[-1], past, launch_early=launch_early)
    out = decode(stepper, matcher, comp.tokens, {0, 2}, Sampler(), policy, max_tokens, avoid=avoid, names=names)
    return out, stepper, len(runtime.calls) - calls


def test_fast_forward_takes_forced_tokens_without_the_model(compiled):
    # after `x = y if z els` the grammar allows a single token, `e`: no model call for it
    _, tok = compiled
    out, _, calls = scripted_decode(compiled, b"x = y if z els", b"x = y if z else 0\n", 16)
    assert out.tokens[0] == tok.vocab.by_bytes[b"e"] and out.forced >= 1
    assert out.generated[: out.stop.cut] == b"e 0"
    # one forward pass per sampled token: the forced one was never asked of the model
    assert calls == out.sampled == len(out.tokens) - out.forced


def test_the_names_guide_reads_a_step_without_its_banned_tokens(compiled):
    """A search pass bans the earlier passes' choice at its step: the names guide is shown the
    banned tokens, so it walks its dead ends from the best token the step can take (a dead end
    below the banned choice was taken: rich's `box.` + `M` + `Box`)."""
    _, tok = compiled

    class Recorder:
        def __init__(self):
            self.seen: list[tuple[bytes, set[int]]] = []

        def shape(self, row, mask, matcher, generated, banned=()):
            self.seen.append((generated, set(banned)))
            return row, mask

    names = Recorder()
    x = tok.vocab.by_bytes[b" x"]
    out, _, _ = scripted_decode(compiled, b"y = 1\nz =", b"y = 1\nz = x\n", 8, avoid=frozenset({x}), names=names)
    assert names.seen[0] == (b"", {x}) and out.tokens[0] != x


def matcher_parser(comp):
    from grammar_tools.parsing.incremental import PrefixParser

    return PrefixParser(comp.recognizer, comp.lexer)


def test_unconstrained_mode_uses_no_mask(compiled):
    doc = "x = foo(|\n"
    text, off, r = complete_at_marker(compiled, doc, "1 2 3)\ny = 2\n", constrained=False)
    assert r.text == "1 2 3)" and not r.constrained  # the grammar would never allow this


def test_cancel_stops_at_once(compiled):
    comp, tok = compiled
    engine = CompletionEngine(EngineOptions(), ScriptedRuntime(tok, b"x = 1\n"), comp)
    r = engine.complete(CompletionRequest.at("x = ", 0, 4), cancel=lambda: True)
    assert r.stop_reason == "cancelled" and r.text == ""


def test_cursor_outside_the_document_is_an_error(compiled):
    from lsp_server.positions import PositionError

    comp, tok = compiled
    engine = CompletionEngine(EngineOptions(), ScriptedRuntime(tok, b""), comp)
    with pytest.raises(PositionError):
        engine.complete(CompletionRequest.at("x = 1\n", 5, 0))


# ---------------------------------------------------------------- a real (tiny) model


@pytest.fixture(scope="module")
def tiny_engine(tiny_model_dir):
    return CompletionEngine.load(EngineOptions(model=str(tiny_model_dir), max_tokens=24))


@pytest.mark.parametrize("noise, least", [(0.0, 18), (0.15, 6), (0.4, 3)])
def test_straying_models_never_break_the_file(compiled, noise, least):
    """A model that writes the file's own text but strays at random: whatever it writes,
    accepting the completion leaves a valid file."""
    comp, tok = compiled
    nonempty = 0
    cuts = stdlib_cuts(24, seed=int(noise * 100))
    for n, (path, i, ch) in enumerate(cuts):
        lines = path.read_text().split("\n")
        doc = "\n".join(lines[:i] + [lines[i][:ch]] + lines[i + 1 :])
        runtime = ScriptedRuntime(tok, "\n".join(lines).encode(), noise=noise, seed=n)
        engine = CompletionEngine(EngineOptions(max_tokens=24), runtime, comp)
        r = engine.complete(CompletionRequest.at(doc, i, ch, document=str(path)))
        assert r.stop_reason in ("line-end", "block-end", "eos", "max-tokens", "suffix", "no-continuation", "echo",
                                 "repeated-name")
        if r.text:
            nonempty += 1
            spliced = "\n".join(lines[:i] + [lines[i][:ch] + r.text] + lines[i + 1 :])
            assert compiles(spliced), (path, i, ch, r.text)
    assert nonempty >= least  # (not a vacuous pass: most completions say something)


def test_tiny_model_runs_the_whole_path(tiny_engine):
    path = STDLIB / "json" / "decoder.py"
    lines = path.read_text().split("\n")
    for i, ch in ((40, 8), (120, 0), (200, 4)):
        doc = "\n".join(lines[:i] + [lines[i][:ch]] + lines[i + 1 :])
        r = tiny_engine.complete(CompletionRequest.at(doc, i, ch, document=str(path)))
        assert r.figures.prompt_tokens > 0 and r.figures.tokens_generated + r.figures.tokens_forced > 0
        if r.text:
            assert compiles("\n".join(lines[:i] + [lines[i][:ch] + r.text] + lines[i + 1 :]))


def test_typing_reuses_the_prompt_cache(tiny_engine):
    doc = "import os\n\n\ndef main():\n    path = os.pa"
    r1 = tiny_engine.complete(CompletionRequest.at(doc, 4, 16, document="typing"))
    doc2 = doc + "th.jo"
    r2 = tiny_engine.complete(CompletionRequest.at(doc2, 4, 21, document="typing"))
    assert r2.figures.prompt_reused >= r1.figures.prompt_tokens - 2


def _long_document(typed: str = "    ") -> tuple[str, int]:
    """A document whose full prompt window is 1,024 tokens (json/decoder.py, its line 300 made
    `typed`), and that line's index."""
    lines = (STDLIB / "json" / "decoder.py").read_text().split("\n")
    i = 300
    return "\n".join(lines[:i] + [typed] + lines[i + 1 :]), i


def test_a_cancelled_prefill_finishes_its_chunk_and_a_request_reuses_all_of_it(tiny_engine, monkeypatch):
    """Work ahead (`prefill`) is cut only between its chunks of AHEAD_CHUNK tokens: a keystroke
    waits for one chunk at most, and everything computed is kept for the request (nothing is
    thrown away: see PromptCache.prefill); a request's prompt likewise keeps the chunk it was
    running when it was superseded."""
    from lsp_server.model.kv_cache import AHEAD_CHUNK, PREFILL_CHUNK

    runtime = tiny_engine.runtime
    doc, i = _long_document()
    full = tiny_engine.options.updated(first_window_tokens=0)
    reference = tiny_engine.complete(CompletionRequest.at(doc, i, 4, document="reference"), options=full)
    passes: list[int] = []  # the tokens of each forward pass
    asked: list[int] = []  # the passes run when cancel() was asked
    forward = runtime.forward

    def counting_forward(ids, past=None, keep=1, cancel=None, wanted=None):
        passes.append(len(ids))
        return forward(ids, past, keep, cancel=cancel, wanted=wanted)

    def cancel() -> bool:  # the user types while the second chunk runs
        asked.append(len(passes))
        return len(passes) >= 2

    monkeypatch.setattr(runtime, "forward", counting_forward)
    out = tiny_engine.prefill(CompletionRequest.at(doc, i, 4, document="chunks"), cancel=cancel, options=full)
    assert not out.complete and out.computed == 2 * AHEAD_CHUNK  # the second chunk finished, kept
    assert passes == [AHEAD_CHUNK, AHEAD_CHUNK] and asked == [0, 1, 2]  # asked between chunks only
    again = tiny_engine.complete(CompletionRequest.at(doc, i, 4, document="chunks"), options=full)
    assert again.figures.prompt_tokens > 2 * AHEAD_CHUNK
    assert again.figures.prompt_reused == 2 * AHEAD_CHUNK  # all the work ahead did
    assert again.text == reference.text
    # a request cancelled while its second chunk runs finishes that chunk and keeps it
    passes.clear()
    tiny_engine.forget("chunks")
    r = tiny_engine.complete(CompletionRequest.at(doc, i, 4, document="chunks"),
                             cancel=lambda: len(passes) >= 2, options=full)
    assert r.stop_reason == "cancelled" and r.text == ""
    assert passes == [PREFILL_CHUNK, PREFILL_CHUNK]
    again = tiny_engine.complete(CompletionRequest.at(doc, i, 4, document="chunks"), options=full)
    assert again.figures.prompt_reused == 2 * PREFILL_CHUNK and again.text == reference.text


def test_a_prefetch_is_stopped_between_short_chunks_and_its_prompt_kept(tiny_engine, monkeypatch):
    """A prefetch (work ahead: the suggestion after an accepted one, an answer the budget cut
    continued) runs its prompt in chunks of AHEAD_CHUNK tokens, asked to stop between them: a
    keystroke waits for one such chunk, not for a request's PREFILL_CHUNK ones (through the
    server, a warm request waited 0.4-0.5 s behind a prefetch's prompt), and the request after
    it reuses what the prefetch computed."""
    from lsp_server.model.kv_cache import AHEAD_CHUNK

    runtime = tiny_engine.runtime
    doc, i = _long_document()
    full = tiny_engine.options.updated(first_window_tokens=0)
    passes: list[int] = []
    forward = runtime.forward

    def counting_forward(ids, past=None, keep=1, cancel=None, wanted=None):
        passes.append(len(ids))
        return forward(ids, past, keep, cancel=cancel, wanted=wanted)

    monkeypatch.setattr(runtime, "forward", counting_forward)
    out = tiny_engine.prefetch(CompletionRequest.at(doc, i, 4, document="prefetched"),
                               cancel=lambda: len(passes) >= 2, options=full)
    assert out.stop_reason == "cancelled" and out.text == ""
    assert passes == [AHEAD_CHUNK, AHEAD_CHUNK]  # stopped after its second short chunk
    again = tiny_engine.complete(CompletionRequest.at(doc, i, 4, document="prefetched"), options=full)
    assert again.figures.prompt_reused == 2 * AHEAD_CHUNK
    tiny_engine.forget("prefetched")


def test_the_first_answer_comes_from_a_short_window_and_the_next_from_the_full_one(tiny_engine):
    """A request whose KV cache lacks more than `first_window_tokens` of the full window is
    answered from the lines nearest the cursor in at most that many tokens (the grammar still
    reads the whole document); once the full window is computed (the work ahead's prefill),
    the next request uses it, and typing on in the short window reuses its cache."""
    doc, i = _long_document()
    opts = tiny_engine.options.updated(first_window_tokens=200)
    first = tiny_engine.complete(CompletionRequest.at(doc, i, 4, document="first"), options=opts)
    assert first.short_window and 0 < first.figures.prompt_tokens <= 200 and first.figures.prompt_reused == 0
    typed, _ = _long_document("    r")
    on = tiny_engine.complete(CompletionRequest.at(typed, i, 5, document="first"), options=opts)
    assert on.short_window and on.figures.prompt_reused >= on.figures.prompt_tokens - 2  # the short window's cache
    done = tiny_engine.prefill(CompletionRequest.at(typed, i, 5, document="first"), options=opts)
    assert done.complete and done.prompt_tokens > 200
    full = tiny_engine.complete(CompletionRequest.at(typed, i, 5, document="first"), options=opts)
    assert not full.short_window and full.figures.prompt_tokens == done.prompt_tokens
    assert full.figures.prompt_reused >= full.figures.prompt_tokens - 1
    # background work (a prefetch) never takes the short window; nor does a short document
    tiny_engine.forget("first")
    ahead = tiny_engine.prefetch(CompletionRequest.at(doc, i, 4, document="first"), options=opts)
    assert not ahead.short_window and ahead.figures.prompt_tokens > 200
    small = tiny_engine.complete(CompletionRequest.at("import os\nos.pa", 1, 5, document="small"), options=opts)
    assert not small.short_window


def test_a_cancellation_stops_a_decoding_step_between_layers(tiny_engine, monkeypatch):
    runtime = tiny_engine.runtime
    doc = "import os\n\n\ndef main():\n    path = os.pa"
    asked_in_pass: list[int] = []
    forward = runtime.forward

    def counting_forward(ids, past=None, keep=1, cancel=None, wanted=None):
        asked_in_pass.append(0)
        return forward(ids, past, keep, cancel=cancel, wanted=wanted)

    def cancel() -> bool:  # the prompt runs; the first decoding pass stops at its first layer
        if len(asked_in_pass) < 2:
            return False
        asked_in_pass[-1] += 1
        return True

    monkeypatch.setattr(runtime, "forward", counting_forward)
    opts = tiny_engine.options.updated(speculative=False)
    r = tiny_engine.complete(CompletionRequest.at(doc, 4, 16, document="steps"), cancel=cancel, options=opts)
    assert r.stop_reason == "cancelled" and r.text == ""
    assert asked_in_pass == [0, 1]  # one prompt pass, one decoding pass stopped before its first layer
    again = tiny_engine.complete(CompletionRequest.at(doc, 4, 16, document="steps"), options=opts)
    assert again.figures.prompt_reused == again.figures.prompt_tokens  # the cache holds the prompt, nothing else


@pytest.mark.slow
def test_batch_cli(tmp_path, tiny_model_dir):
    target = STDLIB / "json" / "decoder.py"
    cuts = tmp_path / "cuts.jsonl"
    cuts.write_text(
        json.dumps({"path": str(target), "line": 40, "character": 8}) + "\n"
        + json.dumps({"path": str(target), "line": 70, "character": 4}) + "\n"
        + json.dumps({"path": str(tmp_path / "missing.py"), "line": 0, "character": 0}) + "\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "lsp_server.cli", "complete", "--batch", str(cuts),
         "--model", str(tiny_model_dir), "--max-tokens", "8"],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )
    rows = [json.loads(x) for x in out.stdout.splitlines()]
    assert len(rows) == 3
    for row in rows[:2]:
        assert {"text", "start", "end", "stop_reason", "tokens_generated", "tokens_forced",
                "tokens_healed", "prompt_ms", "decode_ms", "mask_ms"} <= set(row)
        # the cursor as the file has it (a character past its line's end is that end, as LSP says)
        text = target.read_text()
        assert row["start"] == list(position_of(text, offset_at(text, row["line"], row["character"])))
    assert "cannot read" in rows[2]["error"]
    assert out.returncode == 1  # one cut failed


@pytest.mark.slow
def test_real_model_completes_a_real_file():
    path = STDLIB / "json" / "decoder.py"
    lines = path.read_text().split("\n")
    i = next(k for k, ln in enumerate(lines) if ln.strip().startswith("end = _w(s, end).end()"))
    ch = len(lines[i]) - len(lines[i].lstrip())
    doc = "\n".join(lines[:i] + [lines[i][:ch]] + lines[i + 1 :])
    engine = CompletionEngine.load(EngineOptions(max_tokens=32))
    r = engine.complete(CompletionRequest.at(doc, i, ch, document=str(path)))
    assert r.text.strip()
    assert compiles("\n".join(lines[:i] + [lines[i][:ch] + r.text] + lines[i + 1 :]))


def test_greedy_choice_is_the_argmax_of_the_masked_logits():
    """The greedy path picks among the allowed logits only: the same token as the argmax of the
    masked logits (ties: the first), none when nothing allowed is finite, padding rows never;
    also on a row of a verification pass's logits (a view of a 2-D tensor)."""
    import numpy as np
    import torch

    from lsp_server.decoding.sampling import greedy_choice, masked_logits

    rng = np.random.default_rng(3)
    for _ in range(300):
        n = int(rng.integers(1, 60))
        rows = torch.from_numpy(rng.integers(-3, 3, (2, n)).astype(np.float32))  # many ties
        rows[torch.from_numpy(rng.random((2, n)) < 0.2)] = float("-inf")
        logits = rows[1]
        mask = rng.random(n - int(rng.integers(0, 3)) if n > 2 else n) < rng.random()
        banned = {int(t) for t in rng.integers(0, n, int(rng.integers(0, 3)))}
        full = masked_logits(logits, mask, banned)
        want = int(torch.argmax(full)) if torch.isfinite(full).any() else None
        assert greedy_choice(logits, mask, banned) == want


def test_the_work_ahead_computes_the_short_window_before_the_full_one(tiny_engine, monkeypatch):
    """Where a request would be answered from the short first window (the full window's KV
    cache lacks more than `first_window_tokens`), the work ahead computes that window first: a
    first request during the full window's prefill finds it computed, the typed character
    aside, instead of computing it at the keystroke."""
    from lsp_server.decoding.parts import first_window_key, prompt_in_window
    from lsp_server.model.kv_cache import AHEAD_CHUNK

    doc, i = _long_document()
    opts = tiny_engine.options.updated(first_window_tokens=200)
    request = CompletionRequest.at(doc, i, 4, document="ahead")
    short = prompt_in_window(tiny_engine.parts, request, request.before, request.after, opts, window="first")
    key = first_window_key("ahead")
    ahead = tiny_engine.prefill(request, cancel=lambda: tiny_engine.prompt_cache.missing(key, short.ids) == 0,
                                options=opts)
    assert not ahead.complete and ahead.computed < ahead.prompt_tokens  # stopped in the full window's prefill
    typed, _ = _long_document("    r")
    first = tiny_engine.complete(CompletionRequest.at(typed, i, 5, document="ahead"), options=opts)
    assert first.short_window and first.figures.prompt_reused >= first.figures.prompt_tokens - 2
    # a prefetch (the continuation of an answer the budget cut) takes it too, computed, rather
    # than computing the whole full window in chunks a keystroke cannot stop
    on = tiny_engine.prefetch(CompletionRequest.at(typed, i, 5, document="ahead"), options=opts)
    assert on.short_window and on.figures.prompt_reused >= on.figures.prompt_tokens - 1
    # stopped once the full window lacks fewer than `first_window_tokens`: the short window,
    # computed, still costs the keystroke less, and serves
    tiny_engine.forget("ahead")
    full = tiny_engine.prompt(request, opts)
    passes: list[int] = []
    forward = tiny_engine.runtime.forward

    def counting_forward(ids, past=None, keep=1, cancel=None, wanted=None):
        passes.append(len(ids))
        return forward(ids, past, keep, cancel=cancel, wanted=wanted)

    monkeypatch.setattr(tiny_engine.runtime, "forward", counting_forward)
    chunks = -(-len(short.ids) // AHEAD_CHUNK) + -(-(len(full.ids) - 150) // AHEAD_CHUNK)
    part = tiny_engine.prefill(request, options=opts, cancel=lambda: len(passes) >= chunks)
    assert not part.complete and 0 < len(full.ids) - (part.computed - len(short.ids)) <= 150
    later = tiny_engine.complete(CompletionRequest.at(typed, i, 5, document="ahead"), options=opts)
    assert later.short_window and later.figures.prompt_reused >= later.figures.prompt_tokens - 2
    # a prefill that needs no short window (the setting off) computes the full one alone
    tiny_engine.forget("ahead")
    whole = tiny_engine.prefill(request, options=opts.updated(first_window_tokens=0))
    assert whole.complete and whole.computed == whole.prompt_tokens

