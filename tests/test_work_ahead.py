"""Working ahead of the user: prompt windows bounded in tokens and stable while typing, prefill
stopped by a request with its work reused, the KV caches' memory cap, prefetch served without a
model call, background work in the engine host, the Enter prediction."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time

import pytest

from lsp_server.decoding.engine import CompletionEngine, CompletionRequest, CompletionResult
from grammar_tools.parsing.incremental import PrefixParser
from lsp_server.decoding.identifiers.line_place import Place, line_place
from lsp_server.decoding.parts import prompt_in_window
from lsp_server.decoding.prompt import KEEP_SHARE, REFILL_SHARE, build_prompt, enclosing_headers, window
from lsp_server.decoding.window_starts import NO_STARTS, StatementLines
from lsp_server.positions import line_starts
from lsp_server.model.kv_cache import MB, PromptCache
from lsp_server.options import EngineOptions
from lsp_server.server.engine_host import EngineHost
from lsp_server.server.runs import StopSignal
from lsp_server.server.work_ahead import after_enter, end_of_insert, parse_cursor

from scripted_model import CountingCache, ScriptedRuntime
from wait_support import until

BUDGET = 1024
TYPING_PY = open(os.path.join(os.path.dirname(json.__file__), "..", "typing.py"), encoding="utf-8").read()


@pytest.fixture(scope="module")
def tok():
    from mask_store.vocabulary import load_tokenizer

    return load_tokenizer("default")


def spelled(tok, ids) -> str:
    return b"".join(tok.vocab.token_bytes[i] for i in ids).decode("utf-8", errors="replace")


# --- prompt windows ---------------------------------------------------------------------------


class _CountingEncoder:
    def __init__(self, inner, counter):
        self.inner, self.counter = inner, counter

    def encode(self, text, add_special_tokens=False):
        self.counter["chars"] += len(text)
        return self.inner.encode(text, add_special_tokens=add_special_tokens)


class CountingTokenizer:
    """The real tokenizer, counting the characters it is given to tokenize."""

    def __init__(self, tok):
        self.counter = {"chars": 0}
        self.vocab = tok.vocab
        self.facts = tok.facts
        self.tokenizer = _CountingEncoder(tok.tokenizer, self.counter)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text).ids

    @property
    def chars(self) -> int:
        return self.counter["chars"]


@pytest.mark.parametrize("name", ["code", "line 20k", "line 1MB", "no spaces 1MB", "blank lines"])
def test_the_prompt_is_bounded_in_tokens_whatever_the_line_lengths(tok, name):
    before = {
        "code": TYPING_PY,
        "line 20k": "x = [" + ", ".join(str(i) for i in range(4000)),
        "line 1MB": "import os\nx = '" + "abcdefgh " * 110_000,
        "no spaces 1MB": "y = 1\n" + "z" * 1_000_000,
        "blank lines": "x = 1\n" + (" " * 2000 + "\n") * 100 + "y = ",
    }[name]
    counting = CountingTokenizer(tok)
    p = build_prompt(counting, before, "", BUDGET, None, heal=True)
    assert len(p.ids) + len(p.healed_ids) <= BUDGET
    assert p.truncated and before.endswith(p.text[-200:])
    assert spelled(tok, list(p.ids) + list(p.healed_ids)) == p.text
    assert before[p.window_start:] == p.text or p.text.endswith(before[p.window_start:])  # imports in front
    # what was tokenized to find the window is bounded by the budget, not the document
    longest = max(len(b) for b in tok.vocab.token_bytes)
    assert counting.chars <= 2 * BUDGET * longest, counting.chars


def test_a_huge_line_above_the_cursor_is_left_out_and_the_imports_kept(tok):
    before = "import os\nx = '" + "abcdefgh " * 110_000 + "'\ny = os."
    p = build_prompt(tok, before, "", BUDGET, None)
    assert p.text == "import os\ny = os." and p.truncated


SCOPED = """import os

