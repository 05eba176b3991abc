"""A typing burst: 200 didChange + inlineCompletion pairs in about 10 s (every tenth request also
cancelled by the client). Every request is answered (an item, an empty result for a superseded
or stale one, or -32800 for a cancelled one), the server survives, and its memory stays bounded."""

from __future__ import annotations

import asyncio
import json.decoder

import psutil
import pytest
import pytest_lsp
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import LanguageClient

from server_support import command, config, edit, initialize, inline, items_of, open_doc, send_inline

pytestmark = pytest.mark.asyncio(loop_scope="module")

REQUESTS = 200
INTERVAL_S = 0.05
MEMORY_GROWTH_LIMIT = 200 * 1024 * 1024  # bytes of RSS the burst may add
TYPED = "value = self.parse_object((s, end), strict, _scan_once, object_hook)"


@pytest_lsp.fixture(config=config(), scope="module")
async def client(lsp_client: LanguageClient, tiny_model_dir):
    await initialize(lsp_client, {"model": str(tiny_model_dir), "maxTokens": 32, "mode": "single"})
    yield
    await lsp_client.shutdown_session()


@pytest.mark.slow
async def test_burst_of_typing_is_fully_answered_with_bounded_memory(client: LanguageClient):
    lines = open(json.decoder.__file__, encoding="utf-8").read().splitlines(keepends=True)
    line = next(i for i, ln in enumerate(lines) if ln.startswith("    def decode(")) + 1
    indent = "        "
    text = "".join(lines[:line]) + indent + "\n" + "".join(lines[line:])
    uri = "file:///burst.py"
    open_doc(client, uri, text)
    await inline(client, uri, line, len(indent))  # warm up: the first run allocates the caches
    server = psutil.Process(client._server.pid)
    rss_before = server.memory_info().rss

    version, col = 1, len(indent)
    tasks, cancelled_ids = [], set()
    for n in range(REQUESTS):
        ch = TYPED[n % len(TYPED)]
        version += 1
        if n and n % len(TYPED) == 0:  # start a new line
            edit(client, uri, version, (line, col), (line, col), "\n" + indent)
            line, col = line + 1, len(indent)
            version += 1
        edit(client, uri, version, (line, col), (line, col), ch)
        col += 1
        msg_id = f"burst-{n}"
        tasks.append(await send_inline(client, uri, line, col, msg_id=msg_id))
        if n % 10 == 5:
            client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id=msg_id))
            cancelled_ids.add(n)
        await asyncio.sleep(INTERVAL_S)

    results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 300)  # hang guard
    answered = cancelled = 0
    for n, r in enumerate(results):
        if isinstance(r, JsonRpcException):
            assert r.code == -32800, r
            assert n in cancelled_ids
            cancelled += 1
        else:
            assert not isinstance(r, BaseException), r
            assert isinstance(r, types.InlineCompletionList)
            answered += 1
    assert answered + cancelled == REQUESTS
    # the last request was neither superseded nor cancelled: it ran on the final text
    final = results[-1]
    assert isinstance(final, types.InlineCompletionList)

    rss_after = server.memory_info().rss
    assert rss_after - rss_before < MEMORY_GROWTH_LIMIT, (rss_before, rss_after)
    stats = await command(client, "syntaxlock.stats")
    print(f"burst: {answered} answered, {cancelled} cancelled, stats {stats}, "
          f"rss {rss_before >> 20} -> {rss_after >> 20} MiB")
    assert stats["requests"] >= REQUESTS
    assert (await command(client, "syntaxlock.status"))["state"] == "ready"
    # and it still completes
    items_of(await inline(client, uri, line, col))
