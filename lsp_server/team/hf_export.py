"""A GGUF model as the Hugging Face directory vLLM loads: `config.json` with its
`architectures`, float32 `model.safetensors` in transformers' own tensor names and layout, and
the tokenizer files, made once per GGUF file and cached (`exported_dir`).

Why not the safetensors the local engine's cache holds (`model/converted_weights.py`): that
directory is written for our own loader (its config has `architectures: null`, its matrices are
float16 and it has no tokenizer), and vLLM fed it answered with an end token at once. Here
transformers' GGUF reader de-quantizes the file and `save_pretrained` writes what every
transformers-compatible loader reads (vLLM's CPU build has no GGUF kernels). Float32: the
de-quantized values exactly (SmolLM2-135M: 538 MB, 35 s once on this machine).

Run in the team environment (`python -m lsp_server.team.hf_export GGUF OUT`): its transformers
is the one vLLM reads the directory with.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from grammar_tools import cache
from mask_store.model_files import ModelSource

LIBRARIES = ("transformers", "gguf", "torch", "safetensors")
DONE = "syntaxlock-export.json"  # written last: its presence means the directory is complete


def exported_dir(src: ModelSource, versions: str) -> Path:
    """Where the export of the GGUF file `src` goes, keyed by the file, this code and the
    versions of the libraries that write it (`versions`: the team environment's)."""
    key = cache.content_hash(src.identity, cache.source_hash(sys.modules[__name__]), versions)
    return cache.cache_dir() / "team-models" / key


def is_complete(out: Path) -> bool:
    return (out / DONE).is_file() and (out / "config.json").is_file()


def export(gguf: Path, out: Path) -> None:
    """De-quantize `gguf` into a Hugging Face directory at `out` (written beside, then renamed)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = os.path.split(os.fspath(gguf))
    tmp = Path(tempfile.mkdtemp(prefix=".export-", dir=out.parent))
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype="float32")
        # the weights are plain float tensors now; the loader's GGUF marker would refuse the save
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.config.architectures = [type(model).__name__]
        tokenizer.save_pretrained(tmp)
        model.save_pretrained(tmp)
        (tmp / DONE).write_text(json.dumps({"gguf": os.fspath(gguf), "architectures": model.config.architectures}))
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m lsp_server.team.hf_export MODEL.gguf OUT_DIR", file=sys.stderr)
        return 2
    out = Path(args[1])
    out.parent.mkdir(parents=True, exist_ok=True)
    export(Path(args[0]), out)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
