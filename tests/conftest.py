"""Shared fixtures: an isolated cache directory, the grammar objects, the tiny model. What test
modules share besides fixtures is in the *_support modules (pytest discourages importing conftest)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from model_support import make_tiny_model_dir

ROOT = Path(__file__).resolve().parents[1]
# every derived artefact (parse tables, automata, mask stores, converted weights) goes to one
# cache for the whole test session; CI starts with it empty
os.environ.setdefault("SYNTAXLOCK_CACHE", str(ROOT / ".cache" / "tests"))


def pytest_collection_modifyitems(config, items):
    """Tests marked `cuda` run only where torch sees a CUDA GPU (torch is imported only when
    such a test was collected)."""
    cuda = [item for item in items if "cuda" in item.keywords]
    if not cuda:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in cuda:
        item.add_marker(skip)


@pytest.fixture(autouse=True)
def _names_analysis_only_where_tested(request, monkeypatch):
    """The names analysis (jedi, on a thread of its own) is made only in tests marked `names`:
    elsewhere whether it is ready before a request is a race, and a completion it reshaped
    would depend on the machine's load. Unmarked tests decode as if it were never ready."""
    if request.node.get_closest_marker("names") is not None:
        return
    from concurrent.futures import Future

    from lsp_server.decoding.identifiers.analyses import NameAnalyses

    def never(self, uri, text, line):
        done = Future()
        done.set_result(None)
        return done

    monkeypatch.setattr(NameAnalyses, "request", never)
    monkeypatch.setattr(NameAnalyses, "ready", lambda self, uri, text, line: None)


@pytest.fixture(scope="session")
def recognizer():
    from grammar_tools.parsing.recognizer import Recognizer

    return Recognizer(python_version=(3, 11))


@pytest.fixture(scope="session")
def lexer():
    from grammar_tools.lexing.lexer_automaton import load_lexer_automaton

    return load_lexer_automaton()


@pytest.fixture(scope="session")
def compiled_full():
    """The full (unstreamlined) mask store of the default model's tokenizer, built once."""
    from mask_store.loading import load_compiled

    compiled, tok = load_compiled("default", streamline=False)
    return compiled, tok


@pytest.fixture(scope="session")
def compiled(compiled_full):
    """The grammar-and-tokenizer tables the completion tests decode with: the full store."""
    return compiled_full


@pytest.fixture
def model_kernels():
    """The build of the CPU kernels that the models use here (`library.load()`); the test is
    skipped, with the reason, where they can't be loaded."""
    from lsp_server.model.kernels import library

    kernels = library.load()
    if kernels is None:
        pytest.skip(f"the kernels can't be loaded here: {library.unavailable()}")
    return kernels


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    return make_tiny_model_dir(Path(os.environ["SYNTAXLOCK_CACHE"]) / "tiny-model")