class Cache(Base,
            Other):
    \"\"\"doc\"\"\"

    def helper(self):
        return 1

    @property
    def get(self, key,
            default=None):  # the value
        if key:
            x = 1
""" + "".join(f"            y{i} = os.path.join(key, 'part{i}')\n" for i in range(60)) + "            return "


def test_the_headers_around_a_text_are_its_defs_and_classes_outermost_first():
    at = SCOPED.index("            x = 1")
    assert enclosing_headers(SCOPED, at) == (
        "class Cache(Base,\n            Other):\n    def get(self, key,\n            default=None):  # the value\n")
    # a sibling method above is not around the text; a module-level text has none
    assert enclosing_headers(SCOPED, SCOPED.index("        return 1")) == "class Cache(Base,\n            Other):\n    def helper(self):\n"
    assert enclosing_headers(SCOPED, SCOPED.index("class Cache")) == ""
    # a bracket continued at a smaller indentation ends the search: fewer headers, never a wrong one
    odd = "def g():\n    x = f(a,\nb)\n    y = 2\n"
    assert enclosing_headers(odd, odd.index("    y = 2")) == ""


def test_a_short_first_window_inside_a_method_keeps_its_class_and_def_lines(tok):
    p = build_prompt(tok, SCOPED, "", 200, None, step=4, scopes=True)
    assert p.truncated and p.text.startswith("import os\nclass Cache(Base,\n            Other):\n    def get(self, key,")
    assert p.text.endswith("            return ") and len(p.ids) <= 200
    plain = build_prompt(tok, SCOPED, "", 200, None, step=4)  # a full window is left as it was
    assert plain.text.startswith("import os\n            y")


def _starts(text: str) -> StatementLines:
    parser = PrefixParser()
    data = text.encode()
    parser.parse(data)
    return StatementLines.of(data, parser.statement_gaps(data))


def _begins_a_statement(before: str, at: int) -> bool:
    return line_place(before[:at]).place is Place.STATEMENT


def test_the_lines_a_window_may_start_on_are_outside_brackets_and_strings():
    text = 'import os\n# c\nx = (1,\n  2)\ns = """doc\ny = 3\n"""\n\ndef f(a,\n      b):\n    return a\nz = '
    starts = _starts(text)
    assert [starts.first_from(n, 12) for n in range(12)] == [0, 1, 2, 4, 4, 7, 7, 7, 8, 10, 10, 11]
    assert starts.first_from(11, 11) is None  # none before the cursor's line
    assert NO_STARTS.first_from(0, 3) == 0 and NO_STARTS.first_from(5, 9) is None


DOCSTRINGS = "import os\n\n" + "".join(
    f'def f{i}(path):\n    """Line one.\n\n    More words, and more.\n    Even more.\n    """\n'
    f'    return os.path.join(path, "{i}")\n\n\n' for i in range(40)) + "def last(path):\n    return "


@pytest.mark.parametrize("budget,step,scopes", [(200, 4, True), (BUDGET, 16, False), (120, 16, False)])
def test_a_window_takes_the_docstring_its_grid_line_falls_in_whole_or_starts_after_it(tok, budget, step, scopes):
    inside, whole, after = 0, 0, 0
    for end in range(len(DOCSTRINGS) // 2, DOCSTRINGS.index("def f39"), 97):  # cursors all over the second half
        before = DOCSTRINGS[:end]
        grid = build_prompt(tok, before, "", budget, None, step=step, scopes=scopes)
        p = build_prompt(tok, before, "", budget, None, step=step, scopes=scopes, starts=_starts(before))
        inside += not _begins_a_statement(before, grid.window_start)
        assert _begins_a_statement(before, p.window_start), end
        assert len(p.ids) <= budget and p.text.endswith(before[p.window_start:])
        grid_line = line_starts(before)[p.window_line]  # the anchor: the text starts by it
        whole += p.window_start < grid_line
        after += p.window_start > grid_line
        if p.window_start < grid_line:  # back to the docstring's first line: the docstring whole
            assert before[p.window_start:].lstrip(" ").startswith('"""Line one.')
    assert inside >= 3 and whole >= 1  # the grid alone starts inside docstrings
    # a docstring longer than the budget: the text starts after it
    long_doc = 'def f(x):\n    """' + "words and more words\n" * 200 + '    """\n    y = x\n    return '
    p = build_prompt(tok, long_doc, "", 120, None, step=4, starts=_starts(long_doc))
    assert p.text == "    y = x\n    return "


