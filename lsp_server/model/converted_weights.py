"""A GGUF model's weights as a Hugging Face directory of safetensors, converted once and cached.

transformers de-quantizes a GGUF file into float32 tensors (about 20 s for SmolLM2-135M); the
result is saved with its config so that the next start loads it in well under 5 s. The
matrices are saved as float16 (`HALF_DTYPE`), the dtype the CPU runtime multiplies by
(`kernels.half_weights`), so that it can use the file's pages as they are (memory-mapped: a
second server shares them through the page cache); vectors (norms, biases) stay float32. The
GGUF's 4- and 8-bit blocks de-quantize to values that float16 holds to within 2^-11 relative
(bfloat16 would keep 2^-8); the CUDA path casts the file to bfloat16 at load. The cached
directory is keyed by the GGUF file (path, size, mtime), this code and the versions of the
libraries that read and write the tensors (transformers, gguf, torch, safetensors), so that an
upgrade converts anew instead of loading weights that another version produced.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
from pathlib import Path

import torch

from grammar_tools import cache
from mask_store.model_files import ModelSource

log = logging.getLogger(__name__)

LIBRARIES = ("transformers", "gguf", "torch", "safetensors")
HALF_DTYPE = torch.float16  # the matrices' dtype in the converted file


class ConversionError(RuntimeError):
    """The GGUF file can't be read; the message says which and why."""


def converted_dir(src: ModelSource) -> Path:
    """Where the converted weights of the GGUF file `src` are (or go)."""
    key = cache.content_hash(src.identity, cache.source_hash(sys.modules[__name__]), cache.library_versions(*LIBRARIES))
    return cache.cache_dir() / "models" / key


def weights_dir(src: ModelSource) -> Path:
    """A HF directory with safetensors weights: the model's own, or the converted GGUF."""
    if src.kind == "hf_dir":
        return src.path
    out = converted_dir(src)
    if (out / "model.safetensors").is_file() and (out / "config.json").is_file():
        return out
    log.info("converting %s to safetensors (once; about 20 s)", src.path)
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(
            str(src.path.parent), gguf_file=src.path.name, dtype=torch.float32, trust_remote_code=False
        )
    except Exception as e:
        raise ConversionError(f"cannot read the GGUF model {src.path}: {e}") from e
    tmp = out.with_name(out.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.data = p.data.to(HALF_DTYPE)
    save_model(model, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    cfg = model.config.to_dict()
    cfg.pop("quantization_config", None)
    (tmp / "config.json").write_text(json.dumps(cfg))
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out
