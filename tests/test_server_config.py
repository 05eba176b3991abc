"""Settings through workspace/didChangeConfiguration: applied (nested, flat, or pulled with
workspace/configuration), bad values rejected with window/showMessage while the previous setting
stays, a new model loaded in the background (a failing one keeps the previous), and
enabled: false turning completions off."""

from __future__ import annotations

import json.decoder
import os
import re
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import LanguageClient

from model_support import make_tiny_model_dir
from wait_support import until
from server_support import command, config, initialize, inline, items_of, open_doc, wait_status

pytestmark = pytest.mark.asyncio(loop_scope="module")

LINES = open(json.decoder.__file__, encoding="utf-8").read().splitlines(keepends=True)


@pytest.fixture(scope="module")
def second_model_dir() -> Path:
    return make_tiny_model_dir(Path(os.environ["SYNTAXLOCK_CACHE"]) / "tiny-model-2", seed=1)


@pytest_lsp.fixture(config=config(), scope="module")
async def client(lsp_client: LanguageClient, tiny_model_dir):
    await initialize(lsp_client, {"model": str(tiny_model_dir), "maxTokens": 12, "mode": "single"})
    yield
    await lsp_client.shutdown_session()


def change(client: LanguageClient, settings) -> None:
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=settings))


async def settings(client: LanguageClient) -> dict:
    return (await command(client, "syntaxlock.status"))["settings"]


async def test_nested_and_flat_settings_are_applied(client: LanguageClient):
    change(client, {"syntaxlock": {"maxTokens": 4, "temperature": 0.5, "mode": "multi", "seed": 7}})
    s = await settings(client)
    assert (s["maxTokens"], s["temperature"], s["mode"], s["seed"]) == (4, 0.5, "multi", 7)
    change(client, {"topP": 0.9, "completionItems": False, "seed": None})
    s = await settings(client)
    assert (s["topP"], s["completionItems"], s["seed"], s["maxTokens"]) == (0.9, False, None, 4)
    listing = await client.text_document_completion_async(
        types.CompletionParams(text_document=types.TextDocumentIdentifier(uri="file:///none.py"),
                               position=types.Position(0, 0))
    )
    assert list(listing.items) == []
    assert not client.messages  # nothing to complain about
    change(client, {"syntaxlock": {
        "maxTokens": 12, "temperature": 0, "mode": "single", "topP": 1, "completionItems": True,
    }})


async def test_settings_pulled_when_the_notification_has_none(client: LanguageClient):
    client.set_configuration({"maxTokens": 6}, section="syntaxlock")
    change(client, None)

    async def pulled():  # the server asks the client, so the new value comes a moment later
        return (await settings(client))["maxTokens"] == 6

    await until(pulled, what="the pulled setting")
    change(client, {"syntaxlock": {"maxTokens": 12}})


async def test_bad_values_keep_the_previous_setting(client: LanguageClient):
    before = await settings(client)
    n = len(client.messages)
    change(client, {"syntaxlock": {"maxTokens": -3, "temperature": "hot", "mode": "sideways", "enabled": "yes",
                                   "device": "tpu", "contextTokens": 2.5}})
    after = await settings(client)
    assert after == before
    (shown,) = client.messages[n:]
    assert shown.type == types.MessageType.Warning
    for key in ("maxTokens", "temperature", "mode", "enabled", "device", "contextTokens"):
        assert f"syntaxlock.{key}" in shown.message
    change(client, ["not", "an", "object"])
    assert await settings(client) == before
    assert "must be an object" in client.messages[-1].message


async def test_max_tokens_reaches_the_engine(client: LanguageClient):
    """The same cut point completed with 12 and then 2 tokens: the second is shorter (no latency
    budget: a cold first mask may take the budget's span, which would cut the 12 tokens short)."""
    i = next(n for n, ln in enumerate(LINES) if re.match(r"^\s+result = object_pairs_hook\b", ln))
    col = LINES[i].index("object_pairs_hook") + len("object_pairs_hook")
    text = "".join(LINES[:i]) + LINES[i][:col] + "\n" + "".join(LINES[i + 1 :])
    texts = []
    for n, max_tokens in enumerate((12, 2)):
        change(client, {"syntaxlock": {"maxTokens": max_tokens, "latencyBudgetMs": 0}})
        uri = f"file:///tokens_{n}.py"
        open_doc(client, uri, text)
        items = items_of(await inline(client, uri, i, col))
        texts.append(items[0].insert_text if items else "")
    assert len(texts[1]) < len(texts[0])
    change(client, {"syntaxlock": {"maxTokens": 12, "latencyBudgetMs": None}})


async def test_disable_and_enable(client: LanguageClient):
    n = len(client.statuses)
    change(client, {"syntaxlock": {"enabled": False}})
    await wait_status(client, "disabled", after=n)
    open_doc(client, "file:///off.py", "import os\nos.pa")
    assert items_of(await inline(client, "file:///off.py", 1, 5)) == []
    assert (await command(client, "syntaxlock.status"))["state"] == "disabled"
    n = len(client.statuses)
    change(client, {"syntaxlock": {"enabled": True}})
    await wait_status(client, "ready", after=n)


async def test_model_change_reloads_and_a_failing_model_keeps_the_previous(client: LanguageClient, second_model_dir):
    n = len(client.statuses)
    change(client, {"syntaxlock": {"model": str(second_model_dir)}})
    await wait_status(client, "loading", after=n)
    await wait_status(client, "ready", after=n)
    status = await command(client, "syntaxlock.status")
    assert "tiny-model-2" in status["model"] and status["settings"]["model"] == str(second_model_dir)

    n, m = len(client.statuses), len(client.messages)
    change(client, {"syntaxlock": {"model": "/nonexistent/model", "maxTokens": 5}})
    ready = await wait_status(client, "ready", after=n)
    assert "cannot load" in ready["message"] and "/nonexistent/model" in ready["message"]
    assert any(x.type == types.MessageType.Error and "/nonexistent/model" in x.message for x in client.messages[m:])
    status = await command(client, "syntaxlock.status")
    assert status["state"] == "ready" and "tiny-model-2" in status["model"]
    # the model setting went back; the other new value stayed
    assert status["settings"]["model"] == str(second_model_dir) and status["settings"]["maxTokens"] == 5
    open_doc(client, "file:///after.py", "import os\nos.pa")
    await inline(client, "file:///after.py", 1, 5)  # still answers
