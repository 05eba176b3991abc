"""A GGUF model's quantized matrices kept in their blocks, beside the converted weights.

The default model's GGUF stores its layers' matrices as Q4_1 and its token embedding (the
tied output projection) as Q8_0 (`kernels.block_weights`). The converted directory
(`converted_weights`) holds every matrix in float16 for transformers' classes (the CUDA path,
models `cpu_llama` does not compute); the CPU runtime reads these matrices from a second file,
`BLOCKS_FILE`, that holds the GGUF's own blocks: 0.63 (Q4_1) and 1.06 (Q8_0) bytes a value
instead of 2, and the file's exact values instead of float16-rounded ones. It is written once
by the conversion (`block_tensors`, in its child process) and memory-mapped when a server
loads (`read_blocks`): page cache, shared by every server on the machine.

Which GGUF tensor is which Hugging Face matrix: the llama.cpp names (`HF_NAMES`); in which row
order: transformers reorders the rows of some (Llama's q and k projections, for its rotary
layout), so each matrix's row order is found by matching the de-quantized rows against the
converted model's (`row_order`) and checked value for value; a matrix whose rows do not match
stays float16.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import numpy as np
import torch

from .kernels.block_weights import BLOCK_FORMATS, BlockFormatError, BlockMatrix, WeightFormat

log = logging.getLogger(__name__)

BLOCKS_FILE = Path("quantized") / "blocks.safetensors"  # in a converted directory (not `*.safetensors` there)
HF_NAMES = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_LAYER = re.compile(r"blk\.(\d+)\.(\w+)\.weight")


def hf_name(gguf_name: str) -> str | None:
    """The Hugging Face name of a llama.cpp matrix (None for other tensors)."""
    if gguf_name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if gguf_name == "output.weight":
        return "lm_head.weight"
    m = _LAYER.fullmatch(gguf_name)
    if m and m.group(2) in HF_NAMES:
        return f"model.layers.{m.group(1)}.{HF_NAMES[m.group(2)]}.weight"
    return None


def row_order(values: torch.Tensor, target: torch.Tensor) -> torch.Tensor | None:
    """Indices `order` with values[order] equal to `target` element for element (both float32
    [N, K]), or None where no reordering of the rows gives it. Rows are matched by a random
    projection's value (sorted), then the whole result compared."""
    if values.shape != target.shape:
        return None
    if torch.equal(values, target):
        return torch.arange(values.shape[0])
    probe = torch.from_numpy(np.random.default_rng(0).standard_normal(values.shape[1]))
    have, want = values.double() @ probe, target.double() @ probe
    order = torch.empty(values.shape[0], dtype=torch.long)
    order[torch.argsort(want)] = torch.argsort(have)
    return order if torch.equal(values[order], target) else None


def block_tensors(gguf_path: Path, params: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The block-format matrices of the GGUF file that are the float32 `params` (the converted
    model's, by Hugging Face name) in some row order: their blocks (uint8 [N, bytes a row], rows
    in the params' order) and their formats' names, by Hugging Face name. Raises ValueError
    where the file can't be read."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(gguf_path))
    except (ValueError, OSError, IndexError, KeyError) as e:  # gguf's reader says "cannot reshape ..." for a cut file
        raise ValueError(f"{gguf_path.name} is not a readable GGUF file (truncated or corrupt?): {e}") from e
    blocks: dict[str, torch.Tensor] = {}
    formats: dict[str, str] = {}
    for t in reader.tensors:
        name = hf_name(t.name)
        fmt = WeightFormat.__members__.get(t.tensor_type.name)
        param = params.get(name) if name else None
        if fmt is None or not fmt.quantized or param is None or param.dim() != 2:  # F32/BF16 stay float16
            continue
        try:
            matrix = BlockMatrix.of(torch.from_numpy(np.array(t.data, dtype=np.uint8)), fmt, param.shape[1])
        except BlockFormatError as e:
            raise ValueError(f"{gguf_path.name}: tensor {t.name}: {e}") from e
        order = row_order(matrix.dequantize(), param.detach().float())
        if order is None:
            log.warning("%s: %s's rows do not match the converted %s; kept in float16", gguf_path.name, t.name, name)
            continue
        blocks[name] = matrix.blocks[order].contiguous()
        formats[name] = fmt.name
    return blocks, formats


def write_blocks(directory: Path, blocks: dict[str, torch.Tensor], formats: dict[str, str]) -> None:
    """`BLOCKS_FILE` in `directory` (nothing where there are no block matrices)."""
    from safetensors.torch import save_file

    if blocks:
        path = directory / BLOCKS_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file(blocks, str(path), metadata=formats)


def read_blocks(wdir: Path, cols: dict[str, int]) -> dict[str, BlockMatrix]:
    """The block matrices of the converted directory `wdir` (empty where it has none), views of
    the memory-mapped file; `cols[name]`: the matrix's row length (from the model's shape).
    `BlockFormatError` naming the file where it is not what the conversion writes."""
    from safetensors import SafetensorError, safe_open

    path = Path(wdir) / BLOCKS_FILE
    if not path.is_file():
        return {}
    out: dict[str, BlockMatrix] = {}
    try:
        with safe_open(str(path), framework="pt") as f:
            formats = f.metadata() or {}
            for name in f.keys():
                fmt = WeightFormat.__members__.get(formats.get(name, ""))
                if fmt not in BLOCK_FORMATS or name not in cols:
                    raise BlockFormatError(f"{name}: format {formats.get(name)!r} or matrix unknown")
                out[name] = BlockMatrix.of(f.get_tensor(name), fmt, cols[name])
    except (BlockFormatError, SafetensorError, OSError) as e:
        raise BlockFormatError(f"{path}: {e}") from e
    return out
