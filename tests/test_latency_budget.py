"""The latency budget (issue 32, `lsp_server/decoding/budget.py`): once it runs out, a request
offers the complete lines decoded so far (valid like any answer), the rest is decoded on in the
background from its tokens and served when the user accepts or types on; no budget changes
nothing; a line is cut only once it has had the budget's span of decoding, at its longest valid
cut, and its rest is decoded on the same way; the search behind an empty answer stops with it.
The budgets run on a clock that counts the scripted model's forward passes: no timing."""

from __future__ import annotations

import pytest

from grammar_tools.parsing.cpython_check import compiles
from lsp_server.decoding import header_steering, model_pass
from lsp_server.decoding.budget import NO_BUDGET, Budget
from lsp_server.decoding.engine import CompletionEngine, CompletionRequest
from lsp_server.decoding.stopping.policy import StopReason
from lsp_server.options import EngineOptions
from lsp_server.server.settings import ServerOptions

from scripted_model import ScriptedRuntime, SecondChoiceRuntime

# the cursor on an empty line of a function's body: the model writes the whole body
DOC = "def total(items):\n    |\n\n\nprint(total([1, 2]))\n"
BODY = "result = 0\n    for item in items:\n        result += item\n    return result\n\n\nprint(total([1, 2]))\n"
WHOLE = "result = 0\n    for item in items:\n        result += item\n    return result"


def split(doc: str) -> tuple[str, int]:
    """The document without its `|` marker, and the marker's offset (the cursor)."""
    off = doc.index("|")
    return doc[:off] + doc[off + 1 :], off


def engine_for(compiled, doc: str, intended: str, **opts) -> tuple[CompletionEngine, ScriptedRuntime]:
    comp, tok = compiled
    text, off = split(doc)
    runtime = ScriptedRuntime(tok, (text[:off] + intended).encode())
    return CompletionEngine(EngineOptions(**opts), runtime, comp), runtime


def steps_budget(runtime: ScriptedRuntime, steps: int, span: int = 0) -> Budget:
    """A budget that runs out after `steps` more forward passes of `runtime` (a slow model:
    each pass is a tick of the clock); a line gets `span` passes from the decoding's start."""
    return Budget(len(runtime.calls) + steps, clock=lambda: len(runtime.calls), span=span)


@pytest.mark.parametrize("speculative", [False, True])
def test_an_expired_budget_offers_the_complete_lines_so_far_and_they_keep_the_file_valid(compiled, speculative):
    engine, runtime = engine_for(compiled, DOC, BODY, speculative=speculative)
    text, off = split(DOC)
    r = engine.complete(CompletionRequest(text, cursor=off, budget=steps_budget(runtime, 2)))
    assert r.stop_reason is StopReason.BUDGET and r.budget_cut
    assert r.text and WHOLE.startswith(r.text) and len(r.text) < len(WHOLE)
    assert WHOLE[len(r.text)] == "\n"  # it ends a complete line
    assert compiles(text[:off] + r.text + text[off:])


def test_without_a_budget_the_whole_block_comes_in_one_answer(compiled):
    engine, _ = engine_for(compiled, DOC, BODY)
    text, off = split(DOC)
    r = engine.complete(CompletionRequest(text, cursor=off, budget=NO_BUDGET))
    assert (r.text, r.budget_cut) == (WHOLE, False)
    assert r.stop_reason is not StopReason.BUDGET
    assert Budget.of(0) is NO_BUDGET and not Budget.of(0).expired()


def test_the_rest_is_decoded_on_in_the_background_and_served_after_accept_without_the_model(compiled):
    engine, runtime = engine_for(compiled, DOC, BODY)
    text, off = split(DOC)
    first = engine.complete(CompletionRequest(text, cursor=off, document="file:///t.py",
                                              budget=steps_budget(runtime, 2)))
    assert first.budget_cut and first.text != WHOLE
    whole = engine.prefetch(CompletionRequest(text, cursor=off, document="file:///t.py", resume=tuple(first.token_ids)))
    assert whole.text == WHOLE  # decoded on from the cut answer's tokens: the same block
    assert whole.figures.tokens_forced >= len(first.token_ids)  # they were replayed, not sampled again
    # the user accepts the first lines: the request at their end gets the rest without the model
    accepted = text[:off] + first.text + text[off:]
    end = off + len(first.text)
    calls = len(runtime.calls)
    rest = engine.complete(CompletionRequest(accepted, cursor=end,
                                             document="file:///t.py", budget=steps_budget(runtime, 1)))
    assert rest.text == WHOLE[len(first.text) :] and rest.prefetched
    assert len(runtime.calls) == calls
    assert compiles(accepted[:end] + rest.text + accepted[end:])
    # typing on (the first characters of the next line) is served the same way
    typed = WHOLE[len(first.text) : len(first.text) + 6]
    on = accepted[:end] + typed + accepted[end:]
    k = end + len(typed)
    r = engine.complete(CompletionRequest(on, cursor=k,
                                          document="file:///t.py"))
    assert r.text == WHOLE[len(first.text) + len(typed) :] and len(runtime.calls) == calls


