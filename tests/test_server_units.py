"""The server's parts without a server: the document store (UTF-16 incremental edits, refused
documents), the settings (camelCase names, bad values kept), telemetry (counts, the shared file)
and the engine host (background loading, a failing reload, superseding, cancellation) with a
stand-in engine."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time

import pytest

from lsp_server.decoding.results import CompletionRequest, CompletionResult, Figures
from lsp_server.server.documents import MAX_DOCUMENT_BYTES, DocumentError, DocumentStore
from lsp_server.server.engine_host import EngineHost, Status
from lsp_server.server.runs import Runs, StopSignal
from lsp_server.options import EngineOptions
from lsp_server.server.settings import ENGINE_KEYS, ServerOptions
from lsp_server.server.telemetry import Telemetry, read_totals

from wait_support import until, wait_for

# --- documents -----------------------------------------------------------------------------------


def test_incremental_edits_count_utf16_units():
    docs = DocumentStore()
    docs.open("u", "python", 1, 'x = "𝔘"\ny = 1\n')
    # after the astral character (2 UTF-16 units) and the closing quote: character 8
    docs.change("u", 2, [(((0, 8), (0, 8)), " + 'é'")])
    assert docs.get("u").text == 'x = "𝔘" + \'é\'\ny = 1\n'
    docs.change("u", 3, [(((1, 0), (1, 1)), "zz"), (((0, 0), (0, 1)), "w")])
    assert docs.get("u").text == 'w = "𝔘" + \'é\'\nzz = 1\n'
    assert docs.version("u") == 3
    docs.change("u", 4, [(None, "whole\n")])
    assert docs.get("u").text == "whole\n" and docs.get("u").refused is None


def test_crlf_and_line_end_clamp():
    docs = DocumentStore()
    docs.open("u", "python", 1, "ab\r\ncd")
    docs.change("u", 2, [(((0, 99), (0, 99)), "!")])  # past the line's end: clamped before \r\n
    assert docs.get("u").text == "ab!\r\ncd"


def test_refused_documents():
    docs = DocumentStore()
    assert "not Python" in docs.open("js", "javascript", 1, "x").refused
    assert "binary" in docs.open("bin", "python", 1, "a\x00b").refused
    huge = docs.open("big", "python", 1, "#" * (MAX_DOCUMENT_BYTES + 1))
    assert "larger than" in huge.refused and huge.text == ""  # memory is not kept
    docs.change("big", 2, [(None, "x = 1\n")])
    assert docs.get("big").refused is None and docs.get("big").text == "x = 1\n"
    docs.change("bin", 2, [(((0, 1), (0, 2)), "")])  # the NUL removed
    assert docs.get("bin").refused is None


def test_change_outside_the_text_leaves_the_document_out_of_sync():
    docs = DocumentStore()
    docs.open("u", "python", 1, "a\n")
    with pytest.raises(DocumentError):
        docs.change("u", 2, [(((5, 0), (5, 0)), "x")])
    assert docs.get("u").refused.startswith("out of sync")
    docs.change("u", 3, [(((0, 0), (0, 0)), "x")])  # ignored until the whole text comes
    assert docs.get("u").refused.startswith("out of sync")
    docs.change("u", 4, [(None, "b\n")])
    assert docs.get("u").refused is None and docs.get("u").text == "b\n"
    with pytest.raises(DocumentError):
        docs.change("nope", 1, [(None, "")])


# --- settings ------------------------------------------------------------------------------------


def test_every_engine_option_has_a_camel_case_setting():
    assert set(ENGINE_KEYS.values()) == {f.name for f in dataclasses.fields(EngineOptions)}


def test_settings_merge():
    opts, problems = ServerOptions().merged({"syntaxlock": {"maxTokens": 16.0, "topP": 0.5, "enabled": False,
                                                            "editorOnly": "ignored"}})
    assert problems == []
    assert (opts.engine.max_tokens, opts.engine.top_p, opts.enabled) == (16, 0.5, False)
    again, problems = opts.merged({"maxTokens": 0, "mode": "multi", "completionItems": 1})
    assert again.engine.max_tokens == 16 and again.engine.mode == "multi" and again.completion_items is True
    assert len(problems) == 2 and "syntaxlock.maxTokens" in problems[0] and "keeping 16" in problems[0]
    reset, problems = again.merged({"maxTokens": None, "store": None})
    assert reset.engine.max_tokens == EngineOptions().max_tokens and problems == []
    assert ServerOptions().merged(None) == (ServerOptions(), [])
    assert ServerOptions().merged([1])[1]
    assert ServerOptions().to_json()["contextTokens"] == EngineOptions().context_tokens


# --- telemetry -----------------------------------------------------------------------------------


def test_telemetry_counts_and_shared_file(tmp_path):
    path = tmp_path / "telemetry.json"
    a, b = Telemetry(path), Telemetry(path)
    ids = [a.shown(100.0), a.shown(300.0)]
    assert len(set(ids)) == 2
    assert a.accepted(ids[0]) and not a.accepted(ids[0]) and not a.dismissed(ids[0])
    assert a.dismissed(ids[1]) and not a.accepted("nope") and not a.accepted(None)
    a.count("superseded")
    s = a.stats()
    assert (s["shown"], s["accepted"], s["dismissed"], s["acceptRate"], s["meanLatencyMs"]) == (2, 1, 1, 0.5, 200.0)
    b.shown(50.0)
    a.flush(), b.flush(), a.flush()  # a second flush adds nothing new
    totals = read_totals(path)
    assert (totals["shown"], totals["accepted"], totals["superseded"]) == (3, 1, 1)
    assert totals["meanLatencyMs"] == 150.0
    path.write_text("not json")
    assert read_totals(path)["shown"] == 0
    a.shown(10.0)
    a.flush()
    assert read_totals(path)["shown"] == 1


def test_cli_stats(tmp_path, monkeypatch, capsys):
    import json

    from lsp_server.cli import main

    monkeypatch.setenv("SYNTAXLOCK_CACHE", str(tmp_path))
    t = Telemetry()
    t.accepted(t.shown(42.0))
    t.flush()
    assert main(["stats"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["accepted"] == 1 and out["file"] == str(tmp_path / "telemetry.json")


# --- engine host ---------------------------------------------------------------------------------


class StandInEngine:
    """Decodes `steps` steps of 10 ms, polling `cancel` between them like the real engine."""

    def __init__(self, options: EngineOptions, steps: int = 50) -> None:
        self.options, self.steps, self.forgotten = options, steps, []
        self.ran = []
        self.started = 0  # runs begun, for the tests to wait on

    def complete(self, request: CompletionRequest, cancel, options=None) -> CompletionResult:
        pos = request.cursor
        self.started += 1
        for i in range(self.steps):
            if cancel():
                self.ran.append(("cancelled", i))
                return CompletionResult("", pos, pos, "cancelled", "single", True, figures=Figures(tokens_generated=i))
            time.sleep(0.01)
        self.ran.append(("done", (options or self.options).max_tokens))
        return CompletionResult("x", pos, pos, "line-end", "single", True, figures=Figures(tokens_generated=self.steps))

    def forget(self, uri):
        self.forgotten.append(uri)

    def describe(self):
        return {"model": self.options.model, "device": "cpu", "store": "memory"}


def make_host(fail: set[str] = frozenset(), gate: threading.Event | None = None):
    statuses: list[Status] = []
    loaded: list[StandInEngine] = []

    def loader(options, progress):
        progress("loading the model", 0.25)
        if gate is not None:
            gate.wait(10)
        if options.model in fail:
            raise RuntimeError(f"no model at {options.model}")
        loaded.append(StandInEngine(options))
        return loaded[-1]

    host = EngineHost(statuses.append, loader=loader)
    return host, statuses, loaded


def test_host_loads_in_the_background_and_reports():
    gate = threading.Event()
    host, statuses, _ = make_host(gate=gate)
    host.configure(EngineOptions(model="m1"))
    assert not host.ready and host.status.state == "loading"  # configure did not block
    gate.set()
    wait_for(lambda: host.ready)
    wait_for(lambda: statuses[-1].state == "ready")
    assert [s.state for s in statuses][:2] == ["loading", "loading"] and statuses[1].percentage == 25
    assert host.describe()["model"] == "m1"
    host.configure(EngineOptions(model="m1"), enabled=False)
    assert not host.ready and statuses[-1].state == "disabled"
    host.shutdown()


def test_host_failed_reload_keeps_the_engine_in_use():
    host, statuses, loaded = make_host(fail={"bad"})
    host.configure(EngineOptions(model="good"))
    wait_for(lambda: host.ready)
    host.configure(EngineOptions(model="bad", max_tokens=7))
    wait_for(lambda: statuses[-1].reverted is not None)
    assert statuses[-1].state == "ready" and "no model at bad" in statuses[-1].message
    assert statuses[-1].reverted.model == "good" and statuses[-1].reverted.max_tokens == 7
    assert host.ready and len(loaded) == 1 and host.desired.model == "good"
    host.shutdown()
    fresh, statuses, _ = make_host(fail={"bad"})
    fresh.configure(EngineOptions(model="bad"))
    wait_for(lambda: statuses[-1].state == "error")
    assert not fresh.ready
    fresh.shutdown()


async def test_host_superseding_and_cancellation():
    host, _, loaded = make_host()
    host.configure(EngineOptions(model="m"))
    await until(lambda: host.ready)
    req = CompletionRequest.at("x = ", 0, 4, document="u")
    runs = Runs()

    def complete(stop):
        return host.complete(req, stop)

    # a newer run of the same document stops the older one within a step
    r1 = runs.start("u", 1, complete)
    await until(lambda: loaded[0].started == 1, what="the first run to begin")
    r2 = runs.start("u", 2, complete)
    assert r1.signal.superseded and r1.stopped() and not r2.stopped()
    first = await r1.task
    assert first.stop_reason == "cancelled" and first.figures.tokens_generated < 50
    # another document is not touched
    other = runs.start("v", 1, lambda stop: asyncio.sleep(0))
    assert not r2.stopped() and not other.stopped()
    assert (await r2.task).text == "x"
    # cancelling the awaiting task stops its run
    stop = StopSignal()
    task = asyncio.ensure_future(host.complete(req, stop))
    await until(lambda: loaded[0].started == 3, what="the third run to begin")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert stop.is_set() and not stop.superseded
    await until(lambda: loaded[0].ran[-1][0] == "cancelled")
    # options that need no reload reach the next run without a new engine
    host.configure(EngineOptions(model="m", max_tokens=9))
    await host.complete(req, StopSignal())
    assert loaded[0].ran[-1] == ("done", 9) and len(loaded) == 1
    host.forget("u")
    assert loaded[0].forgotten == ["u"]
    host.shutdown()


async def test_a_request_joins_a_run_only_when_it_asks_the_same_and_can_be_answered():
    """`joins`: the same request, not stopped, and running or done with a result that was not
    cut by the budget; `Run.running`: not finished, not stopped."""
    from lsp_server.server.suggester import joins

    gate = asyncio.Event()

    async def run_of(result=None, done=True, asks=("k",)):
        async def work(stop):
            if not done:
                await gate.wait()
            return result

        run = Runs().start("u", asks, work)
        if done:
            await run.task
        return run

    answer = CompletionResult("1", 4, 4, "eos", "single", True)
    assert joins(await run_of(answer), ("k",)) and not joins(await run_of(answer), ("other",))
    assert not joins(None, ("k",))
    assert not joins(await run_of(None), ("k",))  # stopped or failed: no result to give again
    assert not joins(await run_of(dataclasses.replace(answer, budget_cut=True)), ("k",))
    running = await run_of(done=False)
    assert joins(running, ("k",)) and running.running()
    running.stop()
    assert not joins(running, ("k",)) and not running.running()
    cancelled = await run_of(done=False)
    cancelled.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled.task
    assert not joins(cancelled, ("k",)) and not cancelled.running()
    assert not (await run_of(answer)).running()
    gate.set()


def test_cli_serve_arguments():
    from lsp_server.cli import build_parser

    ap = build_parser()
    args = ap.parse_args(["serve"])
    assert (args.tcp, args.log_level, args.log_file) == (None, "INFO", None)
    assert ap.parse_args(["serve", "--tcp", "127.0.0.1:2087", "--log-level", "debug"]).tcp == "127.0.0.1:2087"
    for bad in (["serve", "--tcp", "nohost"], ["serve", "--tcp", "h:99999"], ["serve", "--stdio", "--tcp", "h:1"],
                ["serve", "--log-level", "LOUD"]):
        with pytest.raises(SystemExit):
            ap.parse_args(bad)
