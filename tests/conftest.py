"""Shared fixtures: an isolated cache directory, the grammar objects, the tiny model. What test
modules share besides fixtures is in the *_support modules (pytest discourages importing conftest).

`make test` runs the suite in two worker processes (pytest-xdist). They share the cache
directory: whatever is made there is written aside and renamed (`cache.written_aside`), and
a mask store is built by one process while the other waits (`cache.one_maker`); tests that build
into editors/vscode share one worker (`xdist_group("vscode")`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from model_support import make_tiny_model_dir

from lsp_server.threads import use_fair_threads

# the test process's OpenMP threads sleep while they wait (what the CLI sets for the server, before
# torch is loaded): spinning, they hold a core that the process they wait for needs (the servers,
# editors and forked builds these tests start; lsp_server/threads.py)
use_fair_threads()

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
    """The build of the CPU kernels that the models use here (`build.load()`); the test is
    skipped, with the reason, where they can't be loaded."""
    from lsp_server.model.kernels import build

    kernels = build.load()
    if kernels is None:
        pytest.skip(f"the kernels can't be loaded here: {build.unavailable()}")
    return kernels


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    return make_tiny_model_dir(Path(os.environ["SYNTAXLOCK_CACHE"]) / "tiny-model")


@pytest.fixture(scope="session")
def vsix(tmp_path_factory) -> Path:
    """The VS Code extension packaged as users get it (`npm run package`, which also compiles the
    extension and its test suites), once a session: its packaging test and the real-VS-Code test
    both read this copy."""
    ext = ROOT / "editors" / "vscode"
    if not (ext / "node_modules" / "vscode-languageclient").is_dir():
        pytest.fail("editors/vscode/node_modules is missing: run scripts/setup.sh (it runs `npm ci` there)")
    r = subprocess.run(["npm", "run", "package"], cwd=ext, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    out = tmp_path_factory.mktemp("vsix") / "syntaxlock.vsix"
    shutil.copy(ext / "syntaxlock.vsix", out)
    return out


FRESH_ENV = "SYNTAXLOCK_TEST_IN_FRESH_PROCESS"


@pytest.fixture
def forks_here(request) -> bool:
    """For tests of the forked workers. A build forks only where no other thread runs
    (`forked_pool.can_fork`), and earlier tests of this session may leave threads behind (a
    server's reader, an event loop): then the test is run again alone in a fresh interpreter,
    which must pass, and this gives False (the test's body has been checked there); True where
    the body runs here."""
    from grammar_tools.analyses.forked_pool import can_fork

    if can_fork() or os.environ.get(FRESH_ENV):
        return True
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", request.node.nodeid],
        cwd=ROOT, env={**os.environ, FRESH_ENV: "1"}, capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0 and " passed" in done.stdout, done.stdout[-4000:] + done.stderr[-2000:]
    return False