def test_a_line_is_not_cut_before_it_had_the_budgets_span_of_decoding(compiled):
    """Single-line: a budget gone before the first step (the request waited for its prompt)
    leaves the line its span: a line written within it is whole."""
    doc = "def f(a, b):\n    return a +|\n"
    engine, runtime = engine_for(compiled, doc, " b * 2\n", mode="single", speculative=False)
    text, off = split(doc)
    plain = engine_for(compiled, doc, " b * 2\n", mode="single")[0].complete(CompletionRequest(text, cursor=off))
    r = engine.complete(CompletionRequest(text, cursor=off, budget=steps_budget(runtime, 0, span=20)))
    assert (r.text, r.budget_cut) == (plain.text, False) and r.text == " b * 2"


# a long line: the request's budget runs out while it is written
LONG = "def f(first, second, third):\n    return first +|\n"
LINE = " second * third - first * second + third * first - second * second"


@pytest.mark.parametrize("speculative", [False, True])
def test_a_line_longer_than_its_span_is_cut_where_the_file_stays_valid_and_decoded_on(compiled, speculative):
    engine, runtime = engine_for(compiled, LONG, LINE + "\n", mode="single", speculative=speculative)
    text, off = split(LONG)
    whole = engine_for(compiled, LONG, LINE + "\n", mode="single")[0].complete(CompletionRequest(text, cursor=off))
    assert whole.text == LINE
    first = engine.complete(CompletionRequest(text, cursor=off, document="file:///t.py",
                                              budget=steps_budget(runtime, 0, span=3)))
    assert first.stop_reason is StopReason.BUDGET and first.budget_cut
    assert first.text and LINE.startswith(first.text) and len(first.text) < len(LINE)
    assert compiles(text[:off] + first.text + text[off:])
    # decoded on in the background from its tokens, served after accept without the model
    rest_of_line = engine.prefetch(CompletionRequest(text, cursor=off, document="file:///t.py",
                                                     resume=tuple(first.token_ids)))
    assert rest_of_line.text == LINE
    accepted = text[:off] + first.text + text[off:]
    end = off + len(first.text)
    calls = len(runtime.calls)
    r = engine.complete(CompletionRequest(accepted, cursor=end, document="file:///t.py",
                                          budget=steps_budget(runtime, 0, span=3)))
    assert r.text == LINE[len(first.text) :] and r.prefetched and len(runtime.calls) == calls


# the line at the cursor was a block's header: the model's first choice writes a statement no
# cut of which keeps the file valid, its second the header (tests/test_redecode.py)
LOOP = ("def total(items):\n    result = 0\n    |\n        result += item\n    return result\n\n\n"
        "print(total([1, 2]))\n")


def test_the_search_behind_an_empty_answer_stops_with_the_budget(compiled, monkeypatch):
    # without the first pass's steering (which finds the header at once: tests/test_redecode.py)
    # the answer comes from the search
    monkeypatch.setattr(header_steering, "needed_headers", lambda rest: ())
    comp, tok = compiled
    text, off = split(LOOP)
    before = text[:off]

    def engine():
        runtime = SecondChoiceRuntime(ScriptedRuntime(tok, (before + "return result\n    return result\n").encode()),
                                      ScriptedRuntime(tok, (before + "for item in items:\n").encode()))
        return CompletionEngine(EngineOptions(), runtime, comp)

    searched = engine().complete(CompletionRequest(text, cursor=off))
    assert (searched.text, searched.offer_path) == ("for item in items:", "redecode")
    spent = Budget(1.0, clock=lambda: 2.0)  # gone before the search
    r = engine().complete(CompletionRequest(text, cursor=off, budget=spent))
    assert (r.text, r.budget_cut) == ("", True)
    assert model_pass.TRIES > 0


