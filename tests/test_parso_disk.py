"""The names analysis reads no pickle and writes none (lsp_server/decoding/identifiers/parso_disk.py):
jedi asks parso for its cache, which pickles every module it parses to disk and unpickles them later."""

from __future__ import annotations

import os
import pickle

import jedi
import parso
import parso.cache
import pytest

from lsp_server.decoding.identifiers import parso_disk
from lsp_server.decoding.identifiers.analysis import analyse

pytestmark = pytest.mark.names


def _plant(module_path, cache_dir) -> None:
    """A pickle in parso's cache for `module_path` whose tree defines `planted` (not the file's own)."""
    tree = parso.parse("def planted():\n    pass\n")
    item = parso.cache._NodeCacheItem(tree, ["def planted():\n", "    pass\n", ""], os.path.getmtime(module_path) + 1)
    target = parso.cache._get_hashed_path(parso.load_grammar()._hashed, str(module_path), cache_path=cache_dir)
    with open(target, "wb") as f:
        pickle.dump(item, f, pickle.HIGHEST_PROTOCOL)
    os.utime(target, (os.path.getmtime(module_path) + 10,) * 2)


def test_the_analysis_neither_loads_nor_writes_parsos_pickles(tmp_path, monkeypatch):
    cache_dir = tmp_path / "cache"
    monkeypatch.setattr(jedi.settings, "cache_directory", str(cache_dir))
    module = tmp_path / "helpers_mod.py"
    module.write_text("def real_function():\n    return 1\n")
    _plant(module, cache_dir)
    planted = set(cache_dir.rglob("*.pkl"))
    doc = "import helpers_mod\n\nhelpers_mod.real_function()\n"
    scope = analyse(doc, 2, str(tmp_path / "main.py"))
    attributes = set(scope.receivers[b"helpers_mod"].attributes)
    assert b"real_function" in attributes and b"planted" not in attributes  # the file parsed, not the pickle
    assert set(cache_dir.rglob("*.pkl")) == planted  # nothing written beside it


def test_a_parso_whose_disk_cache_changed_is_refused(monkeypatch):
    monkeypatch.setattr(parso.cache, "_load_from_file_system", lambda path: None)
    with pytest.raises(parso_disk.ParsoCacheChanged, match="_load_from_file_system"):
        parso_disk.memory_only()
