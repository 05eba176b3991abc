"""A local server on a team server (lsp_server/team/remote_engine.py, client.py), against a
stand-in for vLLM's completions API: a scripted model whose logits go through the team
processor's `GrammarBatch`, one greedy step at a time, as vLLM runs it. The team engine
answers as the local engine does with the same model; a team server that is down or slow
gives an empty answer and an error status, and the next answer once it is back clears it."""

from __future__ import annotations

import threading

import pytest
from scripted_model import ScriptedRuntime
from team_support import StandIn

from lsp_server.decoding.budget import Budget
from lsp_server.decoding.engine import CompletionEngine, CompletionRequest
from lsp_server.options import EngineOptions, OptionError
from lsp_server.server.engine_host import EngineHost
from lsp_server.team.client import BACKOFF_S, TeamClient
from lsp_server.team.remote_engine import TeamEngine
from lsp_server.team.rows import TeamGrammar


@pytest.fixture(scope="module")
def grammar(compiled):
    return TeamGrammar(compiled[0])


@pytest.fixture
def stand_in(grammar):
    s = StandIn(grammar)
    yield s
    s.close()


OPTS = dict(speculative=False, canonical=True, identifiers="off")

# (document with the cursor at "|", what the scripted model wants to write there)
CASES = [
    ("import os\n\ndef join(a):\n    return os.pa|\n", "th.join(a, 'x')\n"),
    ("def area(w, h):\n    |\n", "return w * h\n"),
    ("class Box:\n    def __init__(self, w):\n|\n", "        self.w = w\n        self.h = 2 * w\n\n"),
    ("total = sum(x for x in range(10) if |)\n", "x % 2)\n"),
    ("name = 'a'\nprint(f'hi {na|')\n", "me}')\n"),
]


def _request(doc: str, **fields) -> CompletionRequest:
    off = doc.index("|")
    return CompletionRequest(doc[:off] + doc[off + 1 :], cursor=off, document="file:///w.py", **fields)


def _local(compiled, doc: str, intended: str):
    comp, tok = compiled
    req = _request(doc)
    runtime = ScriptedRuntime(tok, (req.text[: req.cursor] + intended).encode())
    return CompletionEngine(EngineOptions(**OPTS), runtime, comp).complete(req)


def _team(compiled, url: str, clock=None) -> TeamEngine:
    comp, tok = compiled
    client = TeamClient(url) if clock is None else TeamClient(url, clock=clock)
    return TeamEngine(EngineOptions(team_server=url, **OPTS), comp, tok, client)


@pytest.mark.parametrize("doc,intended", CASES)
def test_the_team_engine_answers_as_the_local_engine(compiled, stand_in, doc, intended):
    comp, tok = compiled
    req = _request(doc)
    stand_in.runtime = ScriptedRuntime(tok, (req.text[: req.cursor] + intended).encode())
    team = _team(compiled, stand_in.url).complete(req)
    local = _local(compiled, doc, intended)
    assert (team.text, team.stop_reason, team.end) == (local.text, local.stop_reason, local.end)
    assert team.token_ids == local.token_ids
    assert team.text, "each case has an answer"
    sent = stand_in.seen[0]
    assert sent["document"] == "file:///w.py"  # the router's affinity key
    assert "syntaxlock" in sent["body"]["vllm_xargs"]


def test_a_team_server_that_is_down_gives_an_empty_answer_then_recovers(compiled, grammar):
    comp, tok = compiled
    probe = StandIn(grammar)
    port = probe.port
    probe.close()  # nothing listens there now
    now = [0.0]
    engine = _team(compiled, f"http://127.0.0.1:{port}", clock=lambda: now[0])
    doc, intended = CASES[1]
    req = _request(doc)
    down = engine.complete(req)
    assert down.text == ""
    state, message = engine.status_change()
    assert state == "error" and "does not answer" in message
    assert engine.status_change() is None  # said once
    # while backing off, no network: refused at once, still empty
    assert engine.complete(req).text == ""
    back = StandIn(grammar, port)
    try:
        back.runtime = ScriptedRuntime(tok, (req.text[: req.cursor] + intended).encode())
        now[0] += BACKOFF_S[1] + 1
        answer = engine.complete(req)
        assert answer.text.startswith("return w * h")
        state, _ = engine.status_change()
        assert state == "ready"
    finally:
        back.close()


def test_a_slow_team_server_is_not_waited_for_past_the_budget(compiled, stand_in):
    comp, tok = compiled
    doc, intended = CASES[1]
    req = _request(doc, budget=Budget.of(150))
    stand_in.runtime = ScriptedRuntime(tok, (req.text[: req.cursor] + intended).encode())
    stand_in.delay = 30.0
    engine = _team(compiled, stand_in.url)
    result = engine.complete(req)
    stand_in.release.set()
    assert result.text == ""
    assert "no answer within" in engine.client.last_error
    assert engine.client.available()  # reached but busy: no back-off, the next request goes out


def test_the_work_ahead_has_the_team_server_prefill_the_prompt(compiled, stand_in):
    comp, tok = compiled
    doc, intended = CASES[0]
    req = _request(doc)
    stand_in.runtime = ScriptedRuntime(tok, (req.text[: req.cursor] + intended).encode())
    engine = _team(compiled, stand_in.url)
    assert engine.prefill(req).complete
    for _ in range(600):  # the warming call runs on a thread of its own
        if engine.calls["warmed"]:
            break
        threading.Event().wait(0.05)
    warm = stand_in.seen[-1]["body"]
    assert warm["max_tokens"] == 1 and "vllm_xargs" not in warm
    assert engine.complete(req).text  # the request itself as usual
    assert stand_in.seen[-1]["body"]["prompt"] == warm["prompt"]  # the same prompt: in vLLM's prefix cache


def test_the_budget_ends_the_stream_at_the_longest_valid_stop(compiled, stand_in):
    """A team server that stalls after the answer's first line: at the end of the budget the call
    keeps what came, offers its longest valid stop (the complete line) and says the budget cut
    it (the rest is then decoded in the background, as for a local answer the budget cut)."""
    comp, tok = compiled
    doc, intended = CASES[2]
    req = _request(doc, budget=Budget.of(2000))
    stand_in.runtime = ScriptedRuntime(tok, (req.text[: req.cursor] + intended).encode())
    stand_in.stall_after = len(tok.encode("        self.w = w\n"))
    result = _team(compiled, stand_in.url).complete(req)
    stand_in.release.set()
    assert result.budget_cut and result.stop_reason == "budget"
    assert result.text == "        self.w = w"


def test_the_host_reports_the_team_servers_health():
    seen = []
    host = EngineHost(seen.append, loader=lambda options, progress: None)

    class Engine:
        changes = [("error", "the team server does not answer"), None]

        def status_change(self):
            return self.changes.pop(0)

    engine = Engine()
    host._engine = engine
    host._engine_health(engine)
    host._engine_health(engine)
    assert [(s.state, s.message) for s in seen] == [("error", "the team server does not answer")]


def test_the_team_server_setting_is_an_http_url():
    assert EngineOptions(team_server="http://gpu-box:8000").validated().team_server == "http://gpu-box:8000"
    for bad in ("gpu-box:8000", "ftp://x", "http://", 8000, "http://h:99999"):
        with pytest.raises(OptionError, match="team_server"):
            EngineOptions(team_server=bad).validated()
    assert EngineOptions().needs_reload(EngineOptions(team_server="http://h:1"))
