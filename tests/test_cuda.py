"""The engine on CUDA (marked `cuda`: skipped without a GPU): loading takes the static path with
its graphs captured and warmed up before it returns; greedy, sampled and speculative
completions run on the device. (The server's initialize with device=auto on a GPU machine is
tests/test_server_initialize.py, which expects `cuda` there; the graphs against the eager passes
are in tests/test_static_decode.py.)"""

from __future__ import annotations

from dataclasses import replace

import pytest

pytestmark = pytest.mark.cuda

TEXT = "import os\n\n\ndef join_all(parts):\n    out = []\n    for p in parts:\n        out.append(os.path.join(p, \n"
LINE = 6
CHAR = len(TEXT.split("\n")[LINE])  # the end of the cut line
OFFSET = TEXT.index("\n", TEXT.index("out.append"))


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    from lsp_server.decoding.engine import CompletionEngine
    from lsp_server.options import EngineOptions

    return CompletionEngine.load(EngineOptions(model=str(tiny_model_dir), device="cuda", max_tokens=12))


def request(doc: str):
    from lsp_server.decoding.engine import CompletionRequest

    return CompletionRequest.at(TEXT, LINE, CHAR, document=doc)


def test_load_takes_the_static_path_with_graphs(engine):
    from lsp_server.model.static_decode import GRAPH_SIZES

    rt = engine.runtime
    assert rt.device.type == "cuda" and engine.describe()["device"].startswith("cuda")
    assert rt.static is not None and sorted(rt.static.graphs.sizes) == list(GRAPH_SIZES)


def test_greedy_completions_are_deterministic_and_valid(engine):
    from grammar_tools.parsing.cpython_check import compiles
    from lsp_server.decoding.stopping.policy import StopReason

    a = engine.complete(request("file:///a.py"), options=replace(engine.options, speculative=False))
    b = engine.complete(request("file:///b.py"), options=replace(engine.options, speculative=False))
    assert a.token_ids == b.token_ids and a.figures.tokens_generated + a.figures.tokens_forced > 0
    if a.text and a.stop_reason != StopReason.MAX_TOKENS:  # a finished completion closes the call
        assert compiles(TEXT[:OFFSET] + a.text + TEXT[OFFSET:]), a.text


def test_sampled_completions_repeat_with_the_seed(engine):
    hot = replace(engine.options, temperature=0.8, top_p=0.95, seed=3)
    a = engine.complete(request("file:///s1.py"), options=hot)
    b = engine.complete(request("file:///s2.py"), options=hot)
    assert a.token_ids == b.token_ids and a.figures.tokens_generated > 0


def test_speculation_runs_and_times_passes_on_the_device(engine):
    r = engine.complete(request("file:///spec.py"), options=replace(engine.options, speculative=True))
    assert r.figures.speculation is not None and r.figures.tokens_generated + r.figures.tokens_forced > 0
    assert all(ms > 0 for ms in engine.spec_stats.forward_ms.values())
