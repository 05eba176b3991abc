"""Helpers for the language-server tests: the server command, a pytest-lsp client that records
`syntaxlock/status` notifications, and small wrappers for the requests the tests make."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient
from pytest_lsp.client import make_test_lsp_client

ROOT = Path(__file__).resolve().parents[1]
READY_TIMEOUT_S = 300  # a guard against hangs (the first start builds the mask store), not a timing check


def server_command(*extra: str) -> list[str]:
    return [sys.executable, "-m", "lsp_server.cli", "serve", "--log-level", "INFO", *extra]


def make_client() -> LanguageClient:
    client = make_test_lsp_client()
    client.statuses = []  # every syntaxlock/status notification, in order
    client.status_changed = asyncio.Event()

    @client.feature("syntaxlock/status")
    def _status(ls: LanguageClient, params):
        # pygls gives the params of a method it has no type for as a namedtuple
        value = params if isinstance(params, dict) else params._asdict()
        ls.statuses.append(dict(value))
        ls.status_changed.set()

    return client


def config(*extra: str) -> ClientServerConfig:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return ClientServerConfig(server_command=server_command(*extra), client_factory=make_client, server_env=env)


CAPABILITIES = types.ClientCapabilities(
    general=types.GeneralClientCapabilities(
        position_encodings=[types.PositionEncodingKind.Utf8, types.PositionEncodingKind.Utf16]
    ),
    window=types.WindowClientCapabilities(work_done_progress=True, show_message=None),
    workspace=types.WorkspaceClientCapabilities(configuration=True, execute_command=None),
    text_document=types.TextDocumentClientCapabilities(
        inline_completion=types.InlineCompletionClientCapabilities(dynamic_registration=False),
        completion=types.CompletionClientCapabilities(),
        synchronization=types.TextDocumentSyncClientCapabilities(),
    ),
)


async def initialize(
    client: LanguageClient, options: dict | None, wait: str | None = "ready"
) -> types.InitializeResult:
    result = await client.initialize_session(
        types.InitializeParams(capabilities=CAPABILITIES, initialization_options=options)
    )
    if wait:
        await wait_status(client, wait)
    return result


async def wait_status(client: LanguageClient, state: str, after: int = 0, timeout: float = READY_TIMEOUT_S) -> dict:
    """The first status with `state` among the notifications from index `after` on."""

    async def _wait():
        seen = after
        while True:
            for s in client.statuses[seen:]:
                if s["state"] == state:
                    return s
                if s["state"] == "error" and state != "error":
                    raise AssertionError(f"the server reports an error: {s['message']}")
            seen = len(client.statuses)
            client.status_changed.clear()
            await client.status_changed.wait()

    return await asyncio.wait_for(_wait(), timeout)


def open_doc(client: LanguageClient, uri: str, text: str, version: int = 1, language: str = "python") -> None:
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id=language, version=version, text=text)
        )
    )


def edit(
    client: LanguageClient, uri: str, version: int, start: tuple[int, int], end: tuple[int, int], text: str
) -> None:
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[
                types.TextDocumentContentChangePartial(
                    range=types.Range(types.Position(*start), types.Position(*end)), text=text
                )
            ],
        )
    )


async def send_inline(client: LanguageClient, uri: str, line: int, character: int,
                      selected: types.SelectedCompletionInfo | None = None, msg_id: str | None = None) -> asyncio.Task:
    """Send an inlineCompletion request now (before any message sent after this returns);
    await the returned task for its result."""
    params = types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri),
        position=types.Position(line, character),
        context=types.InlineCompletionContext(
            trigger_kind=types.InlineCompletionTriggerKind.Automatic, selected_completion_info=selected
        ),
    )
    # pytest-lsp sends a request when its coroutine first runs: run it up to there
    task = asyncio.ensure_future(
        client.protocol.send_request_async(types.TEXT_DOCUMENT_INLINE_COMPLETION, params, msg_id=msg_id)
    )
    await asyncio.sleep(0)
    return task


async def inline(client: LanguageClient, uri: str, line: int, character: int,
                 selected: types.SelectedCompletionInfo | None = None):
    """The inlineCompletion result."""
    return await (await send_inline(client, uri, line, character, selected))


def items_of(result) -> list[types.InlineCompletionItem]:
    if result is None:
        return []
    return list(result.items if isinstance(result, types.InlineCompletionList) else result)


def apply_item(text: str, item) -> str:
    """The document after accepting an inline item (its range replaced by its insertText)."""
    from lsp_server.positions import offset_at

    r = item.range
    a = offset_at(text, r.start.line, r.start.character)
    b = offset_at(text, r.end.line, r.end.character)
    insert = item.insert_text if isinstance(item.insert_text, str) else item.insert_text.value
    return text[:a] + insert + text[b:]


async def command(client: LanguageClient, name: str, *args):
    return await client.workspace_execute_command_async(types.ExecuteCommandParams(command=name, arguments=list(args)))
