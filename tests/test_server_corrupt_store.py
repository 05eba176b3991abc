"""Corrupt mask stores are never served (issue 22, finding 4: 5 of 23 byte-flipped copies loaded,
and a server on a store with one flipped bit in its dense masks said "ready" and served wrong
masks). A store carries a checksum over its header and arrays, checked at load: every flipped
bit is a clear error; a damaged store in the cache is rebuilt; a damaged store the user named is
an error status that says how to rebuild it."""

from __future__ import annotations

import json
import logging
import random
import struct

import numpy as np
import pytest

from mask_store import loading
from mask_store.store import ARRAYS, MaskStoreError, load_store
from raw_lsp import RawServer


@pytest.fixture(scope="module")
def good_store(tmp_path_factory):
    compiled, tok = loading.load_compiled("default")  # the streamlined store of the default tokenizer (cached)
    path = compiled.store.save(tmp_path_factory.mktemp("store") / "good.safetensors")
    return path, compiled.store, tok


def _layout(data: bytes) -> tuple[int, dict]:
    """safetensors: an 8-byte header size, the JSON header, then the arrays' bytes."""
    n = struct.unpack("<Q", data[:8])[0]
    return 8 + n, json.loads(data[8 : 8 + n])


def _flip(data: bytes, pos: int, bit: int = 0) -> bytes:
    out = bytearray(data)
    out[pos] ^= 1 << bit
    return bytes(out)


def test_every_flipped_bit_is_refused(good_store, tmp_path):
    path, _, tok = good_store
    data = path.read_bytes()
    body, header = _layout(data)
    rng = random.Random(4)
    positions = set(range(8)) | set(rng.sample(range(8, body), min(200, body - 8)))
    for name in ARRAYS:  # the first, a middle and the last byte of every array
        a, b = header[name]["data_offsets"]
        if b > a:
            positions |= {body + a, body + (a + b) // 2, body + b - 1}
    positions |= set(rng.sample(range(body, len(data)), 100))
    loaded = []
    for pos in sorted(positions):
        copy = tmp_path / "flipped.safetensors"
        copy.write_bytes(_flip(data, pos, rng.randrange(8)))
        try:
            load_store(copy, tokenizer_hash=tok.vocab.hash, vocab_size=tok.vocab.size)
            loaded.append(pos)
        except MaskStoreError as e:
            assert "mask-store build" in str(e)
    assert loaded == [], f"{len(loaded)} of {len(positions)} damaged copies loaded (byte offsets {loaded[:10]})"
    assert len(positions) > 300


def _dense_flip(path) -> bytes:
    """The store with one bit of its dense masks flipped (a mask that would allow a wrong token)."""
    data = path.read_bytes()
    body, header = _layout(data)
    a, b = header["dense"]["data_offsets"]
    return _flip(data, body + (a + b) // 2, 3)


def test_a_damaged_cached_store_is_rebuilt(good_store, tmp_path, monkeypatch, caplog):
    path, store, _ = good_store
    cached = tmp_path / "cached.safetensors"
    cached.write_bytes(_dense_flip(path))
    in_cache = loading.store_path_for
    monkeypatch.setattr(
        loading, "store_path_for", lambda tok, streamline=True: cached if streamline else in_cache(tok, False)
    )
    with caplog.at_level(logging.WARNING, logger="mask_store.loading"):
        compiled, _ = loading.load_compiled("default")
    assert any("checksum" in r.getMessage() and "rebuilding" in r.getMessage() for r in caplog.records)
    for name in ARRAYS:
        assert np.array_equal(getattr(compiled.store, name), getattr(store, name)), name
    assert load_store(cached).n_rows == store.n_rows  # written again, whole


@pytest.mark.slow
def test_a_server_on_a_damaged_store_says_so(good_store, tmp_path, tiny_model_dir):
    """The store the user named is damaged: status "error" naming the fix, empty answers, and
    the server recovers when the setting changes."""
    path, _, _ = good_store
    damaged = tmp_path / "damaged.safetensors"
    damaged.write_bytes(_dense_flip(path))
    with RawServer() as s:
        s.initialize({"model": str(tiny_model_dir), "store": str(damaged), "maxTokens": 4}, wait="error")
        error = s.status("error")["params"]["message"]
        assert "checksum" in error and f"--out {damaged}" in error
        s.open("file:///a.py", "import os\nos.pa")
        r = s.response(s.inline("file:///a.py", 1, 5))
        assert r["result"]["items"] == []
        s.notify("workspace/didChangeConfiguration", {"settings": {"syntaxlock": {"store": str(path)}}})
        s.status("ready")
        assert s.call("workspace/executeCommand", {"command": "syntaxlock.status"})["result"]["state"] == "ready"
