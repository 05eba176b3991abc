"""Completing at a marker with a scripted model, and cut points in the stdlib: what the
completion tests share."""

from __future__ import annotations

import random

from corpus_support import STDLIB
from scripted_model import ScriptedRuntime, SecondChoiceRuntime

from lsp_server.decoding.engine import CompletionEngine, CompletionRequest
from lsp_server.options import EngineOptions


def scripted_engine(compiled, intended: str, **opts) -> CompletionEngine:
    comp, tok = compiled
    runtime = ScriptedRuntime(tok, intended.encode())
    return CompletionEngine(EngineOptions(**opts), runtime, comp)


def complete_at_marker(compiled, doc: str, intended_after: str, **opts):
    """Complete `doc` at its `|` marker with a model that wants to write `intended_after` there."""
    off = doc.index("|")
    text = doc[:off] + doc[off + 1 :]
    before = text[:off]
    engine = scripted_engine(compiled, before + intended_after, **opts)
    line = before.count("\n")
    ch = len(before) - (before.rfind("\n") + 1)
    result = engine.complete(CompletionRequest.at(text, line, ch))
    return text, off, result


def two_minded(compiled, doc: str, first: str, second: str, **opts):
    """Complete `doc` at its `|` with a model whose first choice writes `first` there and whose
    second choice writes `second`; the result and the document with it applied."""
    comp, tok = compiled
    off = doc.index("|")
    text = doc[:off] + doc[off + 1 :]
    before = text[:off]
    runtime = SecondChoiceRuntime(ScriptedRuntime(tok, (before + first).encode()),
                                  ScriptedRuntime(tok, (before + second).encode()))
    engine = CompletionEngine(EngineOptions(**opts), runtime, comp)
    r = engine.complete(CompletionRequest(text, cursor=off))
    return r, accept(text, off, r)


def accept(text: str, off: int, result) -> str:
    assert result.start == off  # the replace range starts at the cursor
    return text[:off] + result.text + text[result.end :]


def stdlib_cuts(n: int, seed: int = 7, small: bool = False):
    rng = random.Random(seed)
    files = sorted(p for p in (STDLIB / "json").glob("*.py")) + sorted((STDLIB / "email").glob("*.py"))[:6]
    if small:  # files of a few hundred lines: quick to parse from scratch
        files = [p for p in files if p.stat().st_size < 15_000]
    cuts = []
    while len(cuts) < n:
        p = rng.choice(files)
        lines = p.read_text().split("\n")
        i = rng.randrange(len(lines))
        if not lines[i].strip():
            continue
        ch = rng.choice([len(lines[i]) - len(lines[i].lstrip()), rng.randrange(len(lines[i]) + 1)])
        cuts.append((p, i, ch))
    return cuts
