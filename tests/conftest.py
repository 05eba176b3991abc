"""Shared fixtures: an isolated cache directory, the stdlib corpus, the grammar objects."""

from __future__ import annotations

import io
import os
import sysconfig
import tokenize
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# every derived artefact (parse tables, automata, mask stores, converted weights) goes to one
# cache for the whole test session; CI starts with it empty
os.environ.setdefault("SYNTAXLOCK_CACHE", str(ROOT / ".cache" / "tests"))

STDLIB = Path(sysconfig.get_paths()["stdlib"])


def _is_test_file(p: Path) -> bool:
    parts = p.relative_to(STDLIB).parts
    return any(x in ("test", "tests", "idle_test") for x in parts[:-1])


def read_source(path: Path) -> bytes | None:
    """The file as UTF-8 bytes, or None if CPython can't compile it."""
    raw = path.read_bytes()
    try:
        enc, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
        data = raw.decode(enc).encode()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(raw, str(path), "exec")
    except (SyntaxError, ValueError, UnicodeDecodeError, LookupError):
        return None
    return data


def stdlib_files(include_tests: bool = True) -> list[Path]:
    out = []
    for p in sorted(STDLIB.rglob("*.py")):
        rel = p.relative_to(STDLIB).parts
        if rel[0] == "site-packages" or any(part.startswith(".") for part in rel):
            continue
        if not include_tests and _is_test_file(p):
            continue
        out.append(p)
    return out


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


def make_tiny_model_dir(path: Path, seed: int = 0) -> Path:
    """A tiny random-weight Llama with the real SmolLM2 tokenizer, as a Hugging Face model
    directory (config.json, model.safetensors, tokenizer.json): fast stand-in for a real model."""
    import shutil

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from mask_store.model_files import resolve_model, tokenizer_json

    if (path / "model.safetensors").is_file() and (path / "tokenizer.json").is_file():
        return path
    path.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=8192,
        bos_token_id=1, eos_token_id=2, tie_word_embeddings=True,
    )
    LlamaForCausalLM(cfg).save_pretrained(path, safe_serialization=True)
    shutil.copy(tokenizer_json(resolve_model("default")), path / "tokenizer.json")
    return path


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    return make_tiny_model_dir(Path(os.environ["SYNTAXLOCK_CACHE"]) / "tiny-model")
