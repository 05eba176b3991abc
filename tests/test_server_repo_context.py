"""The context block through the real server (tiny random-weight model): a workspace folder with
two modules on disk; the client opens both and reports the cursor in a function of one; the
server makes that document's block ahead (the other module's definitions the function uses),
and the completion request then reads it; a new block plans a prefill with it."""

from __future__ import annotations

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import LanguageClient

from server_support import CAPABILITIES, command, config, inline, open_doc, wait_status
from wait_support import until

pytestmark = pytest.mark.asyncio(loop_scope="module")

UTIL = '''class Header:
    """One parsed header line."""

    def __init__(self, name, value=None):
        self.name = name
        self.value = value

    def render(self, sep: str = ": ") -> str:
        return self.name + sep + str(self.value)


def parse_header(line: str, strict=False) -> Header:
    """Parse one header line."""
    a, b = line.split(":")
    return Header(a, b)
'''

MAIN = '''from .util import parse_header


def first(lines):
    h = parse_header(lines[0])
    return h.
'''


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("workspace")
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "util.py").write_text(UTIL)
    (root / "pkg" / "main.py").write_text(MAIN)
    return root


@pytest_lsp.fixture(config=config(), scope="module")
async def client(lsp_client: LanguageClient, tiny_model_dir, folder):
    await lsp_client.initialize_session(types.InitializeParams(
        capabilities=CAPABILITIES, root_uri=folder.as_uri(),
        initialization_options={"model": str(tiny_model_dir), "maxTokens": 8, "latencyBudgetMs": 0,
                                "contextShare": 0.25}))
    await wait_status(lsp_client, "ready")
    yield
    await lsp_client.shutdown_session()


async def test_the_server_makes_the_block_ahead_and_the_request_reads_it(client: LanguageClient, folder):
    util, main = (folder / "pkg" / "util.py").as_uri(), (folder / "pkg" / "main.py").as_uri()
    open_doc(client, util, UTIL)
    open_doc(client, main, MAIN)
    line = MAIN.split("\n").index("    return h.")
    client.protocol.notify("syntaxlock/cursor", {"textDocument": {"uri": main, "version": 1},
                                                 "position": {"line": line, "character": len("    return h.")}})

    async def made():
        s = await command(client, "syntaxlock.status")
        return s if s["repoContext"]["documents"].get(main) else None

    s = await until(made, what="the context block")
    assert s["repoContext"]["documents"][main][0] == "definitions:pkg/util.py"
    assert s["settings"]["contextShare"] == 0.25
    served = s["repoContext"]["served"]
    await inline(client, main, line, len("    return h."))
    after = await command(client, "syntaxlock.status")
    assert after["repoContext"]["served"] > served  # the request's workspace carried the block


async def test_a_share_of_zero_turns_the_block_off(client: LanguageClient, folder):
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"syntaxlock": {"contextShare": 0}}))

    async def off():
        s = await command(client, "syntaxlock.status")
        return s if s["settings"]["contextShare"] == 0 else None

    s = await until(off, what="the setting")
    assert s["repoContext"]["documents"] == {}  # the blocks made for the old share are dropped


async def test_an_unset_share_is_the_models_none_for_a_plain_model(client: LanguageClient, folder):
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"syntaxlock": {"contextShare": 0.25}}))
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"syntaxlock": {"contextShare": None}}))

    async def unset():
        s = await command(client, "syntaxlock.status")
        return s if s["settings"]["contextShare"] is None else None

    s = await until(unset, what="the setting")
    assert s["repoContext"]["share"] == 0.0  # the tiny model reads no other file as its repository's

