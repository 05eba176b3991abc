"""Streamlining: the streamlined store gives exactly the full store's masks, with fewer rows and
fewer parser checks (real tokenizer, real stdlib code)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from corpus_support import read_source, stdlib_files

from grammar_tools.parsing.recognizer import Recognizer
from mask_store.cli import main as mask_store_main
from mask_store.compiled import CompiledGrammar
from mask_store.store import load_store
from mask_store.streamline import BOUNDARY_STEP, STEPS, streamline_store
from mask_store.verify import verify_files

PEP695 = """\
type Pair[T] = tuple[T, T]


def first[T](xs: list[T]) -> T:
    return xs[0]


class Box[T: (int, str)]:
    def get[U](self, default: U) -> T | U:
        return default
"""


@pytest.fixture(scope="module")
def streamlined(compiled_full):
    """The default store of `load_compiled` (streamlined from the cached full store)."""
    from mask_store.loading import load_compiled

    compiled, tok = load_compiled("default")
    return compiled, tok


def _fresh(store, tok, rec=None) -> CompiledGrammar:
    """A compiled grammar with empty caches and counters."""
    return CompiledGrammar(store, tok.vocab, rec or Recognizer())


def _sample(tok, min_tokens: int, seed: int) -> list:
    files = [p for p in stdlib_files(include_tests=False) if 2000 < p.stat().st_size < 40000]
    random.Random(seed).shuffle(files)
    chosen, total = [], 0
    for p in files:
        data = read_source(p)
        if data is None:
            continue
        chosen.append(p)
        total += len(tok.encode(data.decode()))
        if total >= min_tokens:
            break
    return chosen


def _rows_of(store, terminal: str) -> int:
    """The logical rows of the lexer states of one terminal (own and boundary rows)."""
    g = Recognizer().grammar
    own = store.group_start[store.q_group + 1] - store.group_start[store.q_group]
    b = store.q_boundary
    shared = np.where(b >= 0, store.group_start[b + 1] - store.group_start[np.maximum(b, 0)], 0)
    return int((own + shared)[store.q_term == g.term_id[terminal]].sum())


def test_header_records_rows_after_each_step(streamlined, compiled_full, tmp_path, capsys):
    compiled, tok = streamlined
    store = compiled.store
    full = compiled_full[0].store
    assert store.header["options"]["streamline"] is True
    steps = store.header["streamline"]["steps"]
    assert [s["step"] for s in steps] == list(STEPS) + [BOUNDARY_STEP]
    rows = [s["rows"] for s in steps]
    assert rows[0] == full.logical_rows() and rows[-1] == store.logical_rows()
    assert all(a >= b for a, b in zip(rows, rows[1:]))
    # the seed's target: 10x fewer rows (10.12x since the NFA states are merged by class,
    # docs/mask_store_rows.md; the f-/t-string states, at one row each in both stores, hold it
    # down)
    assert rows[-1] * 10 <= rows[0]
    assert store.n_rows < full.n_rows
    for t_string, f_string in (("TSTRING", "FSTRING"), ("LONG_TSTRING", "LONG_FSTRING")):
        streamlined_rows, full_rows = _rows_of(store, t_string), _rows_of(full, t_string)
        assert streamlined_rows <= _rows_of(store, f_string) and full_rows >= _rows_of(full, f_string)
        assert 2 * streamlined_rows <= full_rows
    # the file keeps it, and `mask-store info` shows it
    path = store.save(tmp_path / "s.safetensors")
    again = load_store(path, tokenizer_hash=tok.vocab.hash, vocab_size=tok.vocab.size)
    assert again.info()["rows_per_step"] == {s["step"]: s["rows"] for s in steps}
    assert mask_store_main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    for s in steps:
        assert f"{s['step']:>20}  {s['rows']:>8}" in out


@pytest.mark.slow
def test_streamlined_masks_are_identical_on_stdlib_sample(streamlined, compiled_full):
    """Exactness: identical masks at every position of a fixed sample (>= 20,000 positions),
    every true next token allowed (soundness unchanged), and fewer parser checks."""
    s_compiled, tok = streamlined
    f_compiled, _ = compiled_full
    stream = _fresh(s_compiled.store, tok)
    full = _fresh(f_compiled.store, tok, stream.recognizer)
    files = _sample(tok, 20_000, seed=7)
    report = verify_files(stream, tok.encode, files, compare=full)
    assert report.positions >= 20_000
    assert report.differing_masks == 0, report.first_differences
    assert report.n_rejections == 0, report.summary()["first_rejections"]
    # the same masks were computed (the caches key them alike): checks compare per mask
    assert stream.memo.stats["masks"] == full.memo.stats["masks"] > 1000
    assert 3 * stream.memo.stats["parser_checks"] <= full.memo.stats["parser_checks"]


@pytest.mark.slow
def test_exact_for_other_python_versions(streamlined, compiled_full, tmp_path):
    """The analyses hold for every Python version the recognizer knows (PEP 695 on or off)."""
    s_compiled, tok = streamlined
    f_compiled, _ = compiled_full
    src = tmp_path / "pep695.py"
    src.write_text(PEP695)
    files = [src] + _sample(tok, 1500, seed=3)
    for version in ((3, 11), (3, 12)):
        rec = Recognizer(python_version=version)
        stream = _fresh(s_compiled.store, tok, rec)
        full = _fresh(f_compiled.store, tok, rec)
        report = verify_files(stream, tok.encode, files, compare=full)
        assert report.differing_masks == 0, (version, report.first_differences)
        assert report.positions > 1500
        if version >= (3, 12):
            assert report.n_rejections == 0


def test_misuse_is_refused(streamlined):
    compiled, tok = streamlined
    with pytest.raises(ValueError, match="streamlined already"):
        streamline_store(compiled.store, progress=False)
    with pytest.raises(ValueError, match="semantic checks"):
        CompiledGrammar(compiled.store, tok.vocab, Recognizer(semantic_checks=False))


def test_build_streamlines_by_default():
    from mask_store.cli import build_parser

    assert build_parser().parse_args(["build"]).no_streamline is False
    assert build_parser().parse_args(["build", "--no-streamline"]).no_streamline is True


@pytest.mark.slow
def test_bar_hillel_beside_the_jointly_legal_batches_gives_the_store_of_one_process(compiled_full, monkeypatch,
                                                                                       forks_here):
    """The exact "never legal" queries share a pool with the jointly-legal batches (a batch
    whose contexts wait for answers goes once they are in): the store is the same, every
    array, as the one process's that answers every query before any batch; analyses computed
    cold (no cached decisions or answers)."""
    if not forks_here:
        return  # run and passed in a fresh interpreter (`forks_here`)
    from grammar_tools.analyses import bar_hillel
    from mask_store import streamline
    from mask_store.store import ARRAYS

    compiled, tok = compiled_full
    monkeypatch.setattr(streamline._Streamliner, "_cached_decisions", lambda self, pairs: self._decide(pairs))
    monkeypatch.setattr(bar_hillel.NeverLegalCache, "get", lambda self, c, s: None)
    monkeypatch.setattr(bar_hillel.NeverLegalCache, "save", lambda self: None)
    # the default store leaves no query to Bar-Hillel: here a few rows the exploration shows
    # never legal go to it instead (a CFG test: without the semantic guards it finds fewer)
    g = Recognizer().grammar
    asked = {g.term_id["AS"], g.term_id["ASSERT"]}

    def chosen(grammar, ctx, seq):
        return ctx.kind == "after" and ctx.terminal in asked and len(seq) == 2 and shown(grammar, ctx, seq)

    shown, may_be = streamline.is_never_legal_shown, streamline.may_be_never_legal
    monkeypatch.setattr(streamline, "is_never_legal_shown", lambda *a: shown(*a) and not chosen(*a))
    monkeypatch.setattr(streamline, "may_be_never_legal", lambda *a: chosen(*a) or may_be(*a))
    pools = []
    real_pool = streamline.forked_pool
    monkeypatch.setattr(streamline, "forked_pool", lambda *a, **k: (pools.append(a), real_pool(*a, **k))[1])
    pooled = streamline_store(compiled.store, Recognizer(), progress=False, processes=2, vocab=tok.vocab)
    assert len(pools) == 2  # always/never; then Bar-Hillel and the jointly-legal batches
    one = streamline_store(compiled.store, Recognizer(), progress=False, processes=1, vocab=tok.vocab)
    assert len(pools) == 2  # one process: no pool
    stats, alone = (dict(s.header["streamline"]["analysis"]) for s in (pooled, one))
    assert stats["bar_hillel_queries"] > 0 and stats["bar_hillel_answered"] == stats["bar_hillel_queries"]
    del stats["bar_hillel_seconds"], alone["bar_hillel_seconds"]
    assert stats == alone
    for name in ARRAYS:
        assert np.array_equal(getattr(one, name), getattr(pooled, name)), name
