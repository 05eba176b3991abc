"""The server starts over stdio, advertises its capabilities at once, loads the engine in the
background with status and progress reports, and answers requests made before it is ready with
an empty result."""

from __future__ import annotations

import asyncio

import pytest
import pytest_lsp
import torch
from lsprotocol import types
from pytest_lsp import LanguageClient

from server_support import command, config, initialize, inline, items_of, open_doc, wait_status

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_lsp.fixture(config=config(), scope="module")
async def client(lsp_client: LanguageClient, tiny_model_dir):
    lsp_client.init_result = await initialize(
        lsp_client,
        {"model": str(tiny_model_dir), "maxTokens": 8, "temperature": "hot", "unknownEditorSetting": 1},
        wait=None,
    )
    # asked before the engine can possibly be ready (loading takes seconds)
    open_doc(lsp_client, "file:///early.py", "import os\nos.pa")
    lsp_client.early = await inline(lsp_client, "file:///early.py", 1, 5)
    lsp_client.statuses_at_early = list(lsp_client.statuses)
    await wait_status(lsp_client, "ready")
    yield
    await lsp_client.shutdown_session()


async def test_capabilities(client: LanguageClient):
    caps = client.init_result.capabilities
    assert isinstance(caps.inline_completion_provider, types.InlineCompletionOptions)
    assert caps.completion_provider is not None
    sync = caps.text_document_sync
    assert sync.change == types.TextDocumentSyncKind.Incremental and sync.open_close
    assert set(caps.execute_command_provider.commands) >= {
        "syntaxlock.accepted", "syntaxlock.dismissed", "syntaxlock.stats", "syntaxlock.status"
    }
    # the client offered UTF-8 first; the server keeps LSP's default UTF-16
    assert caps.position_encoding == types.PositionEncodingKind.Utf16
    assert client.init_result.server_info.name == "syntaxlock"


async def test_early_request_is_empty_not_an_error(client: LanguageClient):
    assert not any(s["state"] == "ready" for s in client.statuses_at_early)
    assert items_of(client.early) == []


async def test_status_progress_and_log(client: LanguageClient, tiny_model_dir):
    states = [s["state"] for s in client.statuses]
    assert states[0] == "loading" and "ready" in states
    assert all(set(s) == {"state", "message", "percentage"} for s in client.statuses)
    # work-done progress: created, begun, ended
    # the end can follow "ready" when loading finished before the client answered the token's
    # creation: wait for it (a guard, not a timing check)
    for _ in range(200):
        kinds = [r.kind for rs in client.progress_reports.values() for r in rs]
        if kinds and kinds[-1] == "end":
            break
        await asyncio.sleep(0.05)
    assert kinds[0] == "begin" and kinds[-1] == "end"
    assert any("ready" in m.message for m in client.log_messages)
    status = await command(client, "syntaxlock.status")
    assert status["state"] == "ready"
    assert set(status) >= {"state", "message", "model", "device", "store"}
    # device auto: what this machine has (lsp_server.model.runtime.pick_device)
    assert status["device"] == ("cuda" if torch.cuda.is_available() else "cpu")
    # a bad value is shown and the default kept; an unknown key is ignored without a complaint
    (shown,) = [m.message for m in client.messages if "temperature" in m.message]
    assert "hot" in shown
    assert status["settings"]["temperature"] == 0 and status["settings"]["maxTokens"] == 8
    assert not any("unknownEditorSetting" in m.message for m in client.messages)


async def test_tcp_transport_and_disabled_start(tmp_path):
    """`serve --tcp HOST:PORT` with enabled: false: capabilities at once, status "disabled",
    an empty answer, the log in --log-file (the lines sent as window/logMessage under their own
    logger) and nothing on stdout."""
    import asyncio
    import socket
    import subprocess
    import sys

    from server_support import ROOT, make_client

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log_file = tmp_path / "server.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "lsp_server.cli", "serve", "--tcp", f"127.0.0.1:{port}", "--log-file", str(log_file)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )
    try:
        client = make_client()
        for _ in range(600):  # until the server listens (a guard, not a timing check)
            try:
                await client.start_tcp("127.0.0.1", port)
                break
            except OSError:
                await asyncio.sleep(0.1)
        result = await initialize(client, {"enabled": False}, wait="disabled")
        assert isinstance(result.capabilities.inline_completion_provider, types.InlineCompletionOptions)
        open_doc(client, "file:///t.py", "import os\nos.pa")
        assert items_of(await inline(client, "file:///t.py", 1, 5)) == []
        assert (await command(client, "syntaxlock.status"))["state"] == "disabled"
        await client.shutdown_async(None)
        client.exit(None)
        await client.stop()
        assert proc.wait(timeout=60) in (0, 1)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.stdout.read() == b""
    log = log_file.read_text()
    assert "disabled" in log
    # what the client got as window/logMessage is logged under the one logger an editor that shows
    # both in one place leaves out of the server's log (the VS Code extension: serverLog.ts)
    sent = [m.message for m in client.log_messages]
    assert any("disabled" in m for m in sent)
    for m in sent:
        holding = [line for line in log.splitlines() if m in line]
        assert holding and all(line.endswith(f" lsp_server.logMessage: {m}") for line in holding), (m, holding)
