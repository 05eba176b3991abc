"""The default model (SmolLM2-135M) through the server on a real stdlib file: the inline items,
accepted in place of the rest of the line, leave the file parseable."""

from __future__ import annotations

import re
import textwrap

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import LanguageClient

from server_support import apply_item, command, config, initialize, inline, items_of, open_doc

from grammar_tools.parsing.cpython_check import compiles

pytestmark = pytest.mark.asyncio(loop_scope="module")

SOURCE = open(textwrap.__file__, encoding="utf-8").read()
LINES = SOURCE.splitlines(keepends=True)


def cut_points(limit: int = 4) -> list[tuple[int, int]]:
    """After `return ` / `x = ` in function bodies, evenly over the file."""
    out = [(i, m.end()) for i, ln in enumerate(LINES) if (m := re.match(r"^\s{8,}(?:return |\w+ = )", ln))]
    step = max(1, len(out) // limit)
    return out[::step][:limit]


@pytest_lsp.fixture(config=config(), scope="module")
async def client(lsp_client: LanguageClient):
    await initialize(lsp_client, {"model": "default", "maxTokens": 48})
    yield
    await lsp_client.shutdown_session()


@pytest.mark.slow
async def test_default_model_items_parse_after_accept(client: LanguageClient):
    status = await command(client, "syntaxlock.status")
    assert status["state"] == "ready"
    got = 0
    for n, (line, character) in enumerate(cut_points()):
        text = "".join(LINES[:line]) + LINES[line][:character] + "\n" + "".join(LINES[line + 1 :])
        uri = f"file:///stdlib/textwrap_{n}.py"
        open_doc(client, uri, text)
        for item in items_of(await inline(client, uri, line, character)):
            assert item.range.start == types.Position(line, character)
            assert item.insert_text.strip()
            assert compiles(apply_item(text, item))
            got += 1
    assert got, "the default model suggested nothing at any cut point"
