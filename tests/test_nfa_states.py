"""The store's NFA states: lexer configurations (X, d) merged by class (`mask_store.nfa_states`)
give the same masks as one state per configuration, on real code; a store of the format
before the merge is refused with the fix named, and rebuilt where it is the cache's."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from corpus_support import read_source, stdlib_files

from mask_store import loading
from mask_store.builder import StoreBuilder
from mask_store.compiled import CompiledGrammar
from mask_store.nfa_states import NfaStates, terminal_classes
from mask_store.store import ARRAYS, FORMAT_VERSION, MaskStoreError, load_store
from mask_store.verify import verify_files

FSTRINGS = b'''\
name = "x"
width = 8
print(f"{name!r:>{width}} and {'nested'!s} {width + 1:#x}")
print(rf"\\d{{2}}{name}", t"", f"""{
    name
}""")
'''


@pytest.fixture(scope="module")
def unmerged(compiled_full):
    """The full store with one NFA state per lexer configuration (the format before the merge)."""
    compiled, tok = compiled_full
    store = StoreBuilder(tok.vocab, compiled.lexer, progress=False, merge_states=False).build(
        dict(compiled.store.header))
    return CompiledGrammar(store, tok.vocab, compiled.recognizer, compiled.lexer)


def test_every_configuration_maps_to_a_state_of_its_terminal(compiled_full, lexer):
    store = compiled_full[0].store
    nfa = store.nfa()
    pairs = {(x, d) for d in range(1, lexer.n_states) for x in lexer.possible_ids[d]}
    assert set(zip(nfa.pair_term.tolist(), nfa.pair_state.tolist())) == pairs
    assert np.array_equal(nfa.q_term[nfa.pair_q], nfa.pair_term)
    assert nfa.merged and store.n_states < len(pairs)
    # the representative of q is one of its configurations, and every q has one
    index = nfa.index()
    assert [index[(x, d)] for x, d in zip(nfa.q_term.tolist(), nfa.q_state.tolist())] == list(range(store.n_states))
    # configurations of one q are in one class of the lexer seen from X
    name = lexer.grammar.term_id["NAME"]
    cls = terminal_classes(lexer, name)
    for x, d, q in zip(nfa.pair_term.tolist(), nfa.pair_state.tolist(), nfa.pair_q.tolist()):
        if x == name:
            assert cls[d] == cls[int(nfa.q_state[q])]
    assert not NfaStates.of(lexer, merge=False).merged


@pytest.mark.slow
def test_merged_store_gives_the_unmerged_masks_on_real_code(compiled_full, unmerged, tmp_path):
    compiled, tok = compiled_full
    assert compiled.store.logical_rows() < unmerged.store.logical_rows()
    assert unmerged.store.n_states == unmerged.store.pair_q.shape[0] > compiled.store.n_states
    fs = tmp_path / "fstrings.py"
    fs.write_bytes(FSTRINGS)
    files = [fs] + [p for p in stdlib_files(include_tests=False)
                    if 3000 < p.stat().st_size < 12000 and read_source(p) is not None][:6]
    fresh = CompiledGrammar(compiled.store, tok.vocab, compiled.recognizer, compiled.lexer)
    report = verify_files(fresh, tok.encode, files, compare=unmerged)
    assert report.files == len(files) and report.positions > 5000
    assert report.n_rejections == 0, report.rejections
    assert report.differing_masks == 0, report.first_differences


def _as_format(path, version: int, out):
    """The store at `path` with another format version in its metadata (checksum still right)."""
    from safetensors import safe_open
    from safetensors.numpy import save_file

    with safe_open(str(path), framework="np") as f:
        meta = dict(f.metadata())
        arrays = {k: f.get_tensor(k) for k in f.keys()}
    meta["format_version"] = str(version)
    save_file(arrays, str(out), metadata=meta)
    return out


@pytest.mark.slow
def test_a_store_of_the_format_before_the_merge_is_refused_and_rebuilt(compiled_full, tmp_path, monkeypatch,
                                                                        caplog):
    compiled, tok = compiled_full
    good = compiled.store.save(tmp_path / "good.safetensors")
    stale = _as_format(good, FORMAT_VERSION - 1, tmp_path / "stale.safetensors")
    with pytest.raises(MaskStoreError, match=f"format version {FORMAT_VERSION - 1}.*mask-store build"):
        load_store(stale)
    # a store without the configuration map (what format 4 holds) is corrupt, whatever it claims
    from safetensors import safe_open
    from safetensors.numpy import save_file

    with safe_open(str(good), framework="np") as f:
        meta = dict(f.metadata())
        arrays = {k: f.get_tensor(k) for k in f.keys() if not k.startswith("pair_")}
    save_file(arrays, str(tmp_path / "no-map.safetensors"), metadata=meta)
    with pytest.raises(MaskStoreError, match="corrupt"):
        load_store(tmp_path / "no-map.safetensors")
    # the cache's stale store is made again (the full one: `streamline=False`)
    monkeypatch.setattr(loading, "store_path_for", lambda tok, streamline=True, merge_states=True: stale)
    with caplog.at_level(logging.WARNING, logger="mask_store.loading"):
        again, _ = loading.load_compiled("default", streamline=False)
    assert any("format version" in r.getMessage() and "rebuilding" in r.getMessage() for r in caplog.records)
    reloaded = load_store(stale)
    assert json.loads(json.dumps(reloaded.header["options"]))["merge_states"] is True
    for name in ARRAYS:
        assert np.array_equal(getattr(reloaded, name), getattr(compiled.store, name)), name
