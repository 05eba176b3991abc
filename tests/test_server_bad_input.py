"""Bad input never brings the server down: malformed params, unknown methods, documents and
commands, positions out of range, binary, huge and non-Python documents, changes that can't be
applied and invalid JSON are each answered (an LSP error or an empty result) and logged."""

from __future__ import annotations

import asyncio
import itertools
from concurrent.futures import Future

import pytest
import pytest_lsp
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.protocol.json_rpc import JsonRPCNotification, JsonRPCRequestMessage
from pytest_lsp import LanguageClient

from server_support import command, config, edit, initialize, inline, items_of, open_doc

pytestmark = pytest.mark.asyncio(loop_scope="module")

_ids = itertools.count()


@pytest_lsp.fixture(config=config(), scope="module")
async def client(lsp_client: LanguageClient, tiny_model_dir):
    await initialize(lsp_client, {"model": str(tiny_model_dir), "maxTokens": 4})
    yield
    assert lsp_client._server.returncode is None, "the server died"
    await lsp_client.shutdown_session()


async def raw_request(client: LanguageClient, method: str, params):
    """Send a request as raw JSON (the client would refuse to build a malformed one)."""
    msg_id = f"raw-{next(_ids)}"
    fut: Future = Future()
    client.protocol._request_futures[msg_id] = fut
    client.protocol._send_data(JsonRPCRequestMessage(id=msg_id, method=method, jsonrpc="2.0", params=params))
    return await asyncio.wrap_future(fut)


def raw_notify(client: LanguageClient, method: str, params) -> None:
    client.protocol._send_data(JsonRPCNotification(method=method, jsonrpc="2.0", params=params))


def logged(client: LanguageClient, *words: str) -> bool:
    return any(all(w in m.message for w in words) for m in client.log_messages)


async def alive(client: LanguageClient) -> None:
    assert (await command(client, "syntaxlock.status"))["state"] == "ready"


@pytest.mark.parametrize(
    "method, params",
    [
        (types.TEXT_DOCUMENT_INLINE_COMPLETION, {"textDocument": {"uri": 5}, "position": {"line": "x"}}),
        (types.TEXT_DOCUMENT_INLINE_COMPLETION,
         {"textDocument": {"uri": "file:///a.py"}, "position": {"line": 0, "character": -1},
                                                 "context": {"triggerKind": 1}}),
        (types.TEXT_DOCUMENT_COMPLETION, {"position": {"line": 0, "character": 0}}),
        (types.WORKSPACE_EXECUTE_COMMAND, {"command": 5}),
    ],
)
async def test_malformed_params_get_invalid_params(client: LanguageClient, method, params):
    with pytest.raises(JsonRpcException) as err:
        await raw_request(client, method, params)
    assert err.value.code == -32602
    await alive(client)


async def test_unknown_method_and_command(client: LanguageClient):
    with pytest.raises(JsonRpcException) as err:
        await raw_request(client, "syntaxlock/noSuchMethod", {})
    assert err.value.code == -32601
    with pytest.raises(JsonRpcException):
        await command(client, "syntaxlock.noSuchCommand")
    assert await command(client, "syntaxlock.accepted") is False
    assert await command(client, "syntaxlock.dismissed", {"not": "an id"}) is False
    await alive(client)


async def test_unknown_document_and_position_out_of_range(client: LanguageClient):
    assert items_of(await inline(client, "file:///never-opened.py", 0, 0)) == []
    assert logged(client, "not open", "never-opened.py")
    open_doc(client, "file:///short.py", "import os\n")
    assert items_of(await inline(client, "file:///short.py", 10_000, 0)) == []
    assert logged(client, "short.py", "outside the document")


@pytest.mark.parametrize(
    "name, language, text, why",
    [
        ("binary", "python", "import os\x00\x01\x02\nos.", "binary"),
        ("huge", "python", "x = 1\n" * (10 * 1024 * 1024 // 6 + 1), "larger than"),
        ("other", "javascript", "const x = require('fs');\nx.", "not Python"),
    ],
)
async def test_documents_without_completions(client: LanguageClient, name, language, text, why):
    uri = f"file:///{name}.py"
    open_doc(client, uri, text, language=language)
    assert items_of(await inline(client, uri, 1, 2)) == []
    assert logged(client, uri, why)
    client.text_document_did_close(types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))
    await alive(client)


async def test_changes_that_cannot_be_applied(client: LanguageClient):
    edit(client, "file:///not-open.py", 2, (0, 0), (0, 0), "x")
    uri = "file:///sync.py"
    open_doc(client, uri, "import os\n")
    edit(client, uri, 2, (50, 0), (50, 1), "x")  # outside the text: the document is out of sync
    assert items_of(await inline(client, uri, 0, 3)) == []
    assert logged(client, "not applied", "not-open.py") and logged(client, "not applied", "sync.py")
    # a whole-text change brings it back
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=3),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text="import os\nos.pa")],
        )
    )
    await inline(client, uri, 1, 5)
    await alive(client)


async def test_malformed_notifications_and_invalid_json(client: LanguageClient):
    raw_notify(client, types.TEXT_DOCUMENT_DID_OPEN, {"textDocument": {"uri": "file:///x.py"}})
    raw_notify(client, types.TEXT_DOCUMENT_DID_CHANGE, {"textDocument": 3, "contentChanges": "no"})
    raw_notify(client, types.WORKSPACE_DID_CHANGE_CONFIGURATION, {"settings": {"syntaxlock": "not an object"}})
    body = b"{this is not json"
    client._server.stdin.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    await alive(client)
