"""Each version's grammar against that version's own CPython, where the machine has it.

test_python_versions.py decides its snippets with CPython 3.11 (the server's interpreter) and
libcst (which reads the newest syntax whatever version it is told, and is not exact for
f-string details). Where other CPython interpreters are installed (python3.X on PATH, or
pyenv's versions), this asks each of them: every version snippet (valid and invalid) and every
modern-corpus section, compiled by CPython 3.X, must get the same answer from our recognizer
for target 3.X. The sections the lexer does not accept (`modern_corpus.BEYOND`: f-strings past its bounds)
are left out; that they are valid for 3.12+ is what the corpus's own oracle checks.
"""

from __future__ import annotations

import random

import modern_corpus
from cpython_oracle import INTERPRETERS, cpython_compiles
import pytest
from python_versions_support import SNIPPETS, accepts






def _sources() -> list[str]:
    out = [s for _, valid, invalid in SNIPPETS.values() for s in valid + invalid]
    for make, _ in modern_corpus.SECTIONS.values():
        out += [make(modern_corpus._Gen(random.Random(seed))) for seed in range(3)]
    return out


@pytest.mark.skipif(not INTERPRETERS, reason="no CPython of another supported version on this machine")
@pytest.mark.parametrize("version", sorted(INTERPRETERS))
def test_grammar_agrees_with_that_versions_cpython(version):
    sources = _sources()
    cpython = cpython_compiles(version, sources)
    differ = [(src, ok) for src, ok in zip(sources, cpython) if accepts(src, version) != ok]
    assert not differ, f"{len(differ)} of {len(sources)} differ from CPython {version}: {differ[:3]}"
    assert any(cpython) and not all(cpython)  # both kinds were asked
