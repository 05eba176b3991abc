"""Every cached artefact is keyed by all the code that produces it and the library versions it
depends on: changing the source of any module that takes part (as read by the key) or a
library's version gives a new key, so a stale artefact is never read; changing a module that
doesn't take part leaves the key alone (no needless rebuild)."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import lark
import pytest

from grammar_tools.analyses import bar_hillel
from grammar_tools import cache
from grammar_tools.lexing import lexer_automaton
from grammar_tools.grammar import grammar_key, grammar_text, load_grammar
from mask_store import loading, streamline

ROOT = Path(__file__).resolve().parents[1]


def _edit(monkeypatch, *relpaths: str) -> None:
    """Make the code hashes read an edited copy of these modules (a comment appended)."""
    edited = {(ROOT / p).resolve() for p in relpaths}
    assert all(p.is_file() for p in edited), relpaths
    real = cache.read_source

    def read(path: Path) -> bytes:
        data = real(path)
        return data + b"\n# edited\n" if Path(path).resolve() in edited else data

    monkeypatch.setattr(cache, "read_source", read)


def _bump(monkeypatch, library: str) -> None:
    """Make one library report another version."""
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda n: "999.0" if n == library else real(n))


STREAMLINED_BY = [
    "mask_store/streamline.py",
    "mask_store/builder.py",
    "mask_store/nfa_states.py",
    "mask_store/token_lexing.py",
    "grammar_tools/parsing/recognizer.py",
    "grammar_tools/parsing/guards.py",
    "grammar_tools/parsing/guard_checks.py",
    "grammar_tools/parsing/parse_table.py",
    "grammar_tools/analyses/exploration.py",
    "grammar_tools/analyses/lockstep.py",
    "grammar_tools/analyses/jointly_legal.py",
    "grammar_tools/analyses/bar_hillel.py",
    "grammar_tools/lexing/lexer_automaton.py",
]


@pytest.mark.parametrize("module", STREAMLINED_BY)
def test_streamlined_store_key_covers_its_code(monkeypatch, module):
    before = streamline.code_hash()
    _edit(monkeypatch, module)
    assert streamline.code_hash() != before


@pytest.mark.parametrize("library", ["lark", "interegular", "pyformlang"])
def test_streamlined_store_key_covers_its_libraries(monkeypatch, library):
    before = streamline.code_hash()
    _bump(monkeypatch, library)
    assert streamline.code_hash() != before


def test_full_store_key_covers_the_builder_only(monkeypatch):
    before = loading.full_store_code_hash()
    for module in ("mask_store/builder.py", "mask_store/nfa_states.py", "mask_store/token_lexing.py",
                   "grammar_tools/lexing/lexer_automaton.py"):
        with monkeypatch.context() as m:
            _edit(m, module)
            assert loading.full_store_code_hash() != before, module
    # the run-time matcher and the analyses don't make the full store
    _edit(monkeypatch, "mask_store/matcher.py", "mask_store/streamline.py", "grammar_tools/analyses/exploration.py")
    assert loading.full_store_code_hash() == before


@pytest.mark.slow
def test_store_paths_follow_the_keys(monkeypatch):
    from mask_store.vocabulary import load_tokenizer

    tok = load_tokenizer("default")
    full, streamlined = loading.store_path_for(tok, False), loading.store_path_for(tok, True)
    assert full != streamlined
    _edit(monkeypatch, "mask_store/token_lexing.py")
    assert loading.store_path_for(tok, False) != full
    assert loading.store_path_for(tok, True) != streamlined


def test_bar_hillel_answers_key(monkeypatch):
    g = load_grammar()
    before = bar_hillel.cache_path(g)
    with monkeypatch.context() as m:
        _edit(m, "grammar_tools/analyses/bar_hillel.py")
        assert bar_hillel.cache_path(g) != before
    with monkeypatch.context() as m:
        _bump(m, "pyformlang")
        assert bar_hillel.cache_path(g) != before
    _edit(monkeypatch, "grammar_tools/analyses/exploration.py")  # the exploration doesn't answer them
    assert bar_hillel.cache_path(g) == before


def test_lexer_automaton_key(monkeypatch):
    g = load_grammar()
    before = lexer_automaton.cache_path(g)
    for module in ("grammar_tools/lexing/string_automata.py", "grammar_tools/lexing/byte_automaton.py",
                   "grammar_tools/lexing/terminal_automata.py"):
        with monkeypatch.context() as m:
            _edit(m, module)
            assert lexer_automaton.cache_path(g) != before, module
    _bump(monkeypatch, "interegular")
    assert lexer_automaton.cache_path(g) != before


def test_grammar_key(monkeypatch):
    text = grammar_text()
    before = grammar_key(text, "file_input")
    assert grammar_key(text + "\n", "file_input") != before
    with monkeypatch.context() as m:
        _edit(m, "grammar_tools/grammar.py")
        assert grammar_key(text, "file_input") != before
    monkeypatch.setattr(lark, "__version__", "999.0")
    assert grammar_key(text, "file_input") != before


def test_closure_follows_imports_in_function_bodies():
    """An import inside a function counts: `loading` imports the streamlining lazily."""
    files = {p.relative_to(ROOT).as_posix() for p in cache.project_closure(ROOT / "mask_store/loading.py")}
    assert {"mask_store/streamline.py", "grammar_tools/analyses/exploration.py", "grammar_tools/cache.py"} <= files
    assert not any(f.startswith("lsp_server/") for f in files)


def test_converted_weights_and_tokenizer_keys(monkeypatch):
    from lsp_server.model import converted_weights
    from mask_store.model_files import converted_tokenizer, resolve_model

    src = resolve_model("default")
    weights, tokenizer = converted_weights.converted_dir(src), converted_tokenizer(src)
    with monkeypatch.context() as m:
        _edit(m, "lsp_server/model/converted_weights.py")
        assert converted_weights.converted_dir(src) != weights
        assert converted_tokenizer(src) == tokenizer
    with monkeypatch.context() as m:
        _edit(m, "mask_store/model_files.py")
        assert converted_tokenizer(src) != tokenizer
    for library in ("transformers", "gguf"):
        with monkeypatch.context() as m:
            _bump(m, library)
            assert converted_weights.converted_dir(src) != weights
            # a GGUF file's tokenizer is read from its metadata by our own code: neither library
            assert converted_tokenizer(src) == tokenizer
    with monkeypatch.context() as m:
        _bump(m, "tokenizers")
        assert converted_tokenizer(src) != tokenizer
    with monkeypatch.context() as m:
        _edit(m, "mask_store/gguf_header.py")
        assert converted_tokenizer(src) != tokenizer
    _bump(monkeypatch, "torch")
    assert converted_weights.converted_dir(src) != weights


def test_kernel_build_key(monkeypatch, tmp_path):
    from lsp_server.model.kernels import build

    if build._compiler() is None:
        pytest.skip("no C compiler (gcc or cc) on PATH")
    import re

    included = {name for p in build.SOURCES for name in re.findall(r'#include "([^"]+)"', p.read_text())}
    assert included <= {p.name for p in build.SOURCES}  # the key covers every file the build reads
    before = build.build_target(tmp_path, isa="avx2")
    assert len({build.build_target(tmp_path, isa=isa) for isa in build.ISAS}) == 3
    assert build.build_target(tmp_path, isa="avx2", sanitize=True) != before
    for i, source in enumerate(build.SOURCES):  # every file the build compiles: the .c and its headers
        edited = tmp_path / source.name
        edited.write_bytes(source.read_bytes() + b"\n/* edited */\n")
        with monkeypatch.context() as m:
            m.setattr(build, "SOURCES", build.SOURCES[:i] + (edited,) + build.SOURCES[i + 1:])
            assert build.build_target(tmp_path, isa="avx2") != before, source.name
    # another compiler, or another version of this one
    monkeypatch.setattr(build, "compiler_identity", lambda cc: "gcc (Other) 99.1")
    assert build.build_target(tmp_path, isa="avx2") != before
