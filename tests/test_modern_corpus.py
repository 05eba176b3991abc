"""Soundness on modern Python: a generated corpus of 3.8-3.14 syntax (tests/modern_corpus.py,
every section checked by CPython or libcst first), walked token by token for target 3.14: the
true next token is always allowed, and the streamlined store's masks are the full store's."""

from __future__ import annotations

from pathlib import Path

from modern_corpus import SECTIONS, generate

from grammar_tools.parsing.recognizer import Recognizer
from mask_store.compiled import CompiledGrammar
from mask_store.verify import verify_files


def test_modern_corpus_is_sound_and_exact_for_3_14(compiled_full, tmp_path: Path):
    from mask_store.loading import load_compiled

    f_compiled, tok = compiled_full
    s_compiled, _ = load_compiled("default")
    files = generate(20_000, tok.encode, seed=0)
    paths = []
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        paths.append(tmp_path / name)
    rec = Recognizer(python_version=(3, 14))
    stream = CompiledGrammar(s_compiled.store, tok.vocab, rec)
    full = CompiledGrammar(f_compiled.store, tok.vocab, rec, stream.lexer)
    report = verify_files(stream, tok.encode, paths, compare=full)
    assert report.positions >= 20_000
    assert report.n_rejections == 0, report.summary()["first_rejections"]
    assert report.differing_masks == 0, report.first_differences


def test_the_corpus_needs_its_versions(compiled_full):
    """Each section's syntax is refused by a target older than the section (the corpus does
    exercise what it names), and accepted from its version on."""
    from grammar_tools.parsing.check import check_source
    from grammar_tools.parsing.incremental import PrefixParser
    from modern_corpus import _Gen

    import random

    g = _Gen(random.Random(1))
    for name, (make, since) in SECTIONS.items():
        src = make(g)
        older = (3, since[1] - 1)
        assert check_source(src.encode(), PrefixParser(Recognizer(python_version=since))).ok, name
        if older >= (3, 8):
            assert not check_source(src.encode(), PrefixParser(Recognizer(python_version=older))).ok, name
