"""Inline completion through the real server (tiny random-weight model): on a real stdlib file
the item's acceptance leaves the file parseable; the one-item completion carries the same
suggestion; a selected completion item is extended; acceptance telemetry counts."""

from __future__ import annotations

import json.decoder
import re

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import LanguageClient

from server_support import apply_item, command, config, edit, initialize, inline, items_of, open_doc

from grammar_tools.parsing.cpython_check import compiles

pytestmark = pytest.mark.asyncio(loop_scope="module")

SOURCE = open(json.decoder.__file__, encoding="utf-8").read()
LINES = SOURCE.splitlines(keepends=True)


def cut_points(limit: int = 8) -> list[tuple[int, int]]:
    """(line, character) right after the first name of `return NAME` / `x = NAME` statements
    inside functions: the name may go on, or the line may end there."""
    out = []
    for i, ln in enumerate(LINES):
        m = re.match(r"^(\s{4,}(?:return |\w+ = ))([A-Za-z_]\w*)\b", ln)
        if m:
            out.append((i, m.end()))
    step = max(1, len(out) // limit)
    return out[::step][:limit]


def document_cut_at(line: int, character: int) -> str:
    """The file as it is while typing: the cursor's line ends at the cursor."""
    return "".join(LINES[:line]) + LINES[line][:character] + "\n" + "".join(LINES[line + 1 :])


@pytest_lsp.fixture(config=config(), scope="module")
async def client(lsp_client: LanguageClient, tiny_model_dir):
    await initialize(lsp_client, {"model": str(tiny_model_dir), "maxTokens": 12, "mode": "single"})
    yield
    await lsp_client.shutdown_session()


async def test_inline_item_on_stdlib_file_parses_after_accept(client: LanguageClient):
    shown = []
    for n, (line, character) in enumerate(cut_points()):
        uri = f"file:///stdlib/decoder_{n}.py"
        text = document_cut_at(line, character)
        open_doc(client, uri, text)
        for item in items_of(await inline(client, uri, line, character)):
            assert item.range.start == types.Position(line, character)
            assert item.command.command == "syntaxlock.accepted"
            assert isinstance(item.command.arguments[0], str)
            accepted = apply_item(text, item)
            assert compiles(accepted)  # the completion left the file valid
            shown.append(item.command.arguments[0])
            # the editor applies it and reports the acceptance
            r = item.range
            edit(client, uri, 2, (r.start.line, r.start.character), (r.end.line, r.end.character), item.insert_text)
            assert await command(client, "syntaxlock.accepted", item.command.arguments[0]) is True
    assert shown, "no cut point got a suggestion"
    assert len(set(shown)) == len(shown)
    stats = await command(client, "syntaxlock.stats")
    assert stats["shown"] >= len(shown) and stats["accepted"] == len(shown)
    assert 0 < stats["acceptRate"] <= 1 and stats["meanLatencyMs"] > 0


async def first_suggestion(client: LanguageClient, tag: str):
    """The first cut point with an inline item: (uri, text, line, character, item)."""
    for n, (line, character) in enumerate(cut_points()):
        uri = f"file:///stdlib/decoder_{tag}_{n}.py"
        text = document_cut_at(line, character)
        open_doc(client, uri, text)
        items = items_of(await inline(client, uri, line, character))
        if items:
            return uri, text, line, character, items[0]
    raise AssertionError("no cut point got a suggestion")


async def test_completion_item_is_the_same_suggestion(client: LanguageClient):
    uri, text, line, character, inline_item = await first_suggestion(client, "same")
    listing = await client.text_document_completion_async(
        types.CompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line, character)
        )
    )
    assert listing.is_incomplete
    (item,) = listing.items
    assert item.text_edit.new_text == inline_item.insert_text
    assert item.text_edit.range == inline_item.range
    # one engine run served both requests: the same suggestion id
    assert item.command.arguments == inline_item.command.arguments


async def test_selected_completion_item_is_extended(client: LanguageClient):
    uri, text, line, character, plain = await first_suggestion(client, "selected")
    # the editor's completion list has a longer name selected for the name before the cursor
    start = character - len(re.search(r"\w+$", LINES[line][:character]).group())
    name = LINES[line][start:character]
    selected = types.SelectedCompletionInfo(
        range=types.Range(types.Position(line, start), types.Position(line, character)), text=name + "_chosen"
    )
    items = items_of(await inline(client, uri, line, character, selected))
    assert items
    for item in items:
        assert item.insert_text.startswith(name + "_chosen")
        assert item.range.start == selected.range.start and item.range.end.line == line
        assert item.range.end.character >= character
        assert compiles(apply_item(text, item))
    # without the selection, the same position completes the shorter name
    assert not plain.insert_text.startswith("_chosen")


async def test_non_ascii_line_uses_utf16_positions(client: LanguageClient):
    # "𝔘" is outside the BMP: two UTF-16 code units, one Python character
    prefix = 'x = "𝔘é" + object_pairs_hook'
    text = prefix + "\n"
    uri = "file:///utf16.py"
    open_doc(client, uri, text)
    col = len(prefix.encode("utf-16-le")) // 2
    assert col == len(prefix) + 1
    items = items_of(await inline(client, uri, 0, col))
    for item in items:
        assert item.range.start == types.Position(0, col)
        accepted = apply_item(text, item)
        assert accepted.startswith(prefix)
        assert compiles(accepted)


async def test_dismissal_and_unknown_ids(client: LanguageClient):
    before = await command(client, "syntaxlock.stats")
    uri, _, line, character, item = await first_suggestion(client, "dismiss")
    sid = item.command.arguments[0]
    assert await command(client, "syntaxlock.dismissed", sid) is True
    assert await command(client, "syntaxlock.dismissed", sid) is False  # counted once
    assert await command(client, "syntaxlock.accepted", sid) is False
    assert await command(client, "syntaxlock.accepted", "no-such-id") is False
    # asked again for the same place: the same text, shown again under a fresh id
    (again,) = items_of(await inline(client, uri, line, character))
    assert again.insert_text == item.insert_text and again.command.arguments[0] != sid
    assert await command(client, "syntaxlock.accepted", again.command.arguments[0]) is True
    after = await command(client, "syntaxlock.stats")
    assert after["dismissed"] == before["dismissed"] + 1
    assert after["accepted"] == before["accepted"] + 1
    assert after["shown"] >= before["shown"] + 2
