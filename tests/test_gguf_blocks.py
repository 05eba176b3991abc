"""A GGUF's Q4_1/Q8_0 matrices kept in their blocks (`lsp_server/model/gguf_blocks.py`): found
by name, put in the converted model's row order and checked value for value, written beside the
converted weights and read back as views of the mapped file; the CPU model computes with them
what it computes with float16 weights of the same values (prompts bit for bit; steps within the
int8 products' rounding); a truncated or corrupt file is a clear error."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, GGUFWriter, quants
from model_support import float16_exact_blocks

from lsp_server.model import gguf_blocks
from lsp_server.model.cpu_llama import Unsupported, load_cpu_llama, matrix_cols, read_shape
from lsp_server.model.kernels.block_weights import BlockFormatError, BlockMatrix, WeightFormat
from lsp_server.model.memory_parts import _is_mapped

Q4_1, Q8_0 = GGMLQuantizationType.Q4_1, GGMLQuantizationType.Q8_0


def _gguf(path, tensors) -> dict[str, np.ndarray]:
    """A GGUF file of `tensors` (name: (float32 values, type)); their de-quantized values, by name."""
    w = GGUFWriter(str(path), "llama")
    values = {}
    for name, (v, kind) in tensors.items():
        raw = quants.quantize(v, kind) if kind in (Q4_1, Q8_0) else v
        w.add_tensor(name, raw, raw_dtype=kind)
        values[name] = quants.dequantize(raw, kind) if kind in (Q4_1, Q8_0) else v
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return values


def test_the_blocks_are_found_put_in_the_converted_order_and_read_back_mapped(tmp_path):
    rng = np.random.default_rng(0)
    m = lambda *shape: (rng.standard_normal(shape) * 0.05).astype(np.float32)  # noqa: E731
    values = _gguf(tmp_path / "m.gguf", {
        "token_embd.weight": (m(48, 64), Q8_0),
        "blk.0.attn_q.weight": (m(32, 64), Q4_1),
        "blk.0.attn_k.weight": (m(16, 64), Q4_1),
        "blk.0.ffn_up.weight": (m(16, 64), Q4_1),
        "blk.0.attn_norm.weight": (m(64), GGMLQuantizationType.F32),
    })
    order = torch.randperm(16, generator=torch.Generator().manual_seed(1))
    params = {  # the converted model's: k's rows reordered (as transformers does), up's values not the file's
        "model.embed_tokens.weight": torch.from_numpy(values["token_embd.weight"]),
        "model.layers.0.self_attn.q_proj.weight": torch.from_numpy(values["blk.0.attn_q.weight"]),
        "model.layers.0.self_attn.k_proj.weight": torch.from_numpy(values["blk.0.attn_k.weight"])[order],
        "model.layers.0.mlp.up_proj.weight": torch.from_numpy(values["blk.0.ffn_up.weight"]) + 1e-3,
        "model.layers.0.input_layernorm.weight": torch.from_numpy(values["blk.0.attn_norm.weight"]),
    }
    blocks, formats = gguf_blocks.block_tensors(tmp_path / "m.gguf", params)
    assert formats == {"model.embed_tokens.weight": "Q8_0", "model.layers.0.self_attn.q_proj.weight": "Q4_1",
                       "model.layers.0.self_attn.k_proj.weight": "Q4_1"}  # up stays float16, the norm float32
    gguf_blocks.write_blocks(tmp_path, blocks, formats)
    read = gguf_blocks.read_blocks(tmp_path, {name: 64 for name in formats})
    for name, fmt in formats.items():
        assert read[name].format is WeightFormat[fmt] and _is_mapped(read[name].blocks)
        assert torch.equal(read[name].dequantize(), params[name])  # gguf's own values, in the converted order


def test_a_truncated_gguf_and_a_corrupt_blocks_file_are_clear_errors(tmp_path):
    path = tmp_path / "m.gguf"
    values = _gguf(path, {"token_embd.weight": (np.ones((48, 64), np.float32), Q8_0)})
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(ValueError, match="cut.gguf is not a readable GGUF file"):
        gguf_blocks.block_tensors(cut, {"model.embed_tokens.weight": torch.from_numpy(values["token_embd.weight"])})
    blocks, formats = gguf_blocks.block_tensors(
        path, {"model.embed_tokens.weight": torch.from_numpy(values["token_embd.weight"])})
    gguf_blocks.write_blocks(tmp_path, blocks, formats)
    with pytest.raises(BlockFormatError, match="blocks.safetensors: Q8_0 rows of 128 values take 136 bytes, not 68"):
        gguf_blocks.read_blocks(tmp_path, {"model.embed_tokens.weight": 64 * 2})  # another model's shape
    data = (tmp_path / gguf_blocks.BLOCKS_FILE).read_bytes()
    (tmp_path / gguf_blocks.BLOCKS_FILE).write_bytes(data[:-200])
    with pytest.raises(BlockFormatError, match="blocks.safetensors"):
        gguf_blocks.read_blocks(tmp_path, {"model.embed_tokens.weight": 64})


def _with_blocks(tmp_path, tiny_model_dir):
    """The tiny model with matrices whose values float16 holds exactly: one directory of float16
    matrices only, one with the same matrices also as blocks (Q8_0 embedding, Q4_1 and Q8_0
    projections), as the conversion writes them."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(tiny_model_dir / "model.safetensors"))
    half, with_blocks = tmp_path / "half", tmp_path / "blocks"
    blocks, formats = {}, {}
    for i, name in enumerate(sorted(tensors)):
        if tensors[name].dim() == 2:
            fmt = WeightFormat.Q8_0 if "embed" in name or i % 2 else WeightFormat.Q4_1
            matrix, same = float16_exact_blocks(tensors[name], fmt)
            tensors[name] = same
            blocks[name], formats[name] = matrix.blocks, fmt.name
    for d in (half, with_blocks):
        d.mkdir()
        save_file(tensors, str(d / "model.safetensors"))
        shutil.copy(tiny_model_dir / "config.json", d / "config.json")
    gguf_blocks.write_blocks(with_blocks, blocks, formats)
    return half, with_blocks, formats