def test_a_cursor_inside_one_long_literal_keeps_the_grid_line(tok):
    table = "TABLE = {\n" + "".join(f"    {i}: {i * 7},\n" for i in range(400)) + "    400: "
    p = build_prompt(tok, table, "", 100, None, step=4, starts=_starts(table))
    grid = build_prompt(tok, table, "", 100, None, step=4)
    assert p.text == grid.text and p.truncated


def test_a_short_text_is_the_whole_prompt(tok):
    before = "import os\n\ndef f(x):\n    return "
    p = build_prompt(tok, before, "", BUDGET, None)
    assert not p.truncated and p.text == before and p.window_start == 0


@pytest.mark.parametrize("between_statements", [False, True])
def test_the_window_start_stays_while_typing_on_and_moving_within(tok, between_statements):
    lines = TYPING_PY.splitlines(keepends=True)
    start = 1500
    anchor, prev, changes, typed_tokens = None, None, 0, 0
    starts = _starts if between_statements else (lambda text: NO_STARTS)
    for k in range(start, start + 200):  # the user types 200 lines, one at a time
        before = "".join(lines[:k])
        p = build_prompt(tok, before, "", BUDGET, None, anchor=anchor, starts=starts(before))
        assert len(p.ids) <= BUDGET
        if prev is not None:
            typed_tokens += len(tok.encode(lines[k - 1]))
            if p.window_line != prev.window_line:
                changes += 1
                # only when the window from the previous start no longer fits
                assert len(tok.encode(before[prev.window_start:])) > BUDGET - 64
            elif between_statements:  # the text's start too: the KV cache stays usable
                assert p.window_start == prev.window_start, k
        anchor, prev = p.window_line, p
    # after a move the window leaves (1 - REFILL_SHARE) of the budget for what comes next
    assert 1 <= changes <= typed_tokens / ((1 - REFILL_SHARE) * BUDGET - 64) + 1, (changes, typed_tokens)
    # moving the cursor up within what the window holds keeps its start
    end = start + 199
    for k in range(end - 1, end - 40, -1):
        before = "".join(lines[:k])
        p = build_prompt(tok, before, "", BUDGET, None, anchor=anchor, starts=starts(before))
        if len(tok.encode(before[prev.window_start:])) >= KEEP_SHARE * BUDGET + 64:
            assert p.window_line == prev.window_line, k
        anchor, prev = p.window_line, p
    # without an anchor the same cursor gets the fullest window (the first request of a document)
    fresh = window(tok, before, BUDGET)
    assert fresh.line <= p.window_line


# --- prefill ahead, prefetch, the memory cap (scripted model: exact counts of forward tokens) --------


DOC = "import os\n\n\ndef size(path):\n    info = os.stat(path)\n    return info.st_size\n\n\ndef names(folder):\n    return "
INTENDED = DOC + "sorted(os.listdir(folder))\n"


def request(text: str = DOC) -> CompletionRequest:
    line = text.count("\n")
    return CompletionRequest.at(text, line, len(text) - (text.rfind("\n") + 1), document="file:///d.py")


def engine_of(compiled, runtime, **opts) -> CompletionEngine:
    comp, _ = compiled
    return CompletionEngine(EngineOptions(speculative=False, **opts), runtime, comp)