def test_the_setting_and_its_bounds():
    opts, problems = ServerOptions().merged({})
    assert opts.latency_budget_ms == 250 and not problems
    assert ServerOptions().merged({"latencyBudgetMs": 0})[0].latency_budget_ms == 0
    assert ServerOptions().merged({"latencyBudgetMs": 400.0})[0].latency_budget_ms == 400
    for bad in (-1, "fast", True, 10**9, 2.5):
        opts, problems = ServerOptions().merged({"latencyBudgetMs": bad})
        assert opts.latency_budget_ms == 250 and problems and "latencyBudgetMs" in problems[0]
    assert ServerOptions().to_json()["latencyBudgetMs"] == 250


# --- the work ahead's part --------------------------------------------------------------------


class RecordingHost:
    """Just enough of an EngineHost for WorkAhead: background jobs are recorded, not run."""

    ready = True
    busy = False

    def __init__(self) -> None:
        self.jobs: list[str] = []

    def on_idle(self, listener) -> None:
        pass

    async def background(self, job, uri):
        self.jobs.append(uri)
        return None

    def stop_background(self) -> None:
        pass


@pytest.mark.asyncio
async def test_a_documents_first_prefill_starts_at_once_later_ones_after_the_pause():
    import asyncio

    from lsp_server.server.documents import DocumentStore
    from lsp_server.server.work_ahead import WorkAhead

    from wait_support import until

    docs, host = DocumentStore(), RecordingHost()
    ahead = WorkAhead(docs, host, enabled=lambda: True, pause_s=3600)  # a pause that never ends here
    docs.open("file:///a.py", "python", 1, "x = 1\ny = \n")
    ahead.opened("file:///a.py")
    ahead.cursor("file:///a.py", 1, 1, 4)  # reported with the opening
    await until(lambda: host.jobs == ["file:///a.py"], timeout=10, what="the first prefill")
    await asyncio.sleep(0.05)
    ahead.cursor("file:///a.py", 1, 0, 3)  # a move: waits for the pause
    docs.open("file:///b.py", "python", 1, "z = \n")
    ahead.opened("file:///b.py")
    ahead.changed("file:///b.py", (0, 4))  # a client without cursor reports: its first change
    await until(lambda: host.jobs == ["file:///a.py", "file:///b.py"], timeout=10, what="b's first prefill")
    await asyncio.sleep(0.2)
    assert host.jobs == ["file:///a.py", "file:///b.py"]


def test_a_continuation_stays_valid_while_the_cut_answer_is_typed_on():
    from lsp_server.server.work_ahead import Plan, Work

    text = "def f():\n    \n"
    plan = Plan(Work.PREFETCH, "u", text, 13, (text,), (1, 2, 3), "x = 1\n    y = 2")
    for typed in ("x", "x = 1\n", "x = 1\n    y = 2"):
        assert plan.valid(text[:13] + typed + text[13:])
    assert plan.valid(text)
    assert not plan.valid(text[:13] + "z" + text[13:])
    assert not plan.valid(text[:13] + "x = 1\n    y = 2!" + text[13:])
    assert not Plan(Work.PREFETCH, "u", text, 13, (text,)).valid(text[:13] + "x" + text[13:])


def test_a_cut_answer_is_counted_in_the_statistics():
    from lsp_server.server.telemetry import Telemetry

    t = Telemetry()
    t.count("budget_cut")
    assert t.stats()["budgetCut"] == 1


def test_a_new_window_leaves_room_so_that_the_next_lines_keep_its_start():
    """A document's first prompt (the one prefilled ahead) holds at most REFILL_SHARE of the
    budget: accepting a suggestion of a few lines after it keeps the window's start, so its KV
    cache serves the next request instead of a whole new prefill."""
    import os
    import typing

    from mask_store.vocabulary import load_tokenizer

    from lsp_server.decoding.prompt import REFILL_SHARE, window

    tok = load_tokenizer("default")
    lines = open(os.path.abspath(typing.__file__), encoding="utf-8").read().splitlines(keepends=True)
    for at in (900, 1500, 2200):
        before = "".join(lines[:at])
        first = window(tok, before, 1024)
        assert first.truncated and len(tok.encode(before[first.start :])) <= REFILL_SHARE * 1024
        accepted = before + "    value = compute(first, second)\n" * 12  # ~120 tokens
        assert window(tok, accepted, 1024, anchor=first.line).line == first.line
