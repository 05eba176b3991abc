"""Working ahead through the real server (tiny random-weight model): a `syntaxlock/cursor`
notification makes the server prefill the prompt there, which the request then reuses whole; an
accepted suggestion makes it prefetch the next one for the document after Enter, which the
request after Enter gets without running the model."""

from __future__ import annotations

import json.decoder

import pytest
import pytest_lsp
from pytest_lsp import LanguageClient

from lsp_server.options import EngineOptions
from lsp_server.positions import offset_at
from lsp_server.server.work_ahead import after_enter
from server_support import apply_item, command, config, edit, initialize, inline, items_of, open_doc
from wait_support import until

pytestmark = pytest.mark.asyncio(loop_scope="module")

SOURCE = open(json.decoder.__file__, encoding="utf-8").read()
LINES = SOURCE.splitlines(keepends=True)


@pytest_lsp.fixture(config=config(), scope="module")
async def client(lsp_client: LanguageClient, tiny_model_dir):
    # a sampling seed with which the random model ends its lines (its greedy choice runs on); no
    # latency budget: a line that outlasts it is cut and continued (tests/test_latency_budget.py),
    # and an accepted cut answer plans its continuation, not the line after Enter
    await initialize(lsp_client, {"model": str(tiny_model_dir), "maxTokens": 64, "mode": "single",
                                  "temperature": 1, "seed": 0, "latencyBudgetMs": 0})
    yield
    await lsp_client.shutdown_session()


async def status_until(client: LanguageClient, test) -> dict:
    """The server's status once `test(status)` holds."""
    async def holds():
        s = await command(client, "syntaxlock.status")
        return s if test(s) else None

    return await until(holds, what="a status")


def cursor(client: LanguageClient, uri: str, version: int, line: int, character: int) -> None:
    client.protocol.notify("syntaxlock/cursor", {"textDocument": {"uri": uri, "version": version},
                                                 "position": {"line": line, "character": character}})


def at_a_return(after_line: int) -> tuple[int, int, str]:
    """json/decoder.py cut after the `return ` of its first method-level return past
    `after_line`: (line, character, the cut text)."""
    line = next(i for i, ln in enumerate(LINES) if i > after_line and ln.startswith("        return "))
    character = len("        return ")
    return line, character, "".join(LINES[:line]) + LINES[line][:character] + "\n" + "".join(LINES[line + 1 :])


async def test_a_cursor_report_prefills_the_prompt_the_request_then_reuses(client: LanguageClient):
    line, character, text = at_a_return(after_line=200)
    uri = "file:///ahead/decoder.py"
    before = await command(client, "syntaxlock.status")
    open_doc(client, uri, text)
    cursor(client, uri, 1, line, character)
    s = await status_until(client, lambda s: s["workAhead"].get("prefill_done", 0)
                           > before["workAhead"].get("prefill_done", 0))
    computed = s["kvCache"]["computed_tokens"]
    assert computed > before["kvCache"]["computed_tokens"] + 200  # the prompt, ahead of the request
    assert s["workAhead"]["focus"] == uri
    await inline(client, uri, line, character)
    after = await command(client, "syntaxlock.status")
    assert after["kvCache"]["computed_tokens"] == computed  # nothing of the prompt computed again
    assert after["kvCache"]["reused_tokens"] >= s["kvCache"]["reused_tokens"] + 200
    # a malformed report is ignored (logged), the server goes on
    client.protocol.notify("syntaxlock/cursor", {"position": "nowhere"})
    assert (await command(client, "syntaxlock.status"))["state"] == "ready"


async def test_after_an_accept_the_suggestion_after_enter_is_prefetched(client: LanguageClient):
    found = None
    candidates = [i for i, ln in enumerate(LINES) if ln.startswith("    ") and " = " in ln]
    for n, line in enumerate(candidates[:24]):
        character = LINES[line].index(" = ") + 3
        uri = f"file:///ahead/accept_{n}.py"
        text = "".join(LINES[:line]) + LINES[line][:character] + "\n" + "".join(LINES[line + 1 :])
        open_doc(client, uri, text)
        items = items_of(await inline(client, uri, line, character))
        if items and "\n" not in items[0].insert_text:
            found = uri, text, items[0]
            break
    assert found, "no single-line suggestion to accept"
    uri, text, item = found
    r = item.range
    edit(client, uri, 2, (r.start.line, r.start.character), (r.end.line, r.end.character), item.insert_text)
    accepted = apply_item(text, item)
    before = await command(client, "syntaxlock.status")
    assert await command(client, "syntaxlock.accepted", item.command.arguments[0]) is True
    s = await status_until(client, lambda s: s["workAhead"].get("prefetch_done", 0)
                           > before["workAhead"].get("prefetch_done", 0))
    # the user presses Enter: the editor indents the new line
    end = (r.start.line, r.start.character + len(item.insert_text))
    entered, line, character = after_enter(accepted, *end)
    off = offset_at(accepted, *end)
    edit(client, uri, 3, end, end, entered[off : off + len(entered) - len(accepted)])
    await inline(client, uri, line, character)
    after = await command(client, "syntaxlock.status")
    assert after["workAhead"].get("prefetch_served", 0) == s["workAhead"].get("prefetch_served", 0) + 1
    assert after["kvCache"]["computed_tokens"] == s["kvCache"]["computed_tokens"]  # no model call


async def test_a_first_request_is_answered_from_a_short_window_and_the_full_one_follows(client: LanguageClient):
    """Opened and asked at once (no work ahead yet): the answer comes from the short first
    window, and the full window's prefill follows at once, so the next request computes nothing."""
    line, character, text = at_a_return(after_line=250)
    uri = "file:///ahead/first_window.py"
    before = await command(client, "syntaxlock.status")
    open_doc(client, uri, text)
    await inline(client, uri, line, character)

    def full_window_done(s: dict) -> bool:  # this document's: another's prefill may end meanwhile
        ahead = s["workAhead"]
        return (ahead["focus"] == uri and ahead["planned"] == 0 and not ahead["running"]
                and ahead.get("prefill_done", 0) > before["workAhead"].get("prefill_done", 0))

    s = await status_until(client, full_window_done)
    assert s["workAhead"].get("full_windows_planned", 0) == before["workAhead"].get("full_windows_planned", 0) + 1
    edit(client, uri, 2, (line, character), (line, character), "(")  # not what was suggested
    await inline(client, uri, line, character + 1)
    after = await command(client, "syntaxlock.status")
    # from the full window (more than a first window's tokens), kept from the work ahead
    assert after["kvCache"]["reused_tokens"] - s["kvCache"]["reused_tokens"] > EngineOptions().first_window_tokens
    assert after["kvCache"]["computed_tokens"] - s["kvCache"]["computed_tokens"] < 8  # the typed character
    assert after["workAhead"].get("full_windows_planned", 0) == s["workAhead"]["full_windows_planned"]