def test_the_engines_windows_start_between_statements_read_by_the_documents_parser(compiled):
    comp, tok = compiled
    engine = engine_of(compiled, ScriptedRuntime(tok, b"x"), context_tokens=300, first_window_tokens=120)
    starts, grid_inside = 0, 0
    for end in range(len(DOCSTRINGS) // 2, len(DOCSTRINGS), 211):
        text = DOCSTRINGS[:end]
        req = CompletionRequest.at(text, text.count("\n"), end - (text.rfind("\n") + 1), document=f"file:///w{end}.py")
        for kind in ("full", "first"):
            p = prompt_in_window(engine.parts, req, text, "", engine.options, window=kind)
            grid = build_prompt(tok, text, "", 300 if kind == "full" else 120, None, step=16 if kind == "full" else 4,
                                scopes=kind == "first")
            assert _begins_a_statement(text, p.window_start), (end, kind)
            grid_inside += not _begins_a_statement(text, grid.window_start)
            starts += 1
    assert starts >= 10 and grid_inside >= 2
    # unconstrained, there is no parser: the windows stay on their grid lines
    loose = engine.options.updated(constrained=False)
    req = CompletionRequest.at(DOCSTRINGS, DOCSTRINGS.count("\n"), 11, document="file:///loose.py")
    assert prompt_in_window(engine.parts, req, DOCSTRINGS, "", loose).window_start == build_prompt(
        tok, DOCSTRINGS, "", 300, None).window_start


def test_a_prefilled_prompt_is_not_computed_again(compiled):
    comp, tok = compiled
    plain = engine_of(compiled, ScriptedRuntime(tok, INTENDED.encode())).complete(request())
    runtime = ScriptedRuntime(tok, INTENDED.encode())
    engine = engine_of(compiled, runtime)
    out = engine.prefill(request())
    assert out.complete and out.computed == out.prompt_tokens > 10 and out.reused == 0
    computed = sum(runtime.calls)
    assert computed == out.prompt_tokens  # the prompt, in one pass (the scripted model's chunk)
    result = engine.complete(request())
    assert result.figures.prompt_reused == result.figures.prompt_tokens == out.prompt_tokens
    assert engine.prompt_cache.stats["computed_tokens"] == out.prompt_tokens
    assert result.text == plain.text == "sorted(os.listdir(folder))"  # the same completion as without it
    assert engine.prefill(request()).computed == 0  # nothing more to do


def test_a_request_stops_the_prefill_and_reuses_what_it_computed(compiled):
    comp, tok = compiled
    runtime = ScriptedRuntime(tok, INTENDED.encode(), prefill_chunk=8)
    engine = engine_of(compiled, runtime, max_tokens=4)
    stop = threading.Event()

    def cancel():  # a request arrives after the prefill's third chunk
        if len(runtime.calls) >= 3:
            stop.set()
        return stop.is_set()

    out = engine.prefill(request(), cancel)
    assert not out.complete and out.computed == 24 and sum(runtime.calls) == 24
    result = engine.complete(request())
    assert result.figures.prompt_reused == 24 < result.figures.prompt_tokens
    # every prompt token ran through the model once, before or during the request
    assert engine.prompt_cache.stats["computed_tokens"] == result.figures.prompt_tokens
    assert engine.prompt_cache.stats["reused_tokens"] == 24


def test_a_prefetched_completion_is_served_without_a_model_call(compiled):
    comp, tok = compiled
    runtime = ScriptedRuntime(tok, INTENDED.encode())
    engine = engine_of(compiled, runtime)
    ahead = engine.prefetch(request())
    assert ahead.text == "sorted(os.listdir(folder))"
    calls = len(runtime.calls)
    served = engine.complete(request())
    assert served.prefetched and served.text == ahead.text and served.start == ahead.start
    assert served.figures.prompt_tokens == 0 and len(runtime.calls) == calls
    typed = request(DOC + "sor")  # and typing its first characters serves the rest
    rest = engine.complete(typed)
    assert rest.text == "ted(os.listdir(folder))" and rest.typed_through == 3 and len(runtime.calls) == calls
    other = request(DOC + "len(")  # anything else is a new completion
    engine.complete(other)
    assert len(runtime.calls) > calls


def test_the_memory_cap_evicts_the_least_recent_documents(compiled):
    comp, tok = compiled
    cache = PromptCache(ScriptedRuntime(tok, b""))
    per_doc = 100 * CountingCache.BYTES_PER_POSITION
    cap_mb = 2.5 * per_doc / MB  # two documents fit, not three
    ids = list(range(100, 200))
    for doc in ("a", "b", "c"):
        cache.prefill(doc, ids, memory_mb=cap_mb)
    assert cache.documents() == ["b", "c"] and cache.stats["evicted"] == 1
    cache.prefill("b", ids, memory_mb=cap_mb)  # b used again: c is now the least recent
    cache.prefill("d", ids, memory_mb=cap_mb)
    assert cache.documents() == ["b", "d"]
    assert cache.memory_bytes() == 2 * per_doc <= cap_mb * MB
    # the document being filled stays even when it alone is over the cap
    cache.prefill("e", list(range(1000)), memory_mb=cap_mb)
    assert cache.documents() == ["e"]


def test_the_memory_cap_bounds_the_peak_while_a_prompt_is_computed(compiled, monkeypatch):
    """The documents a new prompt would push over the cap are evicted before it is computed."""
    comp, tok = compiled
    runtime = ScriptedRuntime(tok, b"")
    cache = PromptCache(runtime)
    held = []  # the caches' memory at each forward pass, the one being filled included
    forward = runtime.forward

    def counting_forward(ids, past=None, keep=None, cancel=None, wanted=None):
        logits, past = forward(ids, past, keep, cancel, wanted)
        held.append(cache.memory_bytes() + past.nbytes)
        return logits, past

    monkeypatch.setattr(runtime, "forward", counting_forward)
    per_doc = 100 * CountingCache.BYTES_PER_POSITION
    cap_mb = 2.5 * per_doc / MB
    for doc in ("a", "b", "c", "d"):
        cache.prefill(doc, list(range(100, 200)), memory_mb=cap_mb)
    assert cache.documents() == ["c", "d"] and max(held) <= cap_mb * MB


# --- the engine host: background work yields to requests -----------------------------------


class BackgroundEngine:
    """A stand-in engine: its prefill runs until cancelled (recording how it ended)."""

    def __init__(self, options):
        self.options = options
        self.prefills: list[str] = []
        self.started = threading.Event()

    def prefill(self, request, cancel, options=None):
        self.started.set()
        for _ in range(2000):
            if cancel():
                self.prefills.append("stopped")
                return "stopped"
            time.sleep(0.005)
        self.prefills.append("done")
        return "done"

    def complete(self, request, cancel, options=None):
        pos = request.cursor
        return CompletionResult("x", pos, pos, "line-end", "single", True)

    def describe(self):
        return {"model": "m", "device": "cpu", "store": "memory"}


async def ready_host(engine_class) -> tuple[EngineHost, list]:
    """A host whose loader makes `engine_class` engines (the list of those made), ready."""
    engines: list = []

    def loader(options, progress):
        engines.append(engine_class(options))
        return engines[-1]

    host = EngineHost(lambda s: None, loader=loader)
    host.configure(EngineOptions(model="m"))
    await until(lambda: host.ready)
    return host, engines


async def test_background_work_stops_for_a_request_and_never_runs_beside_one():
    host, engines = await ready_host(BackgroundEngine)
    idle = []
    host.on_idle(lambda: idle.append(True))
    job = asyncio.ensure_future(host.background(lambda e, o, c: e.prefill(None, c, o), "u"))
    await asyncio.to_thread(engines[0].started.wait, 10)
    req = CompletionRequest.at("x = ", 0, 4, document="u")
    result = await host.complete(req, StopSignal())
    assert result.text == "x"
    assert await job == "stopped" and engines[0].prefills == ["stopped"]
    assert idle == [True]  # the work-ahead hears that the requests are done
    # while a request is queued or running, background work does not start
    gate = threading.Event()
    engines[0].complete = lambda r, cancel, options=None: gate.wait(10) and CompletionResult(
        "y", 4, 4, "line-end", "single", True)
    running = asyncio.ensure_future(host.complete(req, StopSignal()))
    await until(lambda: host.busy, what="the request to be queued")
    assert await host.background(lambda e, o, c: e.prefill(None, c, o), "u") is None
    gate.set()
    assert (await running).text == "y"
    assert engines[0].prefills == ["stopped"]
    host.shutdown()


# --- small parts ------------------------------------------------------------------------------


def test_enter_is_predicted_as_editors_indent():
    text = "def f(x):\n    if x:\n        return 1\n"
    assert after_enter(text, 1, 9) == ("def f(x):\n    if x:\n        \n        return 1\n", 2, 8)
    assert after_enter(text, 2, 16) == ("def f(x):\n    if x:\n        return 1\n        \n", 3, 8)
    assert after_enter("x = 1  # note", 0, 13) == ("x = 1  # note\n", 1, 0)
    assert after_enter("\tif y:  # why", 0, 13) == ("\tif y:  # why\n\t\t", 1, 2)


def test_end_of_insert_and_cursor_params():
    assert end_of_insert((3, 4), "abc") == (3, 7)
    assert end_of_insert((3, 4), "a\n  bé𝔘") == (4, 6)
    assert end_of_insert((3, 4), "a\r\nb\rcd") == end_of_insert((3, 4), "a\nb\ncd") == (5, 2)
    params = {"textDocument": {"uri": "file:///a.py", "version": 2}, "position": {"line": 1, "character": 0}}
    assert parse_cursor(params) == ("file:///a.py", 2, 1, 0)
    for bad in ({}, {"textDocument": {"uri": 1}, "position": {"line": 0, "character": 0}},
                {"textDocument": {"uri": "u"}, "position": {"line": -1, "character": 0}},
                {"textDocument": {"uri": "u", "version": "2"}, "position": {"line": 0, "character": 0}}):
        with pytest.raises(ValueError):
            parse_cursor(bad)


async def test_a_typed_through_answer_does_not_wait_for_background_work():
    """The rest of a suggestion being typed through needs no model: the host answers it at once,
    and the background job holding the worker (a prefill's chunk) goes on."""
    class TypingEngine(BackgroundEngine):
        def typed_through_answer(self, request, options=None):
            pos = request.cursor
            return CompletionResult("rest", pos, pos, "line-end", "single", True, typed_through=2) if pos == 4 else None

    host, engines = await ready_host(TypingEngine)
    job = asyncio.ensure_future(host.background(lambda e, o, c: e.prefill(None, c, o), "u"))
    await asyncio.to_thread(engines[0].started.wait, 10)
    result = await host.complete(CompletionRequest.at("x = ", 0, 4, document="u"), StopSignal())
    assert result.text == "rest" and result.typed_through == 2
    assert not job.done() and engines[0].prefills == []  # still running, not stopped
    other = await host.complete(CompletionRequest.at("x = 1", 0, 5, document="u"), StopSignal())
    assert other.text == "x"  # the model's path: it stopped the background job
    assert await job == "stopped"
    host.shutdown()


def test_a_request_from_the_window_without_the_block_plans_the_one_with_it_after_the_pause():
    """Answered from the short first window, the full window is computed as soon as no request
    runs; answered from the full window without its context block, only after the user's pause
    (a keystroke would otherwise wait for the chunk it is computing)."""
    from lsp_server.server.documents import DocumentStore
    from lsp_server.server.work_ahead import WorkAhead

    class Host:
        busy, ready = False, True

        def on_idle(self, listener):
            pass

    ahead = WorkAhead(DocumentStore(), Host(), enabled=lambda: True)
    ahead.cursor("file:///a.py", None, 0, 4)  # the document the user is in (not open yet: nothing planned)
    ahead.served_short("file:///a.py", "x = 1\n", 4)
    assert [p.urgent for p in ahead._plans] == [True]
    ahead.served_short("file:///a.py", "x = 1\n", 4, urgent=False)
    assert [p.urgent for p in ahead._plans] == [False]
