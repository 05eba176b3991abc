"""An editor's language server on a team server, end to end: `syntaxlock serve` with the
`teamServer` setting asks a stand-in team server (tests/team_support.py: vLLM's API over a
scripted model, the syntaxlock processor's batch) for the model's part; the item it offers is
the one the model meant and leaves the file valid. With the team server gone, the answer is
empty and the status says why; once it is back, answers come again and the status is ready."""

from __future__ import annotations

import asyncio

import pytest
import pytest_lsp
from pytest_lsp import LanguageClient
from scripted_model import ScriptedRuntime
from team_support import StandIn

from server_support import apply_item, config, initialize, inline, items_of, open_doc, wait_status

from grammar_tools.parsing.cpython_check import compiles
from lsp_server.team.client import BACKOFF_S
from lsp_server.team.rows import TeamGrammar

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

DOC = "import os\n\n\ndef join(a):\n    return os.pa\n"
LINE, COL = 4, len("    return os.pa")
INTENDED = DOC[: DOC.index("os.pa") + 5] + "th.join(a, 'x')\n"


@pytest.fixture(scope="module")
def stand_in(compiled):
    comp, tok = compiled
    s = StandIn(TeamGrammar(comp))
    s.runtime = ScriptedRuntime(tok, INTENDED.encode())
    yield s
    s.close()


@pytest_lsp.fixture(config=config(), scope="module")
async def client(lsp_client: LanguageClient, stand_in, tiny_model_dir):
    await initialize(lsp_client, {"model": str(tiny_model_dir), "teamServer": stand_in.url, "mode": "single",
                                  "latencyBudgetMs": 0, "workAhead": False})
    yield
    await lsp_client.shutdown_session()


async def test_the_team_servers_answer_is_offered(client: LanguageClient, stand_in):
    open_doc(client, "file:///team/a.py", DOC)
    items = items_of(await inline(client, "file:///team/a.py", LINE, COL))
    assert len(items) == 1, stand_in.answers[-1:]
    text = apply_item(DOC, items[0])
    assert "os.path.join(a, 'x')" in text and compiles(text)
    assert stand_in.seen and stand_in.seen[-1]["document"] == "file:///team/a.py"


async def test_down_then_back(client: LanguageClient, stand_in, compiled):
    port = stand_in.port
    stand_in.close()
    seen = len(client.statuses)
    open_doc(client, "file:///team/b.py", DOC)
    assert items_of(await inline(client, "file:///team/b.py", LINE, COL)) == []
    status = await wait_status(client, "error", after=seen)
    assert "team server" in status["message"] and "does not answer" in status["message"]
    back = StandIn(stand_in.grammar, port)
    back.runtime = stand_in.runtime
    try:
        await asyncio.sleep(BACKOFF_S[0] * 2)  # the client's back-off after one failure
        seen = len(client.statuses)
        open_doc(client, "file:///team/c.py", DOC)
        items = items_of(await inline(client, "file:///team/c.py", LINE, COL))
        assert len(items) == 1 and "os.path.join" in apply_item(DOC, items[0]), back.answers[-1:]
        await wait_status(client, "ready", after=seen)
    finally:
        back.close()