def test_the_cpu_model_computes_with_the_blocks_what_float16_weights_of_those_values_give(
        tmp_path, tiny_model_dir, model_kernels):
    """A prompt (a long pass: the blocks de-quantized exactly) gives the float16 model's bits;
    steps and a verification pass (short passes: the int8 products) stay within their rounding
    of the float16 model's logits, and the verification gives each row the bits of single steps."""
    half, with_blocks, formats = _with_blocks(tmp_path, tiny_model_dir)
    a, b = load_cpu_llama(half, model_kernels), load_cpu_llama(with_blocks, model_kernels)
    assert isinstance(b.embed_table, BlockMatrix) and b.head_matrix is b.embed_table  # tied: one matrix
    assert all(isinstance(m, BlockMatrix) and _is_mapped(m.blocks) for layer in b.layers for m in layer.matrices)
    assert len(formats) == 1 + 7 * len(b.layers)
    ids = torch.randint(0, 49152, (1, 100), generator=torch.Generator().manual_seed(2))
    outputs = []
    with torch.inference_mode():
        for model in (a, b):  # a prompt (long pass), then single steps and a verification (one kernel call)
            cache = model.new_cache()
            out = [model(ids[:, :60], cache, logits_to_keep=60).logits]
            out += [model(ids[:, j : j + 1], cache).logits for j in range(60, 62)]
            out.append(model(ids[:, 62:70], cache, logits_to_keep=8).logits)
            outputs.append(out)
        cache = b.new_cache()  # the same positions, each new one a single step
        b(ids[:, :60], cache, logits_to_keep=1)
        steps = [b(ids[:, j : j + 1], cache).logits[0, -1] for j in range(60, 70)]
    floats, blocks = outputs
    assert len(blocks) == 4 and torch.equal(floats[0], blocks[0])
    for x, y in zip(floats[1:], blocks[1:]):
        assert float((x - y).norm() / x.norm()) < 0.05 and not torch.equal(x, y)
    assert all(torch.equal(steps[2 + i], blocks[3][0, i]) for i in range(8))


def test_a_corrupt_blocks_file_leaves_the_model_to_the_fallback_with_the_reason(tmp_path, tiny_model_dir,
                                                                                model_kernels):
    _, with_blocks, _ = _with_blocks(tmp_path, tiny_model_dir)
    (with_blocks / gguf_blocks.BLOCKS_FILE).write_bytes(b"not a safetensors file")
    with pytest.raises(Unsupported, match="quantized weights can't be read.*blocks.safetensors"):
        load_cpu_llama(with_blocks, model_kernels)
    cols = matrix_cols(read_shape(with_blocks))
    assert cols["model.layers.0.mlp.down_proj.weight"] == 128 and cols["model.embed_tokens.weight"] == 64


def test_the_models_memory_is_reported_by_weight_format(tmp_path, tiny_model_dir, model_kernels):
    from lsp_server.model.memory_parts import model_bytes

    _, with_blocks, formats = _with_blocks(tmp_path, tiny_model_dir)
    model = load_cpu_llama(with_blocks, model_kernels)
    got = model_bytes(model)
    read = gguf_blocks.read_blocks(with_blocks, matrix_cols(read_shape(with_blocks)))
    for fmt in ("Q4_1", "Q8_0"):
        assert got[f"{fmt} blocks"] == sum(m.blocks.numel() for m in read.values() if m.format.name == fmt)
    assert "float16" not in got and "uint8" not in got  # no float16 matrix read
    norms = (2 * len(model.layers) + 1) * 64 * 4  # float32 in the file: views of it too
    assert got["mapped"] == got["Q4_1 blocks"] + got["Q8_0 blocks"] + norms
