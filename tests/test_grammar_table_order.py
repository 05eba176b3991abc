"""The parse table numbers its states the same in every process: a team server and its
clients exchange parser stacks as state numbers, and two processes may build one cached
table at once. Lark's own state order follows set iteration, which changes with the string
hash seed; `grammar._canonical_order` numbers states from the grammar alone."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TABLE_DIGEST = """
import hashlib, json
from grammar_tools.grammar import _build, grammar_text
print(hashlib.sha256(json.dumps(_build(grammar_text(), "file_input"), sort_keys=True).encode()).hexdigest())
"""


def _digest_with_hash_seed(seed: int) -> str:
    env = dict(os.environ, PYTHONHASHSEED=str(seed))
    out = subprocess.run([sys.executable, "-c", TABLE_DIGEST], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300, check=True)
    return out.stdout.strip()


def test_the_table_is_the_same_under_every_hash_seed():
    digests = {_digest_with_hash_seed(seed) for seed in (1, 2, 3)}
    assert len(digests) == 1, digests
    assert len(next(iter(digests))) == len(hashlib.sha256().hexdigest())
