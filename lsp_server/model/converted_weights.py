"""A GGUF model's weights as a Hugging Face directory of safetensors, for transformers' model
classes: converted once and cached.

Only where our own forward pass can't run: on CUDA (transformers' classes, bfloat16: the CUDA
path casts the file at load) and on a CPU without our kernels (no C compiler). The CPU path
reads a GGUF file in place (`model_weights`) and never converts it.

transformers de-quantizes a GGUF file into float32 tensors (about 20 s for SmolLM2-135M); the
result is saved with its config so that the next start loads it in well under 5 s. The
matrices are saved as float16 (`HALF_DTYPE`), vectors (norms, biases) float32. The GGUF's 4- and
8-bit blocks de-quantize to values that float16 holds to within 2^-11 relative (bfloat16 would
keep 2^-8). The cached directory is keyed by the GGUF file (path, size, mtime), this code and the
versions of the libraries that read and write the tensors (transformers, gguf, torch,
safetensors), so that an upgrade converts anew instead of loading weights that another version
produced. The conversion runs in a child process (`weights_dir`), so its ~1 GB peak never
stays with the server.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch

from grammar_tools import cache
from mask_store.model_files import ModelSource

log = logging.getLogger(__name__)

LIBRARIES = ("transformers", "gguf", "torch", "safetensors")
HALF_DTYPE = torch.float16  # the matrices' dtype in the converted file
PROJECT_ROOT = Path(__file__).resolve().parents[2]  # where `lsp_server` is imported from (the child's path)


class ConversionError(RuntimeError):
    """The GGUF file can't be read; the message says which and why."""


def converted_dir(src: ModelSource) -> Path:
    """Where the converted weights of the GGUF file `src` are (or go)."""
    key = cache.content_hash(src.identity, cache.source_hash(sys.modules[__name__]), cache.library_versions(*LIBRARIES))
    return cache.cache_dir() / "models" / key


def weights_dir(src: ModelSource) -> Path:
    """A HF directory with safetensors weights: the model's own, or the converted GGUF
    (converted here first when not cached, in a child process: `convert`)."""
    if src.kind == "hf_dir":
        return src.path
    out = converted_dir(src)
    if _complete(out):
        return out
    log.info("converting %s to safetensors (once; about 20 s)", src.path)
    # De-quantizing holds the float32 model and transformers' GGUF reader (~1 GB at the peak for
    # SmolLM2-135M), and the memory freed after it mostly stays with the process (Python's and
    # malloc's heaps): a server that converted in-process held ~500 MiB more for its whole life.
    # A child process gives all of it back when it exits.
    env = os.environ | {"PYTHONPATH": os.pathsep.join(
        [str(PROJECT_ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    proc = subprocess.run([sys.executable, "-m", __name__, str(src.path), str(out)],
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        raise ConversionError(f"cannot read the GGUF model {src.path}: {why}")
    return out


def convert(gguf: Path, out: Path) -> None:
    """De-quantize the GGUF file `gguf` and write it to `out` as a Hugging Face directory
    (matrices float16, vectors float32; written aside and renamed, so a reader never sees half a
    directory, and two processes converting at once don't write into each other's)."""
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32, trust_remote_code=False
        )
    except Exception as e:
        raise ConversionError(f"{type(e).__name__}: {e}") from e
    if out.exists() and not _complete(out):  # left by something else than a rename: not ours to keep
        shutil.rmtree(out)
    # another process converting it meanwhile (the same key: the same weights) keeps its own
    with cache.folder_written_aside(out) as tmp, torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.data = p.data.to(HALF_DTYPE)
        save_model(model, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        cfg = model.config.to_dict()
        cfg.pop("quantization_config", None)
        (tmp / "config.json").write_text(json.dumps(cfg))


def _complete(out: Path) -> bool:
    return (out / "model.safetensors").is_file() and (out / "config.json").is_file()


def main(argv: list[str]) -> int:
    """`python -m lsp_server.model.converted_weights GGUF OUT` (what `weights_dir` runs)."""
    if len(argv) != 2:
        print("usage: python -m lsp_server.model.converted_weights GGUF_FILE OUT_DIR", file=sys.stderr)
        return 2
    try:
        convert(Path(argv[0]), Path(argv[1]))
    except ConversionError as e:
        print(str(e).replace("\n", " "), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
