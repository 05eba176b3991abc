"""Cancellation: `$/cancelRequest` answers -32800 and stops the engine early; a newer request for
the same document supersedes the older one; a document change makes a running request stale."""

from __future__ import annotations

import asyncio
import json.decoder
import re

import pytest
import pytest_lsp
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import LanguageClient

from server_support import command, config, edit, initialize, items_of, open_doc, send_inline
from wait_support import until

pytestmark = pytest.mark.asyncio(loop_scope="module")

MAX_TOKENS = 1000  # long runs (~2 s with speculation): a request is still decoding when the cancel arrives
SOURCE = open(json.decoder.__file__, encoding="utf-8").read()


def long_document() -> tuple[str, int, int]:
    """json/decoder.py with the cursor after the last `return ` (the rest of that line cut)."""
    lines = SOURCE.splitlines(keepends=True)
    i = max(n for n, ln in enumerate(lines) if re.match(r"^\s+return \S", ln))
    col = lines[i].index("return ") + len("return ")
    return "".join(lines[:i]) + lines[i][:col] + "\n" + "".join(lines[i + 1 :]), i, col


def stop_logs(client: LanguageClient, uri: str) -> list[str]:
    return [m.message for m in client.log_messages if m.message.startswith(f"completion in {uri} stopped")]


async def wait_stop_logs(client: LanguageClient, uri: str, n: int = 1) -> list[str]:
    """The first `n` "stopped" log lines of `uri`, once the server has written them."""
    await until(lambda: len(stop_logs(client, uri)) >= n, what=f"{n} stop logs of {uri}")
    return stop_logs(client, uri)[:n]


async def taken(client: LanguageClient, before: int) -> bool:
    """Whether the server has taken a request since its request count was `before`."""
    return (await command(client, "syntaxlock.stats"))["requests"] > before


async def send_taken(client: LanguageClient, uri: str, line: int, character: int, msg_id: str | None = None):
    """Send an inline request and return its task once the server has taken it (it is running
    or queued for the engine)."""
    before = (await command(client, "syntaxlock.stats"))["requests"]
    pending = await send_inline(client, uri, line, character, msg_id=msg_id)
    await until(lambda: taken(client, before), what="the server to take the request")
    return pending


def steps_of(message: str) -> int:
    m = re.search(r"after (\d+) decoding steps", message)
    return int(m.group(1)) if m else 0


@pytest_lsp.fixture(config=config(), scope="module")
async def client(lsp_client: LanguageClient, tiny_model_dir):
    await initialize(lsp_client, {"model": str(tiny_model_dir), "maxTokens": MAX_TOKENS, "mode": "multi"})
    yield
    await lsp_client.shutdown_session()


async def test_cancel_request_answers_32800_and_stops_the_engine(client: LanguageClient):
    text, line, col = long_document()
    uri = "file:///cancel.py"
    open_doc(client, uri, text)
    pending = await send_taken(client, uri, line, col, msg_id="cancel-me")
    client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id="cancel-me"))
    with pytest.raises(JsonRpcException) as err:
        await pending
    assert err.value.code == -32800
    (stopped,) = await wait_stop_logs(client, uri)
    assert "(cancelled)" in stopped
    assert steps_of(stopped) < MAX_TOKENS
    stats = await command(client, "syntaxlock.stats")
    assert stats["cancelled"] >= 1


async def test_newer_request_supersedes_older(client: LanguageClient):
    text, line, col = long_document()
    uri = "file:///supersede.py"
    open_doc(client, uri, text)
    before = await command(client, "syntaxlock.stats")
    older = await send_taken(client, uri, line, col)
    newer = await send_inline(client, uri, line - 1, 0)  # another position in the same document
    assert items_of(await older) == []
    (stopped,) = await wait_stop_logs(client, uri)
    assert "(superseded)" in stopped and steps_of(stopped) < MAX_TOKENS
    after = await command(client, "syntaxlock.stats")
    assert after["superseded"] == before["superseded"] + 1
    edit(client, uri, 2, (0, 0), (0, 0), "# edited\n")  # ends the newer run too (stale)
    assert items_of(await newer) == []


async def test_change_makes_running_request_stale(client: LanguageClient):
    text, line, col = long_document()
    uri = "file:///stale.py"
    open_doc(client, uri, text)
    pending = await send_taken(client, uri, line, col)
    edit(client, uri, 2, (0, 0), (0, 0), "# edited\n")
    assert items_of(await pending) == []  # answered at once, before the engine has stopped
    (stopped,) = await wait_stop_logs(client, uri)
    assert "(superseded)" in stopped


async def test_other_documents_are_not_superseded(client: LanguageClient):
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"syntaxlock": {"maxTokens": 8}})
    )
    text, line, col = long_document()
    for uri in ("file:///a.py", "file:///b.py"):
        open_doc(client, uri, text)
    before = await command(client, "syntaxlock.stats")
    a = await send_inline(client, "file:///a.py", line, col)
    b = await send_inline(client, "file:///b.py", line, col)
    await asyncio.gather(a, b)
    after = await command(client, "syntaxlock.stats")
    assert after["superseded"] == before["superseded"]
    assert not stop_logs(client, "file:///a.py") and not stop_logs(client, "file:///b.py")
