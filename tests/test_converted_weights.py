"""A GGUF file is converted once, in a child process (its peak never stays with the server):
the converted directory holds float16 matrices and float32 vectors, and the GGUF's Q4_1/Q8_0
matrices in their blocks (gguf's values exactly); a file that is not a GGUF
model gives a `ConversionError` that says which file, and leaves no directory behind."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from gguf import GGUFReader, dequantize

from lsp_server.model.converted_weights import ConversionError, converted_dir, weights_dir
from lsp_server.model.cpu_llama import matrix_cols, read_shape
from lsp_server.model.gguf_blocks import BLOCKS_FILE, read_blocks, row_order
from lsp_server.model.memory_parts import process_memory
from mask_store.model_files import ModelSource, resolve_model


def test_a_broken_gguf_file_is_a_clear_error_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("SYNTAXLOCK_CACHE", str(tmp_path / "cache"))
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    src = ModelSource("gguf", bad, "broken")
    with pytest.raises(ConversionError, match="broken.gguf"):
        weights_dir(src)
    out = converted_dir(src)
    assert not out.exists() and not list(out.parent.glob(out.name + "*"))


@pytest.mark.slow
def test_the_default_gguf_converts_in_a_child_process(tmp_path, monkeypatch):
    from safetensors import safe_open

    monkeypatch.setenv("SYNTAXLOCK_CACHE", str(tmp_path / "cache"))
    src = resolve_model("default")
    before = process_memory()["VmHWM"]
    out = weights_dir(src)
    assert out == converted_dir(src) and (out / "config.json").is_file()
    assert [p.name for p in out.parent.iterdir()] == [out.name]  # nothing written aside is left
    # the de-quantized float32 model (~540 MB) was never in this process
    assert process_memory()["VmHWM"] - before < 100 * 1024
    with safe_open(str(out / "model.safetensors"), framework="pt") as f:
        dtypes = {f.get_slice(name).get_dtype() for name in f.keys()}
        q_half = f.get_tensor("model.layers.0.self_attn.q_proj.weight")
    assert dtypes == {"F16", "F32"}
    # the GGUF's Q4_1 and Q8_0 matrices also kept in their blocks: gguf's own values, exactly
    blocks = read_blocks(out, matrix_cols(read_shape(out)))
    assert Counter(m.format.name for m in blocks.values()) == {"Q4_1": 210, "Q8_0": 1}
    assert (out / BLOCKS_FILE).stat().st_size < 100 * 2**20  # against 257 MiB of float16 matrices
    tensors = {t.name: t for t in GGUFReader(str(src.path)).tensors}
    gguf_values = {name: torch.from_numpy(dequantize(tensors[name].data, tensors[name].tensor_type))
                   for name in ("token_embd.weight", "blk.0.attn_q.weight")}
    assert torch.equal(blocks["model.embed_tokens.weight"].dequantize(), gguf_values["token_embd.weight"])
    q = blocks["model.layers.0.self_attn.q_proj.weight"].dequantize()  # rows in transformers' order
    assert row_order(gguf_values["blk.0.attn_q.weight"], q) is not None and torch.equal(q.half(), q_half)
