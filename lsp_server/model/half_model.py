"""A CPU model with one float16 copy of its weights, memory-mapped from its safetensors file.

transformers loads a float16 file into float16 parameters without copying them: the tensors
view the file's pages (memory-mapped, read-only use), so the page cache holds the weights once
for every server on the machine, and a page costs memory only once read. Vectors (norms,
biases) are read again in float32 from the file (the converted GGUF keeps them float32;
transformers would have rounded them to float16). `half_weights.use_half_weights` then routes
every product through the kernels with those float16 matrices: no float32 copy of a matrix is
made. A file in another dtype (a float32 Hugging Face directory) is converted to float16 once
in memory (anonymous pages, not shared).
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from .kernels.half_weights import HALF, use_half_weights

log = logging.getLogger(__name__)


def _float32_vectors(model: torch.nn.Module, wdir: Path) -> int:
    """The model's 1-D parameters set to the file's values in float32; how many were set."""
    from safetensors import safe_open

    params = dict(model.named_parameters())
    done = 0
    for path in sorted(wdir.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                p = params.get(name)
                if p is not None and p.dim() == 1:
                    p.data = f.get_tensor(name).to(torch.float32)
                    done += 1
    return done


def load_half_model(wdir: Path, kernel) -> torch.nn.Module:
    """The model in `wdir` (safetensors) for the CPU: float16 matrices (memory-mapped where the
    file holds float16) multiplied by `kernel` (a `library.DecodeKernels`), the rest float32."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(wdir), dtype=HALF, use_safetensors=True,
                                                 trust_remote_code=False)
    model.eval()
    _float32_vectors(model, wdir)
    use_half_weights(model, kernel)
    return model

